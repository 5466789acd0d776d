package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.TokenProof;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionTag;

import java.util.List;
import java.util.Objects;

/**
 * One message of the control protocol, as {@link MessageDecoder} reads it and {@link MessageEncoder} writes it: a
 * record per request and per reply, carrying the request id of its header. Replies answer the request of the same id
 * and opcode; only {@link Invalidate} goes the other way (the memserver asks, the client answers with
 * {@link InvalidateDone}). READ reply data and WRITE request data are not part of the records: they follow the message
 * on the wire and the transport moves them straight between the socket and memory.
 */
public sealed interface Message {
    /** The request id of the header: chosen by whoever asks, echoed in the answer. */
    long id();

    /**
     * The wire code of the header's opcode: a request and its reply share the opcode of the operation; an
     * {@link Error} and an {@link Unreadable} carry the code they came with. The data path's opcodes come first.
     */
    default int code() {
        return switch (this) {
            case Read _,ReadReply _ -> Opcode.READ.code();
            case Write _,WriteReply _ -> Opcode.WRITE.code();
            case Zero _,ZeroReply _ -> Opcode.ZERO.code();
            case Flush _,FlushReply _ -> Opcode.FLUSH.code();
            case Hello _,OtherVersion _,HelloReply _ -> Opcode.HELLO.code();
            case Allocate _,AllocateReply _ -> Opcode.ALLOCATE.code();
            case Open _,OpenReply _ -> Opcode.OPEN.code();
            case ListRegions _,ListReply _ -> Opcode.LIST.code();
            case Release _,ReleaseReply _ -> Opcode.RELEASE.code();
            case Retag _,RetagReply _ -> Opcode.RETAG.code();
            case Lease _,LeaseReply _ -> Opcode.LEASE.code();
            case Unlease _,UnleaseReply _ -> Opcode.UNLEASE.code();
            case Info _,InfoReply _ -> Opcode.INFO.code();
            case State _,StateReply _ -> Opcode.STATE.code();
            case UcxConnect _,UcxConnectReply _ -> Opcode.UCX_CONNECT.code();
            case MapRegion _,MapReply _ -> Opcode.MAP.code();
            case Invalidate _,InvalidateDone _ -> Opcode.INVALIDATE.code();
            case UcxProbe _,UcxProbeReply _ -> Opcode.UCX_PROBE.code();
            case AuthStart _,AuthChallenge _ -> Opcode.AUTH.code();
            case AuthProof _,AuthWelcome _ -> Opcode.AUTH_PROOF.code();
            case Error e -> e.code(); // its component's accessor, which overrides this
            case Unreadable u -> u.code();
        };
    }

    // ------------------------------------------------------------------------- requests: client to memserver

    /** The greeting, first on every connection. Shown without its token: what shows it may end up in a log. */
    record Hello(long id, String token, String clientName) implements Message {
        public Hello {
            Objects.requireNonNull(token, "token");
            Objects.requireNonNull(clientName, "clientName");
        }

        @Override
        public String toString() {
            return "Hello[id=" + id + ", token=(withheld), clientName=" + clientName + "]";
        }
    }

    /**
     * A HELLO, or a reply to one, whose header names another protocol version: its body may be laid out differently, so
     * it is skipped, not read. The memserver answers with {@code VERSION_MISMATCH}; a client says so.
     */
    record OtherVersion(long id, int version) implements Message {
    }

    record Allocate(long id, long length, RegionTag tag) implements Message {
        public Allocate {
            Objects.requireNonNull(tag, "tag");
        }
    }

    record Open(long id, long regionId) implements Message {
    }

    record ListRegions(long id) implements Message {
    }

    record Release(long id, long regionId, long key) implements Message {
    }

    record Retag(long id, long regionId, long key, RegionTag tag) implements Message {
        public Retag {
            Objects.requireNonNull(tag, "tag");
        }
    }

    /**
     * On the wire: string volume, string owner, u64 ttl, then u64 lease id (the id of this client's last grant of the
     * volume there, 0 for none); memservers that predate lease ids ignore it, and requests that predate it (no id) are
     * read as 0.
     */
    record Lease(long id, String volume, String owner, long ttlMillis, long leaseId) implements Message {
        public Lease {
            Objects.requireNonNull(volume, "volume");
            Objects.requireNonNull(owner, "owner");
        }

