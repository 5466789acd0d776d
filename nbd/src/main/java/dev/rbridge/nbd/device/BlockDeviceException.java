package dev.rbridge.nbd.device;

import dev.rbridge.nbd.protocol.Errno;

/** A device failure that maps to a specific NBD error; the message travels to the client in structured replies. */
public class BlockDeviceException extends RuntimeException {
    private final Errno errno;

    public BlockDeviceException(Errno errno, String message) {
        super(message);
        this.errno = errno;
    }

    public BlockDeviceException(Errno errno, String message, Throwable cause) {
        super(message, cause);
        this.errno = errno;
    }

    public Errno errno() {
        return errno;
    }
}
