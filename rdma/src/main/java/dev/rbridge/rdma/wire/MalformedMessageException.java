package dev.rbridge.rdma.wire;

/**
 * Bytes that cannot be framed as a message of the control protocol (bad magic, an impossible length, a greeting that
 * is not one): the stream can no longer be followed, and the connection that sent it is closed.
 */
public final class MalformedMessageException extends Exception {
    public MalformedMessageException(String message) {
        super(message);
    }
}