        public Lease(long id, String volume, String owner, long ttlMillis) {
            this(id, volume, owner, ttlMillis, dev.rbridge.rdma.Lease.NO_ID);
        }

        /** The lease id is a secret: never printed. */
        @Override
        public String toString() {
            return "Lease[id=" + id + ", volume=" + volume + ", owner=" + owner + ", ttlMillis=" + ttlMillis + "]";
        }
    }

    /** On the wire: string volume, string owner, then u64 lease id (0, or absent from older clients: none). */
    record Unlease(long id, String volume, String owner, long leaseId) implements Message {
        public Unlease {
            Objects.requireNonNull(volume, "volume");
            Objects.requireNonNull(owner, "owner");
        }

        public Unlease(long id, String volume, String owner) {
            this(id, volume, owner, dev.rbridge.rdma.Lease.NO_ID);
        }

        /** The lease id is a secret: never printed. */
        @Override
        public String toString() {
            return "Unlease[id=" + id + ", volume=" + volume + ", owner=" + owner + "]";
        }
    }

    record Info(long id) implements Message {
    }

    record State(long id) implements Message {
    }

    /** {@code length} bytes at {@code offset} of a region; the reply carries them. */
    record Read(long id, long regionId, long key, long offset, int length) implements Message {
    }

    /** {@code length} bytes of data for {@code offset} of a region follow this message on the wire. */
    record Write(long id, long regionId, long key, long offset, int length) implements Message {
    }

    record Zero(long id, long regionId, long key, long offset, long length) implements Message {
    }

    record Flush(long id) implements Message {
    }

    /**
     * Asks for the memserver worker's UCX address, giving the client worker's (empty from a client that predates it),
     * so the memserver can make an endpoint of its own to the client, with an error handler, that it closes when the
     * client goes.
     */
    record UcxConnect(long id, WireBytes workerAddress) implements Message {
    }

    /** The remote address and UCX remote key of a region's {@code [0, length)}: key and range checked. */
    record MapRegion(long id, long regionId, long key, long length) implements Message {
    }

    /** The client's answer to {@link Invalidate}: nothing issued with those keys is in flight any more. */
    record InvalidateDone(long id) implements Message {
    }

    /** Where the memserver's probe word is, for the client to read over its new UCX endpoint. */
    record UcxProbe(long id) implements Message {
    }

    // ------------------------------------------------------------------------- replies: memserver to client

    /** The first message of a client that proves the token rather than sending it: its name and nonce. */
    record AuthStart(long id, String clientName, WireBytes clientNonce) implements Message {
        public AuthStart {
            Objects.requireNonNull(clientName, "clientName");
        }
    }

    /** The memserver's nonce, the answer to {@link AuthStart}. */
    record AuthChallenge(long id, WireBytes serverNonce) implements Message {
    }

    /** The client's proof that it knows the token ({@link TokenProof#client}). */
    record AuthProof(long id, WireBytes proof) implements Message {
    }

    /** The admitted client's welcome after {@link AuthProof}: as {@link HelloReply}, and the memserver's proof. */
    record AuthWelcome(long id, String serverId, long capacityBytes, long freeBytes, WireBytes serverProof)
            implements Message {
        public AuthWelcome {
            Objects.requireNonNull(serverId, "serverId");
        }
    }

    record HelloReply(long id, String serverId, long capacityBytes, long freeBytes) implements Message {
        public HelloReply {
            Objects.requireNonNull(serverId, "serverId");
        }
    }

    record AllocateReply(long id, RegionDescriptor region) implements Message {
        public AllocateReply {
            Objects.requireNonNull(region, "region");
        }
    }

    record OpenReply(long id, RegionDescriptor region) implements Message {
        public OpenReply {
            Objects.requireNonNull(region, "region");
        }
    }

    /** Every region, keys withheld (0), with the name of the client that allocated it. */
    record ListReply(long id, List<RegionInfo> regions) implements Message {
        public ListReply {
            regions = List.copyOf(regions);
        }
    }

