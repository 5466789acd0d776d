package dev.rbridge.rdma;

/**
 * What a memserver is doing, as it says when asked ({@link RemoteConnection#state}).
 *
 * @param draining it takes no new clients or regions and exits once its clients have left: a bridge moves its
 *                 replicas elsewhere and lets it go
 */
public record ServerState(boolean draining) {
    /** What a memserver that predates the question is taken to say: nothing to report. */
    public static final ServerState SERVING = new ServerState(false);
}
