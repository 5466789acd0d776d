package dev.rbridge.nbd.server;

/** What a running server holds now; cheap to read, for gauges. */
public interface NbdServerState {
    /** Connections open now (handshaking or in transmission). */
    int connections();

    /** The payload memory budget, in bytes. */
    long payloadBudgetBytes();

    /** Payload memory in use now (buffers being received, at the device, or waiting to be sent). */
    long payloadUsedBytes();

    /** Connections waiting for payload memory now. */
    int payloadWaiting();

    /**
     * Direct memory of released payload buffers kept for reuse now, in bytes: outside the budget's "used", at most
     * a quarter of the budget (unless configured otherwise).
     */
    long payloadPooledBytes();
}
