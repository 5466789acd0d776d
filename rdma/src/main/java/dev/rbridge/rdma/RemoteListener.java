package dev.rbridge.rdma;

import java.net.InetSocketAddress;
import java.util.Collection;
import java.util.concurrent.CompletableFuture;

/** A listening endpoint of a provider. Closing it stops accepting and closes every client connection. */
public interface RemoteListener extends AutoCloseable {
    InetSocketAddress address();

    int connectionCount();

    /**
     * Why this listener cannot take new clients although nobody closed it (its listening socket closed under it, its
     * accept thread ended), or null while it can. A memserver with such a listener is not ready.
     */
    default String problem() {
        return null;
    }

    /**
     * The memserver took these regions away (an operator's revoke). A transport that gave clients direct access to
     * their memory (ucx: registered memory and remote keys) withdraws it; the future completes when no client can
     * reach that memory any more. Transports that check every operation against the memserver's regions (tcp, local)
     * have nothing to withdraw.
     */
    default CompletableFuture<Void> withdraw(Collection<Long> regionIds) {
        return CompletableFuture.completedFuture(null);
    }

    /**
     * Whether the remote keys this listener hands out are enforced by the NIC, and why (see {@link KeyEnforcement});
     * an operator's view ({@code /readyz} details, a gauge). Transports without remote keys check every operation.
     */
    default KeyEnforcement keysEnforced() {
        return KeyEnforcement.NO_REMOTE_KEYS;
    }

    @Override
    void close();
}
