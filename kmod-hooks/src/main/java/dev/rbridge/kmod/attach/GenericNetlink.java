package dev.rbridge.kmod.attach;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * One generic netlink socket (the kernel's RPC bus for subsystems like nbd): resolve a family by name, send a
 * command and collect its replies up to the kernel's acknowledgement, or receive multicast events.
 */
final class GenericNetlink implements AutoCloseable {
    private static final int NLMSG_HDRLEN = 16;
    private static final int GENL_HDRLEN = 4;
    private static final int NLMSG_ERROR = 2;
    private static final int NLMSG_DONE = 3;
    private static final int NLM_F_REQUEST = 1;
    private static final int NLM_F_ACK = 4;
    private static final int GENL_ID_CTRL = 0x10;
    private static final int CTRL_CMD_GETFAMILY = 3;
    private static final int CTRL_ATTR_FAMILY_ID = 1;
    private static final int CTRL_ATTR_FAMILY_NAME = 2;
    private static final int CTRL_ATTR_MCAST_GROUPS = 7;
    private static final int CTRL_ATTR_MCAST_GRP_NAME = 1;
    private static final int CTRL_ATTR_MCAST_GRP_ID = 2;

    /** A family as the kernel registered it: its id and multicast groups by name. */
    record Family(String name, int id, Map<String, Integer> groups) {
    }

    /** A generic netlink message: its command and attributes. */
    record Message(int command, List<NetlinkAttributes.Attribute> attributes) {
    }

    /** The kernel refused a request; {@code errno} is positive. */
    static final class NetlinkException extends IOException {
        final int errno;

        NetlinkException(String what, int errno) {
            super(what + ": " + SocketCalls.strerror(errno));
            this.errno = errno;
        }
    }

    private final int fd;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment recvBuffer = arena.allocate(64 << 10);
    private int seq = (int) (System.nanoTime() & 0x3fffffff);

    private GenericNetlink(int fd) {
        this.fd = fd;
    }

    /** @param receiveTimeoutMillis how long a receive may block (0: forever) */
    static GenericNetlink open(long receiveTimeoutMillis) throws IOException {
        int fd = SocketCalls.socket(SocketCalls.AF_NETLINK, SocketCalls.SOCK_RAW | SocketCalls.SOCK_CLOEXEC,
                SocketCalls.NETLINK_GENERIC);
        if (fd < 0) {
            throw new IOException("cannot open a generic netlink socket: " + SocketCalls.strerror(-fd));
        }
        GenericNetlink g = new GenericNetlink(fd);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment sa = a.allocate(12); // sockaddr_nl: family, pad, pid 0 (kernel picks), groups 0
            sa.set(ValueLayout.JAVA_SHORT, 0, (short) SocketCalls.AF_NETLINK);
            int rc = SocketCalls.bind(fd, sa);
            if (rc < 0) {
                g.close();
                throw new IOException("cannot bind a generic netlink socket: " + SocketCalls.strerror(-rc));
            }
            if (receiveTimeoutMillis > 0) {
                MemorySegment tv = a.allocate(16);
                tv.set(ValueLayout.JAVA_LONG, 0, receiveTimeoutMillis / 1000);
                tv.set(ValueLayout.JAVA_LONG, 8, (receiveTimeoutMillis % 1000) * 1000);
                SocketCalls.setsockopt(fd, SocketCalls.SOL_SOCKET, SocketCalls.SO_RCVTIMEO, tv);
            }
        }
        return g;
    }

    /** @throws NetlinkException with errno ENOENT when no such family is registered (its module is not loaded) */
    Family family(String name) throws IOException {
        List<Message> replies = request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1,
                new NetlinkAttributes().string(CTRL_ATTR_FAMILY_NAME, name), "look up generic netlink family " + name);
        for (Message m : replies) {
            NetlinkAttributes.Attribute id = NetlinkAttributes.find(m.attributes(), CTRL_ATTR_FAMILY_ID);
            if (id == null) {
                continue;
            }
            Map<String, Integer> groups = new HashMap<>();
            NetlinkAttributes.Attribute g = NetlinkAttributes.find(m.attributes(), CTRL_ATTR_MCAST_GROUPS);
            if (g != null) {
                for (NetlinkAttributes.Attribute group : g.nested()) {
                    List<NetlinkAttributes.Attribute> fields = group.nested();
                    NetlinkAttributes.Attribute gn = NetlinkAttributes.find(fields, CTRL_ATTR_MCAST_GRP_NAME);
                    NetlinkAttributes.Attribute gi = NetlinkAttributes.find(fields, CTRL_ATTR_MCAST_GRP_ID);
                    if (gn != null && gi != null) {
                        groups.put(gn.string(), gi.u32());
                    }
                }
            }
            return new Family(name, id.u16(), groups);
        }
        throw new IOException("the kernel answered the lookup of family " + name + " without its id");
    }

    /** Sends one command and returns the replies that came before the kernel's acknowledgement. */
    List<Message> request(int family, int command, int version, NetlinkAttributes attributes, String what)
            throws IOException {
        int mySeq = ++seq;
        byte[] attrs = attributes.bytes();
        int len = NLMSG_HDRLEN + GENL_HDRLEN + attrs.length;
        ByteBuffer b = ByteBuffer.allocate(len).order(ByteOrder.nativeOrder());
        b.putInt(len).putShort((short) family).putShort((short) (NLM_F_REQUEST | NLM_F_ACK)).putInt(mySeq).putInt(0);
        b.put((byte) command).put((byte) version).putShort((short) 0);
        b.put(attrs);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(len);
            out.copyFrom(MemorySegment.ofArray(b.array()));
            long n = SocketCalls.send(fd, out, len);
            if (n < 0) {
                throw new NetlinkException(what + " (send)", (int) -n);
            }
        }
        List<Message> replies = new ArrayList<>();
        while (!collect(receiveRaw(what), mySeq, replies, what)) {
            // more datagrams until the kernel's acknowledgement
        }
        return replies;
    }

    /**
     * Reads one datagram the kernel sent after request {@code seq}: its messages for that request go into
     * {@code into}, others (replies to earlier requests, events) are skipped. Returns whether the datagram ended the
     * reply (the acknowledgement, or DONE after a dump). A message whose length does not fit the datagram, or is too
     * short for its own headers, is an IOException, as is an error the kernel answered ({@link NetlinkException}).
     * Pure: no socket, for tests and fuzzing.
     */
    static boolean collect(ByteBuffer in, int seq, List<Message> into, String what) throws IOException {
        while (in.remaining() >= NLMSG_HDRLEN) {
            int start = in.position();
            int mlen = in.getInt();
            int type = Short.toUnsignedInt(in.getShort());
            in.getShort(); // flags
            int mseq = in.getInt();
            in.getInt(); // port id
            if (mlen < NLMSG_HDRLEN || mlen > in.limit() - start) {
                throw new IOException(what + ": truncated netlink reply (a message of " + mlen + " bytes at " + start
                        + " in a datagram of " + in.limit() + ")");
            }
            int next = start + ((mlen + 3) & ~3);
            if (mseq != seq) {
                in.position(Math.min(in.limit(), next)); // a reply to an earlier request or an event: not ours
                continue;
            }
            if (type == NLMSG_DONE) {
                return true;
            }
            if (type == NLMSG_ERROR) {
                if (mlen < NLMSG_HDRLEN + 4) {
                    throw new IOException(what + ": a netlink error message of " + mlen + " bytes, without its code");
                }
                int error = in.getInt();
                if (error < 0) {
                    throw new NetlinkException(what, -error);
                }
                return true; // the acknowledgement
            }
            if (mlen < NLMSG_HDRLEN + GENL_HDRLEN) {
                throw new IOException(what + ": a generic netlink message of " + mlen + " bytes, without its header");
            }
            into.add(message(in, start, mlen));
            in.position(Math.min(in.limit(), next));
        }
        return false;
    }

    /** Subscribes this socket to a multicast group of a family. */
    void join(int group) throws IOException {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment g = a.allocateFrom(ValueLayout.JAVA_INT, group);
            int rc = SocketCalls.setsockopt(fd, SocketCalls.SOL_NETLINK, SocketCalls.NETLINK_ADD_MEMBERSHIP, g);
            if (rc < 0) {
                throw new NetlinkException("join netlink multicast group " + group, -rc);
            }
        }
    }

    /** The next event for {@code family}, or null when the receive timeout passed first. */
    Message receiveEvent(int family) throws IOException {
        ByteBuffer in;
        try {
            in = receiveRaw("receive netlink events");
        } catch (NetlinkException e) {
            if (e.errno == SocketCalls.EAGAIN) {
                return null;
            }
            throw e;
        }
        return event(in, family);
    }

    /**
     * The first message of {@code family} in one datagram of events, or null if it holds none. Messages too short
     * for their headers or longer than the datagram end the search: events are advisory, the caller waits for the
     * next. Pure: no socket, for tests and fuzzing.
     */
    static Message event(ByteBuffer in, int family) {
        while (in.remaining() >= NLMSG_HDRLEN) {
            int start = in.position();
            int mlen = in.getInt();
            int type = Short.toUnsignedInt(in.getShort());
            in.position(start + NLMSG_HDRLEN);
            if (mlen < NLMSG_HDRLEN || mlen > in.limit() - start) {
                return null;
            }
            if (type == family && mlen >= NLMSG_HDRLEN + GENL_HDRLEN) {
                return message(in, start, mlen);
            }
            in.position(Math.min(in.limit(), start + ((mlen + 3) & ~3)));
        }
        return null;
    }

    private ByteBuffer receiveRaw(String what) throws IOException {
        while (true) {
            long n = SocketCalls.recv(fd, recvBuffer, recvBuffer.byteSize());
            if (n == -SocketCalls.EINTR) {
                continue;
            }
            if (n < 0) {
                throw new NetlinkException(what + " (receive)", (int) -n);
            }
            return recvBuffer.asSlice(0, n).asByteBuffer().order(ByteOrder.nativeOrder());
        }
    }

    private static Message message(ByteBuffer in, int start, int mlen) {
        int command = Byte.toUnsignedInt(in.get(start + NLMSG_HDRLEN));
        ByteBuffer attrs = in.duplicate().order(ByteOrder.nativeOrder()).position(start + NLMSG_HDRLEN + GENL_HDRLEN)
                .limit(start + mlen);
        // copy out: the receive buffer is reused by the next receive
        ByteBuffer copy = ByteBuffer.allocate(attrs.remaining()).order(ByteOrder.nativeOrder()).put(attrs).flip();
        return new Message(command, NetlinkAttributes.parse(copy));
    }

    @Override
    public void close() {
        SocketCalls.close(fd);
        arena.close();
    }
}
