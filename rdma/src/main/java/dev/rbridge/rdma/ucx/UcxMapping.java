package dev.rbridge.rdma.ucx;

import org.openucx.jucx.ucp.UcpRemoteKey;

/**
 * A region's remote address and unpacked key on a {@link UcxConnection}'s endpoint (see {@link UcxRemoteKeys}). Data
 * operations are queued under its monitor, so none is queued with a key once {@link #valid} is cleared.
 */
final class UcxMapping {
    /** What a mapping whose key was withdrawn before it was unpacked completes with: never valid, no key. */
    static final UcxMapping REVOKED = new UcxMapping(0, 0, null);

    final long address;
    final long length;
    final UcpRemoteKey rkey;
    /** Cleared, under this monitor and on the progress thread, when the memserver withdraws the key. */
    boolean valid;

    UcxMapping(long address, long length, UcpRemoteKey rkey) {
        this.address = address;
        this.length = length;
        this.rkey = rkey;
        this.valid = rkey != null;
    }
}
