package dev.rbridge.rdma.tcp;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ListenParams;
import dev.rbridge.rdma.RemoteListener;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

import java.io.IOException;
import java.net.InetSocketAddress;

/**
 * A tcp-provider listener on loopback in the test's own JVM, over an {@link ArenaRegionServiceForTests} admitting
 * {@code token}, for all the tests of a class: registered as a static {@code @RegisterExtension} field, it listens
 * before the first test and closes after the last.
 */
final class LoopbackTcpListener implements BeforeAllCallback, AfterAllCallback {
    private final String token;
    private RemoteListener listener;

    LoopbackTcpListener(String token) {
        this.token = token;
    }

    @Override
    public void beforeAll(ExtensionContext context) throws IOException {
        listener = new TcpProvider().listen(new ListenParams().address(new InetSocketAddress("127.0.0.1", 0)),
                new ArenaRegionServiceForTests(token));
    }

    @Override
    public void afterAll(ExtensionContext context) {
        if (listener != null) {
            listener.close();
        }
    }

    InetSocketAddress address() {
        return listener.address();
    }
}
