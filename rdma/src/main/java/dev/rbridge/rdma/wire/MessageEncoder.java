package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Writes messages of the control protocol: header and body, little-endian, into a buffer the caller provides (a
 * transport's batch buffer) or a new one. Pure: no state, no I/O. A {@link Message.Write} or {@link Message.ReadReply}
 * is written as its header and fixed fields only, the header's length counting the data the transport sends after
 * it. A LIST reply can also be written piece by piece ({@link #listReplyStart}, {@link #listEntry}), so that however
 * many regions it lists, it goes out through a buffer of fixed size.
 */
public final class MessageEncoder {
    private MessageEncoder() {}

    /**
     * Whether a LEASE reply carries its epoch, lease id and continued flag (a memserver that predates them sends 17
     * bytes; one that knows them sends all three, even an epoch of 0).
     */
    private static boolean hasGrantFields(Message.LeaseReply l) {
        return l.epoch() != dev.rbridge.rdma.Lease.NO_EPOCH || l.leaseId() != dev.rbridge.rdma.Lease.NO_ID
                || l.continued() != null;
    }

    /** Bytes {@link #encode(Message, ByteBuffer)} writes: the header and the body, without WRITE or READ data. */
    public static int size(Message m) {
        return switch (m) {
            case Message.Write w -> Protocol.HEADER + Protocol.DATA_ADDRESS;
            case Message.ReadReply r -> Protocol.HEADER;
            default -> Protocol.HEADER + (int) bodyLength(m);
        };
    }

    /** The header's body length: what follows the header on the wire, WRITE and READ data included. */
    public static long bodyLength(Message m) {
        return switch (m) { // the data path's messages first
            case Message.Read r -> Protocol.READ_BODY;
            case Message.Write w -> Protocol.DATA_ADDRESS + (long) w.length();
            case Message.ReadReply r -> r.length();
            case Message.WriteReply w -> 0;
            case Message.Zero z -> Protocol.ZERO_BODY;
            case Message.ZeroReply z -> 0;
            case Message.Flush f -> 0;
            case Message.FlushReply f -> 0;
            case Message.Hello h -> stringLength(h.token()) + stringLength(h.clientName());
            case Message.OtherVersion v -> 0;
            case Message.Allocate a -> 8 + tagLength(a.tag());
            case Message.Open o -> 8;
            case Message.ListRegions l -> 0;
            case Message.Release r -> 16;
            case Message.Retag r -> 16 + tagLength(r.tag());
            case Message.Lease l -> stringLength(l.volume()) + stringLength(l.owner()) + 16;
            case Message.Unlease u -> stringLength(u.volume()) + stringLength(u.owner()) + 8;
            case Message.Info i -> 0;
            case Message.State st -> 0;
            case Message.UcxConnect u -> u.workerAddress().isEmpty() ? 0 : 4 + u.workerAddress().length();
            case Message.MapRegion m2 -> 24;
            case Message.InvalidateDone d -> 0;
            case Message.UcxProbe p -> 0;
            case Message.AuthStart a -> stringLength(a.clientName()) + 4 + a.clientNonce().length();
            case Message.AuthProof a -> 4 + a.proof().length();
            case Message.AuthChallenge a -> 4 + a.serverNonce().length();
            case Message.AuthWelcome a -> stringLength(a.serverId()) + 16 + 4 + a.serverProof().length();
            case Message.HelloReply h -> stringLength(h.serverId()) + 16;
            case Message.AllocateReply a -> descriptorLength(a.region());
            case Message.OpenReply o -> descriptorLength(o.region());
            case Message.ListReply l -> listBodyLength(l.regions());
            case Message.ReleaseReply r -> 0;
            case Message.RetagReply r -> descriptorLength(r.region());
            case Message.LeaseReply l -> hasGrantFields(l) ? 34 : 17;
            case Message.UnleaseReply u -> 0;
            case Message.InfoReply i -> stringLength(i.serverId()) + 16;
            case Message.StateReply st -> 4;
            case Message.UcxConnectReply u -> 4 + u.workerAddress().length();
            case Message.MapReply m2 -> 16 + 4 + m2.remoteKey().length();
            case Message.UcxProbeReply p -> 8 + 4 + p.remoteKey().length();
            case Message.Invalidate i -> 4 + 8L * i.regionIds().size();
            case Message.Error e -> stringLength(e.message());
            case Message.Unreadable u -> throw new IllegalArgumentException("an unreadable message is not sent: "
                    + u.reason());
        };
    }

    /** {@code m} in a new buffer, flipped for writing out. */
    public static ByteBuffer encode(Message m) {
        ByteBuffer b = ByteBuffer.allocate(size(m)).order(ByteOrder.LITTLE_ENDIAN);
        encode(m, b);
        return b.flip();
    }

    /**
     * Writes {@code m} at {@code dst}'s position (which must be little-endian and have {@link #size} bytes left);
     * returns the bytes written, {@link #size}: a transport counts them, and the data it sends after a WRITE request or
     * a READ reply.
     */
    public static int encode(Message m, ByteBuffer dst) {
        if (dst.order() != ByteOrder.LITTLE_ENDIAN) {
            throw new IllegalArgumentException("the control protocol is little-endian");
        }
        int start = dst.position();
        long length = bodyLength(m);
        int version = m instanceof Message.OtherVersion v ? v.version() : Protocol.VERSION;
        int status = m instanceof Message.Error e ? e.status() : 0;
        header(dst, version, m.code(), m.id(), status, (int) length);
        switch (m) { // the body: the data path's, here and first; the others by family
            case Message.Read r -> dst.putLong(r.regionId()).putLong(r.key()).putLong(r.offset()).putInt(r.length());
            case Message.Write w -> dst.putLong(w.regionId()).putLong(w.key()).putLong(w.offset()); // the data follows
            case Message.Zero z -> dst.putLong(z.regionId()).putLong(z.key()).putLong(z.offset()).putLong(z.length());
            case Message.Flush _,Message.ReadReply _,Message.WriteReply _,Message.ZeroReply _,Message.FlushReply _ -> { // a READ reply's data follows
            }
            case Message.Hello _,Message.OtherVersion _,Message.HelloReply _,Message.AuthStart _,Message.AuthChallenge _,Message.AuthProof _,Message.AuthWelcome _ ->
                    putGreeting(dst, m);
            case Message.Allocate _,Message.Open _,Message.ListRegions _,Message.Release _,Message.Retag _,Message.AllocateReply _,Message.OpenReply _,Message.ListReply _,Message.ReleaseReply _,Message.RetagReply _ ->
                    putRegions(dst, m);
            case Message.Lease _,Message.Unlease _,Message.LeaseReply _,Message.UnleaseReply _ -> putLeases(dst, m);
            case Message.Info _,Message.State _,Message.InfoReply _,Message.StateReply _ -> putServer(dst, m);
            case Message.UcxConnect _,Message.MapRegion _,Message.UcxProbe _,Message.InvalidateDone _,Message.UcxConnectReply _,Message.MapReply _,Message.UcxProbeReply _,Message.Invalidate _ ->
                    putUcx(dst, m);
            case Message.Error e -> putString(dst, e.message());
            case Message.Unreadable _ -> throw new IllegalArgumentException("an unreadable message is not sent");
        }
        return dst.position() - start;
    }

    // ------------------------------------------------------------------------------------- bodies, by family

    /** HELLO, AUTH and AUTH_PROOF, their replies, and the answer to a greeting of another version. */
    private static void putGreeting(ByteBuffer dst, Message m) {
        switch (m) {
            case Message.Hello h -> {
                putString(dst, h.token());
                putString(dst, h.clientName());
            }
            case Message.HelloReply h -> {
                putString(dst, h.serverId());
                dst.putLong(h.capacityBytes()).putLong(h.freeBytes());
            }
            case Message.AuthStart a -> {
                putString(dst, a.clientName());
                putBytes(dst, a.clientNonce());
            }
            case Message.AuthChallenge a -> putBytes(dst, a.serverNonce());
            case Message.AuthProof a -> putBytes(dst, a.proof());
            case Message.AuthWelcome a -> {
                putString(dst, a.serverId());
                dst.putLong(a.capacityBytes()).putLong(a.freeBytes());
                putBytes(dst, a.serverProof());
            }
            case Message.OtherVersion _ -> {
            }
            default -> throw notOf("the greeting", m);
        }
    }

    /** ALLOCATE, OPEN, LIST, RELEASE and RETAG, and their replies. */
    private static void putRegions(ByteBuffer dst, Message m) {
        switch (m) {
            case Message.Allocate a -> {
                dst.putLong(a.length());
                putTag(dst, a.tag());
            }
            case Message.Open o -> dst.putLong(o.regionId());
            case Message.Release r -> dst.putLong(r.regionId()).putLong(r.key());
            case Message.Retag r -> {
                dst.putLong(r.regionId()).putLong(r.key());
                putTag(dst, r.tag());
            }
            case Message.AllocateReply a -> putDescriptor(dst, a.region());
            case Message.OpenReply o -> putDescriptor(dst, o.region());
            case Message.ListReply l -> {
                dst.putInt(l.regions().size());
                for (RegionInfo r : l.regions()) {
                    listEntry(dst, r);
                }
            }
            case Message.RetagReply r -> putDescriptor(dst, r.region());
            case Message.ListRegions _,Message.ReleaseReply _ -> {
            }
            default -> throw notOf("the region table", m);
        }
    }

    /** LEASE and UNLEASE, and their replies. */
    private static void putLeases(ByteBuffer dst, Message m) {
        switch (m) {
            case Message.Lease l -> {
                putString(dst, l.volume());
                putString(dst, l.owner());
                dst.putLong(l.ttlMillis()).putLong(l.leaseId());
            }
            case Message.Unlease u -> {
                putString(dst, u.volume());
                putString(dst, u.owner());
                dst.putLong(u.leaseId());
            }
            case Message.LeaseReply l -> {
                dst.putLong(l.ttlMillis()).put((byte) (l.tookOver() ? 1 : 0)).putLong(l.ownerChanges());
                if (hasGrantFields(l)) {
                    dst.putLong(l.epoch()).putLong(l.leaseId())
                            .put((byte) (Boolean.TRUE.equals(l.continued()) ? 1 : 0));
                }
            }
            case Message.UnleaseReply _ -> {
            }
            default -> throw notOf("the leases", m);
        }
    }

    /** INFO and STATE, what a memserver says about itself, and their replies. */
    private static void putServer(ByteBuffer dst, Message m) {
        switch (m) {
            case Message.InfoReply i -> {
                putString(dst, i.serverId());
                dst.putLong(i.capacityBytes()).putLong(i.freeBytes());
            }
            case Message.StateReply st -> dst.putInt(st.flags());
            case Message.Info _,Message.State _ -> {
            }
            default -> throw notOf("the server's own", m);
        }
    }

    /** UCX_CONNECT, MAP and UCX_PROBE, and their replies; INVALIDATE, which a memserver sends, and its answer. */
    private static void putUcx(ByteBuffer dst, Message m) {
        switch (m) {
            case Message.UcxConnect u -> {
                if (!u.workerAddress().isEmpty()) {
                    putBytes(dst, u.workerAddress());
                }
            }
            case Message.MapRegion r -> dst.putLong(r.regionId()).putLong(r.key()).putLong(r.length());
            case Message.UcxConnectReply u -> putBytes(dst, u.workerAddress());
            case Message.MapReply r -> {
                dst.putLong(r.address()).putLong(r.length());
                putBytes(dst, r.remoteKey());
            }
            case Message.UcxProbeReply p -> {
                dst.putLong(p.address());
                putBytes(dst, p.remoteKey());
            }
            case Message.Invalidate i -> {
                dst.putInt(i.regionIds().size());
                for (long region : i.regionIds()) {
                    dst.putLong(region);
                }
            }
            case Message.UcxProbe _,Message.InvalidateDone _ -> {
            }
            default -> throw notOf("UCX", m);
        }
    }

    /** A message routed to the wrong family: a slip in {@link #encode(Message, ByteBuffer)}'s switch. */
    private static IllegalStateException notOf(String family, Message m) {
        return new IllegalStateException(m.getClass().getSimpleName() + " is not a message of " + family);
    }

    // ------------------------------------------------------------------------------------- LIST in pieces

    /** The body length of a LIST reply of these regions (it may exceed {@link Protocol#MAX_BODY}: check). */
    public static long listBodyLength(List<RegionInfo> regions) {
        long length = 4;
        for (RegionInfo r : regions) {
            length += listEntrySize(r);
        }
        return length;
    }

    /** A LIST reply's header and region count; {@code bodyLength} from {@link #listBodyLength}. */
    public static void listReplyStart(ByteBuffer dst, long id, int count, int bodyLength) {
        header(dst, Protocol.VERSION, Opcode.LIST.code(), id, 0, bodyLength);
        dst.putInt(count);
    }

    /** Bytes one region takes in a LIST reply. */
    public static int listEntrySize(RegionInfo r) {
        return descriptorLength(r.descriptor()) + stringLength(r.owner());
    }

    /** One region of a LIST reply: its descriptor and owner. */
    public static void listEntry(ByteBuffer dst, RegionInfo r) {
        putDescriptor(dst, r.descriptor());
        putString(dst, r.owner());
    }

    // ------------------------------------------------------------------------------------- fields

    static void header(ByteBuffer dst, int version, int code, long id, int status, int length) {
        dst.putInt(Protocol.MAGIC).putShort((short) version).putShort((short) code).putLong(id).putInt(status)
                .putInt(length);
    }

    static int stringLength(String s) {
        return 2 + Math.min(s.getBytes(StandardCharsets.UTF_8).length, Protocol.MAX_STRING);
    }

    static void putString(ByteBuffer dst, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(b.length, Protocol.MAX_STRING);
        dst.putShort((short) n).put(b, 0, n);
    }

    static int tagLength(RegionTag tag) {
        return stringLength(tag.volume()) + 20;
    }

    static void putTag(ByteBuffer dst, RegionTag tag) {
        putString(dst, tag.volume());
        dst.putLong(tag.slab()).putInt(tag.replica()).putLong(tag.generation());
    }

    static int descriptorLength(RegionDescriptor d) {
        return 24 + tagLength(d.tag());
    }

    static void putDescriptor(ByteBuffer dst, RegionDescriptor d) {
        dst.putLong(d.id()).putLong(d.length()).putLong(d.key());
        putTag(dst, d.tag());
    }

    static void putBytes(ByteBuffer dst, WireBytes bytes) {
        dst.putInt(bytes.length());
        bytes.putTo(dst);
    }
}