    record ReleaseReply(long id) implements Message {
    }

    record RetagReply(long id, RegionDescriptor region) implements Message {
        public RetagReply {
            Objects.requireNonNull(region, "region");
        }
    }

    /**
     * A LEASE granted. On the wire: u64 ttl, u8 took over (0 or 1), u64 owner changes, u64 epoch, u64 lease id, u8
     * continued (0 or 1). Each field after took over came later: memservers that predate one do not send it (read as
     * {@link dev.rbridge.rdma.Lease#UNKNOWN_OWNER_CHANGES}, {@link dev.rbridge.rdma.Lease#NO_EPOCH}, {@link
     * dev.rbridge.rdma.Lease#NO_ID} and null), and clients that predate it ignore it.
     */
    record LeaseReply(long id, long ttlMillis, boolean tookOver, long ownerChanges, long epoch, long leaseId,
            Boolean continued) implements Message {
        public LeaseReply(long id, long ttlMillis, boolean tookOver) {
            this(id, ttlMillis, tookOver, dev.rbridge.rdma.Lease.UNKNOWN_OWNER_CHANGES);
        }

        public LeaseReply(long id, long ttlMillis, boolean tookOver, long ownerChanges) {
            this(id, ttlMillis, tookOver, ownerChanges, dev.rbridge.rdma.Lease.NO_EPOCH, dev.rbridge.rdma.Lease.NO_ID,
                    null);
        }

        /** The lease id is a secret: never printed. */
        @Override
        public String toString() {
            return "LeaseReply[id=" + id + ", ttlMillis=" + ttlMillis + ", tookOver=" + tookOver + ", ownerChanges="
                    + ownerChanges + ", epoch=" + epoch + ", continued=" + continued + "]";
        }
    }

    record UnleaseReply(long id) implements Message {
    }

    record InfoReply(long id, String serverId, long capacityBytes, long freeBytes) implements Message {
        public InfoReply {
            Objects.requireNonNull(serverId, "serverId");
        }
    }

    /** {@code flags}: {@link Protocol#STATE_DRAINING}; bits this build does not know are ignored. */
    record StateReply(long id, int flags) implements Message {
    }

    /** {@code length} bytes of data follow this message on the wire. */
    record ReadReply(long id, int length) implements Message {
    }

    record WriteReply(long id) implements Message {
    }

    record ZeroReply(long id) implements Message {
    }

    /** Every earlier request of the connection is done. */
    record FlushReply(long id) implements Message {
    }

    /** The memserver worker's UCX address. */
    record UcxConnectReply(long id, WireBytes workerAddress) implements Message {
    }

    /** Where a region's memory is for UCX, and its packed remote key. */
    record MapReply(long id, long address, long length, WireBytes remoteKey) implements Message {
    }

    /** Where the probe word ({@link Protocol#UCX_PROBE_WORD}, 8 bytes) is for UCX, and its packed remote key. */
    record UcxProbeReply(long id, long address, WireBytes remoteKey) implements Message {
    }

    /** Memserver to client (the id is the memserver's): forget these regions' remote keys. */
    record Invalidate(long id, List<Long> regionIds) implements Message {
        public Invalidate {
            regionIds = List.copyOf(regionIds);
        }
    }

    /**
     * A failed request: {@code status} is a {@code RemoteMemoryException.Status} code (never 0), {@code message} says
     * why. Any opcode, a code this build does not know included.
     */
    record Error(long id, int code, int status, String message) implements Message {
        public Error {
            Objects.requireNonNull(message, "message");
            if (status == 0) {
                throw new IllegalArgumentException("an error reply has a non-zero status");
            }
        }
    }

    // ------------------------------------------------------------------------- decoded only

    /**
     * A message that was framed but cannot be read: an opcode this build does not know, or a body of the wrong size
     * or a layout that does not parse. Its bytes are consumed, so the connection can go on: a memserver answers it with
     * {@code BAD_REQUEST} and {@code reason}, a client fails the request it answers.
     */
    record Unreadable(long id, int code, String reason) implements Message {
        public Unreadable {
            Objects.requireNonNull(reason, "reason");
        }
    }
}
