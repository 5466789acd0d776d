package dev.rbridge.rdma;

/**
 * Whether a memserver's withdrawn remote keys are refused by the hardware that serves them (an RDMA NIC with each
 * registration its own memory region), with the reason in a sentence. Where they are not (UCX emulating GET and PUT,
 * shared memory or cma between processes of one host, registrations UCX keeps in a cache), a withdrawn key is
 * advisory: only the client's own forgetting of it keeps it out, and the memserver keeps memory mapped for a grace
 * period after a client that may still hold its key went away.
 *
 * @param enforced whether every key this listener handed out is checked by the NIC
 * @param reason   why, for a log line, {@code /readyz} details or an operator
 */
public record KeyEnforcement(boolean enforced, String reason) {
    /** A transport that hands out no remote keys: the memserver checks every operation itself. */
    public static final KeyEnforcement NO_REMOTE_KEYS = new KeyEnforcement(true,
            "no remote keys: the memserver checks every operation itself");
}
