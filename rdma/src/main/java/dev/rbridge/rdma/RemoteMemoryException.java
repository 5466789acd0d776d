package dev.rbridge.rdma;

/**
 * A remote-memory operation failed. {@link #status()} says why in a way code can act on; the message says it for
 * people. Futures of the data plane complete exceptionally with this.
 */
public class RemoteMemoryException extends Exception {
    /** Why an operation failed. Codes 1-63 travel on the wire; the rest arise locally. */
    public enum Status {
        BAD_REQUEST(1), AUTH_FAILED(2), NO_SUCH_REGION(3), ACCESS_DENIED(4), OUT_OF_RANGE(5), NO_CAPACITY(
                6), VERSION_MISMATCH(7), SHUTTING_DOWN(
                        8), INTERNAL(9), LEASE_HELD(10), TIMEOUT(64), CONNECTION_LOST(65), CONNECT_FAILED(66);

        private final int code;

        Status(int code) {
            this.code = code;
        }

        public int code() {
            return code;
        }

        public static Status of(int code) {
            for (Status s : values()) {
                if (s.code == code) {
                    return s;
                }
            }
            return INTERNAL;
        }
    }

    private final Status status;

    public RemoteMemoryException(Status status, String message) {
        super(message);
        this.status = status;
    }

    public RemoteMemoryException(Status status, String message, Throwable cause) {
        super(message, cause);
        this.status = status;
    }

    public Status status() {
        return status;
    }
}
