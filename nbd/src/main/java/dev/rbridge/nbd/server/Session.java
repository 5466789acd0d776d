package dev.rbridge.nbd.server;

import dev.rbridge.nbd.device.BlockDevice;
import dev.rbridge.nbd.protocol.ClientFlags;

/**
 * What a client and this server agreed on in the {@link Handshake}, fixed for the rest of the connection: the export
 * and the transmission flags the client was sent for it, whether replies are structured, whether the
 * {@code base:allocation} metadata context was selected for this export, the block sizes announced, the client's
 * handshake flags, and the TLS wire the session runs over (null in clear).
 *
 * <p>The export's size is not part of it: a volume grows while served, and requests are checked against its size now.
 */
record Session(Export export, int transmissionFlags, boolean structuredReplies, boolean baseAllocation,
        int minimumBlockSize, int preferredBlockSize, int maximumPayload, ClientFlags clientFlags,
        SecureWire tls) {
    /** The id the handshake gives the {@code base:allocation} context, and BLOCK_STATUS replies carry. */
    static final int BASE_ALLOCATION_ID = 1;

    /** A session on {@code export}, with the block sizes it announces. */
    static Session of(Export export, int transmissionFlags, boolean structuredReplies, boolean baseAllocation,
            ClientFlags clientFlags, SecureWire tls) {
        return new Session(export, transmissionFlags, structuredReplies, baseAllocation, export.minimumBlockSize(),
                export.preferredBlockSize(), export.maximumPayload(), clientFlags, tls);
    }

    BlockDevice device() {
        return export.device();
    }
}
