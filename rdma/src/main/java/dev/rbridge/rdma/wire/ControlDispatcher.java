package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import dev.rbridge.rdma.ServerInfo;

/**
 * The memserver's side of the control protocol, for every transport that speaks it: a request becomes a call on the
 * client's {@link RegionService.Session} and the call's outcome becomes the reply, an error reply included. What
 * moves data (READ, WRITE; UCX's MAP) and how replies are written stay with the transport.
 */
public final class ControlDispatcher {
    /** Error messages are cut to this: they quote names and numbers, never anything long. */
    public static final int MAX_ERROR_CHARS = 1000;

    private ControlDispatcher() {}

    /**
     * The reply to a request that needs nothing of the transport: the region and lease operations, INFO, STATE, ZERO,
     * FLUSH, and requests that could not be read ({@code BAD_REQUEST} with the reason). Any other request is
     * {@link #unexpected}. FLUSH is answered at once: a transport that executes a connection's requests in order has
     * done everything before it by then.
     */
    public static Message answer(RegionService.Session s, Message request) {
        try {
            return switch (request) {
                case Message.Zero z -> {
                    s.zero(z.regionId(), z.key(), z.offset(), z.length());
                    yield new Message.ZeroReply(z.id());
                }
                case Message.Flush f -> new Message.FlushReply(f.id());
                case Message.Allocate a -> new Message.AllocateReply(a.id(), s.allocate(a.tag(), a.length()));
                case Message.Open o -> new Message.OpenReply(o.id(), s.open(o.regionId()));
                case Message.Release r -> {
                    s.release(r.regionId(), r.key());
                    yield new Message.ReleaseReply(r.id());
                }
                case Message.Retag r -> new Message.RetagReply(r.id(), s.retag(r.regionId(), r.key(), r.tag()));
                case Message.Lease l -> {
                    dev.rbridge.rdma.Lease lease = s.lease(l.volume(), l.owner(), l.ttlMillis(), l.leaseId());
                    yield new Message.LeaseReply(l.id(), lease.ttlMillis(), lease.tookOver(),
                            lease.ownerChanges(), lease.epoch(), lease.leaseId(), lease.continued());
                }
                case Message.Unlease u -> {
                    s.unlease(u.volume(), u.owner(), u.leaseId());
                    yield new Message.UnleaseReply(u.id());
                }
                case Message.Info i -> {
                    ServerInfo info = s.serverInfo();
                    yield new Message.InfoReply(i.id(), info.serverId(), info.capacityBytes(), info.freeBytes());
                }
                case Message.State st -> new Message.StateReply(st.id(),
                        s.state().draining() ? Protocol.STATE_DRAINING : 0);
                case Message.Unreadable u -> new Message.Error(u.id(), u.code(), Status.BAD_REQUEST.code(),
                        cut(u.reason()));
                default -> unexpected(request);
            };
        } catch (RemoteMemoryException e) {
            return error(request, e.status(), e.getMessage());
        }
    }

    /** The greeting's answer once the client is admitted. */
    public static Message.HelloReply welcome(long helloId, ServerInfo info) {
        return new Message.HelloReply(helloId, info.serverId(), info.capacityBytes(), info.freeBytes());
    }

    /** An error reply to {@code request}, its message cut to {@link #MAX_ERROR_CHARS}. */
    public static Message.Error error(Message request, Status status, String message) {
        return new Message.Error(request.id(), request.code(), status.code(), cut(message));
    }

    /**
     * {@code BAD_REQUEST} for a request this memserver does not serve: "unexpected OP_n", the answer of any memserver
     * that predates an opcode, which clients recognise as such (a ucx client asking a tcp memserver for UCX_CONNECT
     * learns that it serves another transport); a second HELLO is "unexpected HELLO".
     */
    public static Message.Error unexpected(Message request) {
        String what = request instanceof Message.Hello ? "HELLO" : "OP_" + request.code();
        return new Message.Error(request.id(), request.code(), Status.BAD_REQUEST.code(), "unexpected " + what);
    }

    /**
     * A LIST: the listing, holding one of the memserver's few listing places until the transport closes it, with the
     * reply's body length; or, when the regions do not fit one message or no listing place frees up, the error to
     * answer (the listing then holds no place).
     */
    public static Listed list(RegionService.Session s, Message.ListRegions request) {
        RegionService.Listing listing;
        try {
            listing = s.listing();
        } catch (RemoteMemoryException e) {
            return new Listed(null, 0, error(request, e.status(), e.getMessage()));
        }
        long length = MessageEncoder.listBodyLength(listing.regions());
        if (length > Protocol.MAX_BODY) {
            int n = listing.regions().size();
            listing.close();
            return new Listed(null, 0, error(request, Status.NO_CAPACITY, n + " regions take " + length
                    + " bytes to list, more than one message holds (" + Protocol.MAX_BODY + ")"));
        }
        return new Listed(listing, (int) length, null);
    }

    /** See {@link #list}: either {@code listing} and {@code bodyLength}, or {@code error}. */
    public record Listed(RegionService.Listing listing, int bodyLength, Message.Error error) {
    }

    private static String cut(String message) {
        return message.length() > MAX_ERROR_CHARS ? message.substring(0, MAX_ERROR_CHARS) + "..." : message;
    }
}
