package dev.rbridge.kmod.attach;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.rbridge.nbd.device.SparseMemoryDevice;
import dev.rbridge.nbd.protocol.Nbd;
import dev.rbridge.nbd.server.Export;
import dev.rbridge.nbd.server.ListenAddress;
import dev.rbridge.nbd.server.NbdServer;
import dev.rbridge.nbd.server.NbdServerConfig;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/**
 * The parts of attach that run without the kernel's nbd driver (this host has none; the guest lab test drives the
 * whole): the client handshake against the real NBD server over TCP and a Unix socket, the netlink codec, and
 * generic netlink itself against the kernel's always-present controller family.
 */
class AttachPartsTest {

    @Test
    void handshakeLearnsSizeFlagsAndBlockSizesFromTheRealServer() throws Exception {
        Path dir = Files.createTempDirectory("attach");
        Path sock = dir.resolve("nbd.sock");
        NbdServerConfig config = NbdServerConfig.builder()
                .listen(new ListenAddress.Tcp("127.0.0.1", 0)).listen(new ListenAddress.Unix(sock))
                .export(new Export("disk", "", new SparseMemoryDevice(64L << 20), false, 4096, 4096, 1 << 20))
                .export(new Export("ro", "", new SparseMemoryDevice(1L << 20), true, 1, 4096, 1 << 20))
                .build();
        try (NbdServer server = NbdServer.start(config)) {
            ListenAddress.Tcp tcp = (ListenAddress.Tcp) server.addresses().getFirst();
            Attacher.Target target = Attacher.Target.parse("nbd://127.0.0.1:" + tcp.port() + "/disk");
            try (NativeSocket s = target.open()) {
                s.receiveTimeout(10_000);
                NbdClientHandshake.ExportInfo info = NbdClientHandshake.go(s, "disk");
                assertEquals(64L << 20, info.size());
                assertEquals(4096, info.minimumBlock());
                assertEquals(1 << 20, info.maximumPayload());
                assertTrue(info.multiConn());
                assertFalse(info.readOnly());
                assertTrue((info.flags() & Nbd.FLAG_HAS_FLAGS) != 0);
                // the socket is now in transmission: a simple-reply READ works on it, as the kernel will send
                ByteBuffer read = ByteBuffer.allocate(28);
                read.putInt(0x25609513).putShort((short) 0).putShort((short) Nbd.CMD_READ).putLong(7).putLong(0)
                        .putInt(4096);
                s.writeAll(read.flip());
                ByteBuffer reply = ByteBuffer.allocate(16 + 4096);
                s.readFully(reply);
                reply.flip();
                assertEquals(Nbd.SIMPLE_REPLY_MAGIC, reply.getInt(), "simple replies: no structured replies asked");
                assertEquals(0, reply.getInt());
                assertEquals(7, reply.getLong());
            }
            try (NativeSocket s = Attacher.Target.parse("nbd+unix:///ro?socket=" + sock).open()) {
                assertTrue(NbdClientHandshake.go(s, "ro").readOnly());
            }
            try (NativeSocket s = target.open()) { // what a watching attach asks every few seconds
                s.receiveTimeout(10_000);
                assertEquals(64L << 20, NbdClientHandshake.info(s, "disk").size());
                // after OPT_ABORT the server acknowledges and closes: nothing is left in transmission
                ByteBuffer ack = ByteBuffer.allocate(20);
                s.readFully(ack);
                assertEquals(Nbd.OPT_ABORT, ack.flip().getInt(8));
            }
            try (NativeSocket s = target.open()) {
                IOException e = assertThrows(IOException.class, () -> NbdClientHandshake.go(s, "nosuch"));
                assertTrue(e.getMessage().contains("no such export") && e.getMessage().contains("nosuch"),
                        e.getMessage());
            }
        }
    }

    @Test
    void connectingToNothingSaysWhere() {
        IOException e = assertThrows(IOException.class,
                () -> NativeSocket.connect(new InetSocketAddress("127.0.0.1", 1)));
        assertTrue(e.getMessage().contains("127.0.0.1:1") && e.getMessage().contains("refused"), e.getMessage());
    }

