package dev.rbridge.kmod.attach;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * The kernel nbd driver's generic netlink interface ({@code include/uapi/linux/nbd-netlink.h}): hand it connected
 * sockets for a device (CONNECT), replace dead ones (RECONFIGURE), disconnect, list devices (STATUS), and hear
 * about dead links (the LINK_DEAD event of the {@code nbd_mc_group} multicast group). What nbd-client does, without
 * nbd-client or libnl.
 */
final class NbdNetlink implements AutoCloseable {
    static final String FAMILY = "nbd";
    static final String GROUP = "nbd_mc_group";
    private static final int VERSION = 1;

    static final int CMD_CONNECT = 1;
    static final int CMD_DISCONNECT = 2;
    static final int CMD_RECONFIGURE = 3;
    static final int CMD_LINK_DEAD = 4;
    static final int CMD_STATUS = 5;

    static final int ATTR_INDEX = 1;
    static final int ATTR_SIZE_BYTES = 2;
    static final int ATTR_BLOCK_SIZE_BYTES = 3;
    static final int ATTR_TIMEOUT = 4;
    static final int ATTR_SERVER_FLAGS = 5;
    static final int ATTR_CLIENT_FLAGS = 6;
    static final int ATTR_SOCKETS = 7;
    static final int ATTR_DEAD_CONN_TIMEOUT = 8;
    static final int ATTR_DEVICE_LIST = 9;
    static final int ATTR_BACKEND_IDENTIFIER = 10;
    private static final int SOCK_ITEM = 1;
    private static final int SOCK_FD = 1;
    private static final int DEVICE_ITEM = 1;
    private static final int DEVICE_INDEX = 1;
    private static final int DEVICE_CONNECTED = 2;

    /** Disconnect the device when the netlink socket that configured it closes (the attach process ends). */
    static final long CFLAG_DISCONNECT_ON_CLOSE = 1 << 1;

    /** What to configure a device with. Timeouts in seconds; 0 leaves the kernel's default. */
    record Settings(long sizeBytes, long blockSize, long serverFlags, long timeoutSeconds, long deadConnTimeoutSeconds,
            long clientFlags, String backend) {
    }

    record Device(int index, boolean connected) {
        String path() {
            return "/dev/nbd" + index;
        }
    }

    private final GenericNetlink socket;
    private final GenericNetlink.Family family;

    private NbdNetlink(GenericNetlink socket, GenericNetlink.Family family) {
        this.socket = socket;
        this.family = family;
    }

    /**
     * @param receiveTimeoutMillis how long {@link #awaitLinkDead} may block before returning empty (0: forever)
     * @throws IOException saying to load the nbd module when the kernel has no nbd family
     */
    static NbdNetlink open(long receiveTimeoutMillis) throws IOException {
        GenericNetlink g = GenericNetlink.open(receiveTimeoutMillis);
        try {
            return new NbdNetlink(g, g.family(FAMILY));
        } catch (GenericNetlink.NetlinkException e) {
            g.close();
            if (e.errno == 2) { // ENOENT
                throw new IOException("the kernel has no nbd driver loaded (no generic netlink family 'nbd'): run"
                        + " 'modprobe nbd' as root (kmod-hooks/setup-nbd.sh does it and raises max_sectors_kb)", e);
            }
            throw e;
        } catch (IOException | RuntimeException e) {
            g.close();
            throw e;
        }
    }

    /** Configures a device with the given connected sockets; returns its index. {@code index < 0}: any free one. */
    int connect(int index, int[] fds, Settings s) throws IOException {
        NetlinkAttributes a = new NetlinkAttributes();
        if (index >= 0) {
            a.u32(ATTR_INDEX, index);
        }
        a.u64(ATTR_SIZE_BYTES, s.sizeBytes()).u64(ATTR_BLOCK_SIZE_BYTES, s.blockSize())
                .u64(ATTR_SERVER_FLAGS, s.serverFlags());
        if (s.timeoutSeconds() > 0) {
            a.u64(ATTR_TIMEOUT, s.timeoutSeconds());
        }
        if (s.deadConnTimeoutSeconds() > 0) {
            a.u64(ATTR_DEAD_CONN_TIMEOUT, s.deadConnTimeoutSeconds());
        }
        if (s.clientFlags() != 0) {
            a.u64(ATTR_CLIENT_FLAGS, s.clientFlags());
        }
        if (s.backend() != null) {
            a.string(ATTR_BACKEND_IDENTIFIER, s.backend());
        }
        a.nested(ATTR_SOCKETS, sockets(fds));
        String what = "configure " + (index >= 0 ? "/dev/nbd" + index : "an nbd device");
        List<GenericNetlink.Message> replies = socket.request(family.id(), CMD_CONNECT, VERSION, a, what);
        for (GenericNetlink.Message m : replies) {
            NetlinkAttributes.Attribute i = NetlinkAttributes.find(m.attributes(), ATTR_INDEX);
            if (i != null) {
                return i.u32();
            }
        }
        if (index >= 0) {
            return index;
        }
        throw new IOException(what + ": the kernel did not say which device it used");
    }

