package dev.rbridge.nbd.interop;

import dev.rbridge.nbd.server.TestServer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The server against the real NBD clients people use: libnbd's tools and Python binding, qemu-io and qemu-img, fio's
 * nbd engine, and an ext4 filesystem through nbdfuse and a loop device. Each check is a script in
 * {@code src/test/resources/interop} that verifies every byte itself and fails with the first difference.
 */
@Tag("interop")
@Timeout(600)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class PeerInteropTest {
    static TestServer ts;

    @BeforeAll
    static void start() throws IOException {
        PeerTool.require("nbdinfo", "libnbd-bin");
        PeerTool.require("nbdcopy", "libnbd-bin");
        PeerTool.require("qemu-io", "qemu-utils");
        PeerTool.require("fio", "fio");
        PeerTool.require("nbdfuse", "libnbd-bin");
        PeerTool.check(30, "python3", "-c", "import nbd");
        ts = TestServer.start();
    }

    @AfterAll
    static void stop() throws IOException {
        if (ts != null) {
            ts.close();
        }
    }

    @Test
    @Order(1)
    void nbdinfoListsEveryExportOverTcpAndUnix() {
        String list = PeerTool.check(60, "nbdinfo", "--list", ts.uri(""));
        for (String name : new String[]{"disk", "small", "ro", "aligned"}) {
            assertTrue(list.contains("export=\"" + name + "\""), list);
        }
        assertTrue(list.contains("block_size_maximum: 1048576"), "per-export payload limit:\n" + list);
        String json = PeerTool.check(60, "nbdinfo", "--json", ts.unixUri("ro"));
        assertTrue(json.contains("\"export-size\": 16777216"), json);
        assertTrue(json.contains("\"is_read_only\": true"), json);
        assertTrue(json.contains("\"can_multi_conn\": true"), json);
        assertTrue(json.contains("\"base:allocation\""), json);
        String tcp = PeerTool.check(60, "nbdinfo", "--json", ts.uri("disk"));
        assertTrue(tcp.contains("\"export-size\": 1073741824"), tcp);
        assertTrue(tcp.contains("\"can_fast_zero\": true"), tcp);
    }

    @Test
    @Order(2)
    void nbdcopyRoundTripOf256MiB() {
        PeerTool.script(300, "nbdcopy_roundtrip.sh", ts.uri("disk"), "256");
    }

    @Test
    @Order(3)
    void pipelinedAioWithStructuredRepliesOnAndOff() {
        PeerTool.script(120, "aio_pipeline.py", ts.uri("disk"), "--structured", "on", "--inflight", "300");
        PeerTool.script(120, "aio_pipeline.py", ts.unixUri("disk"), "--structured", "off", "--inflight", "300");
    }

    @Test
    @Order(4)
    void multiConnFlushOnOneConnectionIsSeenOnAnother() {
        PeerTool.script(120, "multiconn.py", ts.uri("disk"));
    }

    @Test
    @Order(5)
    void trimAndWriteZeroesReadBackZeroesAndShowInBlockStatus() {
        PeerTool.script(120, "trim_zero_status.py", ts.uri("disk"), "--exact");
    }

    @Test
    @Order(6)
    void outOfRangeAndReadOnlyErrorsLeaveTheSessionWorking() {
        PeerTool.script(120, "errors.py", ts.uri("small"), String.valueOf(16 << 20));
        PeerTool.script(120, "errors_readonly.py", ts.uri("ro"));
    }

    @Test
    @Order(7)
    void qemuIoPatternsAndQemuImgCompare() {
        PeerTool.script(300, "qemu_io_patterns.sh", ts.uri("disk"));
    }

    @Test
    @Order(8)
    void fioNbdEngineWithCrc32cVerify() {
        PeerTool.script(300, "fio_verify.sh", ts.uri("disk"), "128");
    }

    @Test
    @Order(9)
    void ext4OverNbdfuseAndALoopDeviceSurvivesARemount() {
        PeerTool.script(300, "fuse_ext4.sh", ts.uri("disk"));
    }

    @Test
    @Order(10)
    void theServerIsStillHealthyAfterEverything() {
        String info = PeerTool.check(60, "nbdinfo", "--size", ts.uri("disk"));
        assertEquals("1073741824", info.trim());
    }
}
