package dev.rbridge.memserver;

/**
 * The whole provider contract again over the tcp provider with three lanes per connection (the bridge's default is
 * four): every guarantee must hold when data operations spread over several TCP connections and everything else
 * stays on the first; a killed or frozen memserver must fail every lane's pending operations.
 */
class TcpLanesProviderContractTest extends TcpProviderContractTest {
    @Override
    int lanes() {
        return 3;
    }
}