    /** Replaces the dead sockets of a device with these connected ones. */
    void reconfigure(int index, int[] fds, String backend) throws IOException {
        NetlinkAttributes a = new NetlinkAttributes().u32(ATTR_INDEX, index);
        if (backend != null) {
            a.string(ATTR_BACKEND_IDENTIFIER, backend);
        }
        a.nested(ATTR_SOCKETS, sockets(fds));
        socket.request(family.id(), CMD_RECONFIGURE, VERSION, a, "reconnect /dev/nbd" + index);
    }

    /**
     * Tells the kernel the device's new size (RECONFIGURE with a size; kernels before 5.3 ignore it, which the caller
     * sees in sysfs).
     */
    void resize(int index, long sizeBytes, String backend) throws IOException {
        NetlinkAttributes a = new NetlinkAttributes().u32(ATTR_INDEX, index).u64(ATTR_SIZE_BYTES, sizeBytes);
        if (backend != null) { // a device configured with a backend takes reconfiguration naming it only
            a.string(ATTR_BACKEND_IDENTIFIER, backend);
        }
        socket.request(family.id(), CMD_RECONFIGURE, VERSION, a, "resize /dev/nbd" + index);
    }

    void disconnect(int index) throws IOException {
        socket.request(family.id(), CMD_DISCONNECT, VERSION, new NetlinkAttributes().u32(ATTR_INDEX, index),
                "disconnect /dev/nbd" + index);
    }

    /** Every nbd device, or just {@code index} when it is not negative. */
    List<Device> status(int index) throws IOException {
        NetlinkAttributes a = new NetlinkAttributes();
        if (index >= 0) {
            a.u32(ATTR_INDEX, index);
        }
        List<Device> out = new ArrayList<>();
        for (GenericNetlink.Message m : socket.request(family.id(), CMD_STATUS, VERSION, a, "read nbd status")) {
            NetlinkAttributes.Attribute list = NetlinkAttributes.find(m.attributes(), ATTR_DEVICE_LIST);
            if (list == null) {
                continue;
            }
            for (NetlinkAttributes.Attribute item : list.nested()) {
                if (item.type() != DEVICE_ITEM) {
                    continue;
                }
                NetlinkAttributes.Attribute i = NetlinkAttributes.find(item.nested(), DEVICE_INDEX);
                NetlinkAttributes.Attribute c = NetlinkAttributes.find(item.nested(), DEVICE_CONNECTED);
                if (i != null) {
                    out.add(new Device(i.u32(), c != null && c.u8() != 0));
                }
            }
        }
        return out;
    }

    /** Subscribes to LINK_DEAD events; use a socket of its own for this (requests would see the events too). */
    void watchLinks() throws IOException {
        Integer group = family.groups().get(GROUP);
        if (group == null) {
            throw new IOException("the kernel's nbd family has no multicast group " + GROUP);
        }
        socket.join(group);
    }

    /** The index of the next device whose link died, or -1 when the receive timeout passed first. */
    int awaitLinkDead() throws IOException {
        while (true) {
            GenericNetlink.Message m = socket.receiveEvent(family.id());
            if (m == null) {
                return -1;
            }
            if (m.command() == CMD_LINK_DEAD) {
                NetlinkAttributes.Attribute i = NetlinkAttributes.find(m.attributes(), ATTR_INDEX);
                if (i != null) {
                    return i.u32();
                }
            }
        }
    }

    private static NetlinkAttributes sockets(int[] fds) {
        NetlinkAttributes list = new NetlinkAttributes();
        for (int fd : fds) {
            list.nested(SOCK_ITEM, new NetlinkAttributes().u32(SOCK_FD, fd));
        }
        return list;
    }

    @Override
    public void close() {
        socket.close();
    }
}
