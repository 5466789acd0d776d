package dev.rbridge.nbd.protocol;

/** The error values the NBD spec allows in replies; their numbers are fixed by the spec, not by the host. */
public enum Errno {
    EPERM(1, "operation not permitted"), EIO(5, "input/output error"), ENOMEM(12, "cannot allocate memory"), EINVAL(22,
            "invalid argument"), ENOSPC(28, "no space left on device"), EOVERFLOW(75, "value too large"), ENOTSUP(95,
                    "operation not supported"), ESHUTDOWN(108, "server is shutting down");

    private final int code;
    private final String description;

    Errno(int code, String description) {
        this.code = code;
        this.description = description;
    }

    public int code() {
        return code;
    }

    public String description() {
        return description;
    }
}