    @Test
    void targetsParseLikeLibnbdUris() {
        Attacher.Target t = Attacher.Target.parse("nbd://10.0.0.7/disk");
        assertEquals(10809, t.tcp().getPort());
        assertEquals("disk", t.export());
        assertEquals("nbd://10.0.0.7:10809/disk", t.uri());
        Attacher.Target u = Attacher.Target.parse("nbd+unix:///scratch?socket=/run/rb.sock");
        assertEquals(Path.of("/run/rb.sock"), u.unix());
        assertEquals("scratch", u.export());
        IllegalArgumentException tls = assertThrows(IllegalArgumentException.class,
                () -> Attacher.Target.parse("nbds://h/disk"));
        assertTrue(tls.getMessage().contains("cannot use TLS") && tls.getMessage().contains("nbd+unix"),
                tls.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Attacher.Target.parse("nbd+unix:///disk"));
        assertEquals(3, Attacher.parseDevice("/dev/nbd3"));
        assertEquals(12, Attacher.parseDevice("nbd12"));
        assertEquals(0, Attacher.parseDevice("0"));
        assertThrows(IllegalArgumentException.class, () -> Attacher.parseDevice("/dev/sda"));
        assertThrows(IllegalArgumentException.class, () -> new Attacher.Options(-1, 1, 3000, 30, 60, false));
        assertThrows(IllegalArgumentException.class, () -> new Attacher.Options(-1, 0, 4096, 30, 60, false));
    }

    @Test
    void netlinkAttributesRoundTripWithPaddingAndNesting() throws IOException {
        byte[] bytes = new NetlinkAttributes().u32(1, 7).u64(2, 1L << 40).string(10, "nbd://h:1/disk")
                .nested(7, new NetlinkAttributes().nested(1, new NetlinkAttributes().u32(1, 42))
                        .nested(1, new NetlinkAttributes().u32(1, 43)))
                .bytes();
        assertEquals(0, bytes.length % 4, "attributes are padded to 4 bytes");
        List<NetlinkAttributes.Attribute> a =
                NetlinkAttributes.parse(ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder()));
        assertEquals(4, a.size());
        assertEquals(7, NetlinkAttributes.find(a, 1).u32());
        assertEquals(1L << 40, NetlinkAttributes.find(a, 2).u64());
        assertEquals("nbd://h:1/disk", NetlinkAttributes.find(a, 10).string());
        List<NetlinkAttributes.Attribute> socks = NetlinkAttributes.find(a, 7).nested();
        assertEquals(2, socks.size());
        assertEquals(43, NetlinkAttributes.find(socks.get(1).nested(), 1).u32());
        // a truncated attribute ends the list instead of reading past it
        byte[] cut = Arrays.copyOf(bytes, bytes.length - 3);
        assertTrue(NetlinkAttributes.parse(ByteBuffer.wrap(cut).order(ByteOrder.nativeOrder())).size() < 4);
    }

    @Test
    void genericNetlinkResolvesTheKernelsControllerAndExplainsAMissingNbdDriver() throws Exception {
        try (GenericNetlink g = GenericNetlink.open(5000)) {
            GenericNetlink.Family ctrl = g.family("nlctrl"); // the controller itself: every kernel has it
            assertEquals(0x10, ctrl.id());
            assertTrue(ctrl.groups().containsKey("notify"), "nlctrl's multicast group: " + ctrl.groups());
            try (GenericNetlink events = GenericNetlink.open(200)) {
                events.join(ctrl.groups().get("notify")); // what attach does with nbd's group
                assertEquals(null, events.receiveEvent(ctrl.id()), "nothing happened: the receive times out");
            }
            GenericNetlink.NetlinkException e = assertThrows(GenericNetlink.NetlinkException.class,
                    () -> g.family("rbnosuchfam"));
            assertEquals(2, e.errno, "ENOENT");
        }
        if (!Files.exists(Path.of("/sys/module/nbd"))) {
            IOException e = assertThrows(IOException.class, () -> NbdNetlink.open(1000));
            assertTrue(e.getMessage().contains("modprobe nbd"), e.getMessage());
        }
    }
}
