package dev.rbridge.nbd.server;

import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.protocol.Errno;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.protocol.Request;

/**
 * Decides whether a decoded request may go to the device, before anything is spent on it: its command and flags, the
 * export's write protection, the payload limit, the export's range and block alignment, and what BLOCK_STATUS needs
 * negotiated. A refused request gets an error reply with the spec's error number, and the session goes on.
 */
final class RequestValidator {
    /** Why a request is refused before it reaches the device. */
    record Rejection(Errno errno, String reason) {
    }

    private final Session session;
    private final Export export;
    private final BlockDevice device;

    RequestValidator(Session session) {
        this.session = session;
        this.export = session.export();
        this.device = session.device();
    }

    /** Null when the request may go to the device. */
    Rejection validate(Request r) {
        int type = r.type();
        int allowed = allowedFlags(type);
        if (allowed < 0) {
            return new Rejection(Errno.EINVAL, "unknown command " + type);
        }
        if ((r.flags() & ~allowed) != 0) {
            return new Rejection(Errno.EINVAL, "flags 0x" + Integer.toHexString(r.flags() & ~allowed)
                    + " are not valid on " + Nbd.commandName(type));
        }
        boolean writes = type == Nbd.CMD_WRITE || type == Nbd.CMD_TRIM || type == Nbd.CMD_WRITE_ZEROES;
        if (writes && export.readOnly()) {
            return new Rejection(Errno.EPERM, "export '" + export.name() + "' is read-only");
        }
        if (type == Nbd.CMD_FLUSH) {
            return r.offset() != 0 || r.length() != 0
                    ? new Rejection(Errno.EINVAL, "FLUSH must have offset and length zero")
                    : null;
        }
        if ((type == Nbd.CMD_READ || type == Nbd.CMD_WRITE)
                && (r.payloadDiscarded() || r.length() > session.maximumPayload())) {
            // The payload (if any) was skipped, so the stream stays framed and the session goes on.
            return new Rejection(Errno.EOVERFLOW, "length " + r.length() + " exceeds the maximum payload of "
                    + session.maximumPayload());
        }
        Rejection range = checkRange(r, writes);
        if (range != null || type != Nbd.CMD_BLOCK_STATUS) {
            return range;
        }
        if (!session.baseAllocation()) {
            return new Rejection(Errno.EINVAL, "BLOCK_STATUS needs the base:allocation context negotiated");
        }
        if (r.length() == 0) {
            return new Rejection(Errno.EINVAL, "BLOCK_STATUS needs a non-zero length");
        }
        return null;
    }

    /** The flags a command may carry in this session, or -1 for a command this server does not know. */
    private int allowedFlags(int type) {
        return switch (type) {
            case Nbd.CMD_READ -> Nbd.CMD_FLAG_FUA | (session.structuredReplies() ? Nbd.CMD_FLAG_DF : 0);
            case Nbd.CMD_WRITE, Nbd.CMD_FLUSH, Nbd.CMD_TRIM, Nbd.CMD_CACHE -> Nbd.CMD_FLAG_FUA;
            case Nbd.CMD_WRITE_ZEROES -> Nbd.CMD_FLAG_FUA | Nbd.CMD_FLAG_NO_HOLE
                    | (device.fastZero() ? Nbd.CMD_FLAG_FAST_ZERO : 0);
            case Nbd.CMD_BLOCK_STATUS -> Nbd.CMD_FLAG_FUA | Nbd.CMD_FLAG_REQ_ONE;
            default -> -1;
        };
    }

    /** The request's range within the export, and aligned to its minimum block size; null when it is. */
    private Rejection checkRange(Request r, boolean writes) {
        // The export's size now, not at the handshake: a volume only grows while served, and a client told of the
        // growth some other way uses its open connections for the new range (the kernel's nbd device after attach
        // resized it through netlink).
        long size = export.size();
        if (r.offset() < 0 || r.offset() > size || r.length() > size - r.offset()) {
            return new Rejection(writes ? Errno.ENOSPC : Errno.EINVAL, "range " + Long.toUnsignedString(r.offset())
                    + "+" + r.length() + " is beyond the end of the export (" + size + " bytes)");
        }
        int min = session.minimumBlockSize();
        if (min > 1 && ((r.offset() | r.length()) & (min - 1)) != 0) {
            return new Rejection(Errno.EINVAL, "offset and length must be multiples of the minimum block size " + min);
        }
        return null;
    }
}
