package dev.rbridge.memserver;

/**
 * The whole provider contract again over the tcp provider in caller-driven mode: the suite waits on nearly every
 * operation, so its own threads read the replies, including those of the thousands of concurrent operations nobody
 * waits on individually, and the SIGKILL and SIGSTOP cases find a waiting caller blocked in the socket read.
 */
class TcpCallerDrivenProviderContractTest extends TcpProviderContractTest {
    @Override
    boolean callerDriven() {
        return true;
    }
}
