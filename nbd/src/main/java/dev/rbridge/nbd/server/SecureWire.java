package dev.rbridge.nbd.server;

/** A {@link Wire} that is TLS over the socket: X.509 through JSSE ({@link TlsWire}) or PSK ({@link PskTlsWire}). */
interface SecureWire extends Wire {
    /** Decrypted bytes already here, which a read returns without touching the socket. */
    boolean bufferedInput();

    /** Says goodbye (close_notify) if the socket takes it now; never waits, never throws. */
    void closeQuietly();
}
