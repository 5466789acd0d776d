package dev.rbridge.cli.serve;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The interop scripts that {@code PeerInteropTest} runs against the in-memory server, now against the real deployment:
 * {@code rbridge serve} in its own JVM, in front of two {@code rbridge memserver} processes over the tcp transport,
 * every volume with {@code replicas=2} (so every write goes to both memservers and reads are spread over them).
 * One cluster serves the whole class; scripts that need a fresh or a special export get their own volume:
 * <ul>
 *   <li>{@code disk} (1 GiB, 16 MiB slabs): nbdcopy, aio pipeline, multi-conn, qemu-io, fio verify, ext4, in turn
 *   (each script writes before it checks, so earlier content does not matter);</li>
 *   <li>{@code tz} (256 MiB): trim/zero/block status, which needs a never-written MiB;</li>
 *   <li>{@code small} (16 MiB, 4 MiB slabs): out-of-range error codes at a known size;</li>
 *   <li>{@code ro} (16 MiB, read-only): EPERM on every kind of write;</li>
 *   <li>{@code aligned} (16 MiB, minimum block 512): listed only;</li>
 *   <li>{@code slabs} (64 MiB, 4 MiB slabs): the bridge's own TRIM/WRITE_ZEROES/BLOCK_STATUS semantics.</li>
 * </ul>
 * At the end the bridge's admin interface must show every volume healthy and every allocated slab on two replicas on
 * two different memservers.
 */
@Timeout(600)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Tag("interop")
class ServeInteropTest {
    private static final long MiB = 1 << 20;

    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    static ServeCluster cluster;

    @BeforeAll
    static void start() throws IOException {
        PeerTool.require("nbdinfo", "libnbd-bin");
        PeerTool.require("nbdcopy", "libnbd-bin");
        PeerTool.require("qemu-io", "qemu-utils");
        PeerTool.require("fio", "fio");
        PeerTool.require("nbdfuse", "libnbd-bin");
        PeerTool.check(30, "python3", "-c", "import nbd");
        cluster = LOGS.watch(ServeCluster.builder("interop")
                .memservers(2)
                .capacity("2G")
                .unix(true)
                // Three tcp lanes to each memserver (the default on this 2-core host is one): every script also checks
                // that data spread over several connections comes back whole.
                .bridgeArgs("--lanes", "3")
                .volume("disk,size=1G,replicas=2,slab=16M")
                .volume("tz,size=256M,replicas=2,slab=16M")
                .volume("small,size=16M,replicas=2,slab=4M,description=16 MiB in 4 MiB slabs")
                .volume("ro,size=16M,replicas=2,slab=4M,ro,description=read-only")
                .volume("aligned,size=16M,replicas=2,min-block=512,description=minimum block 512")
                .volume("slabs,size=64M,replicas=2,slab=4M")
                .start());
    }

    /** Runs an interop script (it fails the test with the script's output) and shows its summary line. */
    private static void script(long timeoutSeconds, String name, String... args) {
        System.out.print(PeerTool.script(timeoutSeconds, name, args));
    }

    @AfterAll
    static void stop() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    @Order(1)
    void nbdinfoListsEveryVolumeOverTcpAndUnix() {
        String list = PeerTool.check(60, "nbdinfo", "--list", cluster.uri(""));
        for (String name : new String[]{"disk", "tz", "small", "ro", "aligned"}) {
            assertTrue(list.contains("export=\"" + name + "\""), list);
        }
        assertTrue(list.contains("block_size_maximum: 33554432"), "serve's default --max-payload 32M:\n" + list);
        assertTrue(list.contains("block_size_minimum: 512"), "the aligned volume's minimum block:\n" + list);
        String json = PeerTool.check(60, "nbdinfo", "--json", cluster.unixUri("ro"));
        assertTrue(json.contains("\"export-size\": 16777216"), json);
        assertTrue(json.contains("\"is_read_only\": true"), json);
        assertTrue(json.contains("\"can_multi_conn\": true"), json);
        assertTrue(json.contains("\"base:allocation\""), json);
        String tcp = PeerTool.check(60, "nbdinfo", "--json", cluster.uri("disk"));
        assertTrue(tcp.contains("\"export-size\": 1073741824"), tcp);
        assertTrue(tcp.contains("\"can_fast_zero\": true"), tcp);
        assertTrue(tcp.contains("\"is_read_only\": false"), tcp);
    }

    @Test
    @Order(2)
    void nbdcopyRoundTripOf256MiB() {
        script(300, "nbdcopy_roundtrip.sh", cluster.uri("disk"), "256");
    }

    @Test
    @Order(3)
    void pipelinedAioWithStructuredRepliesOnAndOff() {
        script(120, "aio_pipeline.py", cluster.uri("disk"), "--structured", "on", "--inflight", "300");
        script(120, "aio_pipeline.py", cluster.unixUri("disk"), "--structured", "off", "--inflight", "300");
    }

    @Test
    @Order(4)
    void multiConnFlushOnOneConnectionIsSeenOnAnother() {
        script(120, "multiconn.py", cluster.uri("disk"));
    }

    @Test
    @Order(5)
    void trimAndWriteZeroesReadBackZeroesAndShowInBlockStatus() {
        // --exact: the same 4 KiB semantics as the in-memory device. A never-written slab is HOLE|ZERO; inside an
        // allocated slab the bridge remembers which blocks a TRIM or WRITE_ZEROES left zero (HOLE too unless NO_HOLE).
        // The fresh MiB at 7/8 of 'tz' (224 MiB) is in slab 14, which nothing writes; the area is slab 4.
        script(120, "trim_zero_status.py", cluster.uri("tz"), "--exact");
    }

    @Test
    @Order(5)
    void trimZeroAndBlockStatusFollowTheSlabs() {
        // trim_zero_status.py's checks with the bridge's allocation granularity (a slab), on a 64 MiB volume of
        // 4 MiB slabs: content after partial, whole-slab and cross-slab TRIM / WRITE_ZEROES (plain, NO_HOLE,
        // FAST_ZERO, unaligned), extents on slab boundaries, never-written slabs HOLE|ZERO (also after a TRIM or
        // WRITE_ZEROES, which must not allocate them), slabs with data exactly data, every ZERO extent really zero,
        // REQ_ONE. Which slabs got memory is then checked through the admin interface.
        long slab = 4 * MiB;
        String out = PeerTool.check(120, "python3", "-c", SLAB_SEMANTICS, cluster.uri("slabs"), String.valueOf(slab));
        System.out.print(out);
        List<Long> allocated = cluster.slabs("slabs", false).stream().map(s -> (Long) s.get("slab")).toList();
        assertEquals(List.of(1L, 2L, 3L, 4L, 6L, 7L), allocated,
                "only written slabs have memory (zeroing a never-written slab allocates nothing)");
    }

    /** The program behind {@link #trimZeroAndBlockStatusFollowTheSlabs()}: python3 -c PROGRAM URI SLAB_BYTES. */
    private static final String SLAB_SEMANTICS =
            """
                    import os, sys
                    import nbd
                    NAME = "slab_semantics"
                    def fail(msg):
                        sys.stderr.write("%s: FAIL: %s\\n" % (NAME, msg))
                        sys.exit(1)
                    uri, SLAB = sys.argv[1], int(sys.argv[2])
                    MiB = 1 << 20
                    HOLE, ZERO, CTX = nbd.STATE_HOLE, nbd.STATE_ZERO, nbd.CONTEXT_BASE_ALLOCATION
                    h = nbd.NBD()
                    h.add_meta_context(CTX)
                    h.connect_uri(uri)
                    if not h.can_meta_context(CTX):
                        fail("base:allocation not negotiated")
                    size = h.get_size()
                    n = size // SLAB
                    if n < 10 or size % SLAB:
                        fail("want a volume of >= 10 whole slabs, got %d bytes" % size)
                    S = lambda i: i * SLAB

                    def status(off, count, flags=0):
                        calls = []
                        def cb(ctx, o, entries, err):
                            if ctx == CTX:
                                calls.append(list(entries))
                            return 0
                        h.block_status(count, off, cb, flags)
                        if len(calls) != 1 or len(calls[0]) < 2 or len(calls[0]) % 2:
                            fail("block_status(%d, %d): callbacks %r" % (off, count, calls))
                        out, pos = [], off
                        for i in range(0, len(calls[0]), 2):
                            ln, fl = calls[0][i], calls[0][i + 1]
                            if ln <= 0 or pos + ln > size:
                                fail("block_status(%d, %d): bad extent [%d,+%d)" % (off, count, pos, ln))
                            out.append((pos, ln, fl))
                            pos += ln
                        return out

                    # Slab 0 never written. Slab 1: data, then partial TRIM / ZERO / NO_HOLE / FAST_ZERO / unaligned ZERO.
                    d1 = bytearray(os.urandom(SLAB))
                    h.pwrite(bytes(d1), S(1))
                    def zero_model(buf, lo, ln):
                        buf[lo:lo + ln] = bytes(ln)
                    h.trim(MiB, S(1) + MiB); zero_model(d1, MiB, MiB)
                    h.zero(MiB // 2, S(1) + 2 * MiB); zero_model(d1, 2 * MiB, MiB // 2)
                    h.zero(MiB // 4, S(1) + 3 * MiB, nbd.CMD_FLAG_NO_HOLE); zero_model(d1, 3 * MiB, MiB // 4)
                    fast = "not advertised"
                    if h.can_fast_zero():
                        h.zero(65536, S(1) + 3 * MiB + MiB // 2, nbd.CMD_FLAG_FAST_ZERO); zero_model(d1, 3 * MiB + MiB // 2, 65536)
                        fast = "done"
                    h.zero(5000, S(1) + 100); zero_model(d1, 100, 5000)
                    # Slab 2: data, then TRIM of the whole slab; slab 3: data, then WRITE_ZEROES of the whole slab.
                    h.pwrite(os.urandom(SLAB), S(2)); h.trim(SLAB, S(2))
                    h.pwrite(os.urandom(SLAB), S(3)); h.zero(SLAB, S(3))
                    # Slab 4: data; a 2 MiB WRITE_ZEROES across into never-written slab 5 (which must stay a hole).
                    d4 = bytearray(os.urandom(SLAB))
                    h.pwrite(bytes(d4), S(4))
                    h.zero(2 * MiB, S(5) - MiB); zero_model(d4, SLAB - MiB, MiB)
                    # Slab 6: TRIM and WRITE_ZEROES (NO_HOLE) on a never-written slab: still a hole.
                    h.trim(SLAB, S(6)); h.zero(MiB, S(6) + MiB, nbd.CMD_FLAG_NO_HOLE)
                    # Slab 7: one byte at its very end.
                    h.pwrite(b"\\x5a", S(8) - 1)
                    h.flush()

                    want = {1: bytes(d1), 4: bytes(d4), 7: bytes(SLAB - 1) + b"\\x5a"}
                    content = {}
                    for i in list(range(0, 10)) + [n - 1]:
                        got = h.pread(SLAB, S(i))
                        exp = want.get(i, bytes(SLAB))
                        if got != exp:
                            d = next(k for k in range(SLAB) if got[k] != exp[k])
                            fail("slab %d: read differs at export offset %d: expected 0x%02x got 0x%02x"
                                 % (i, S(i) + d, exp[d], got[d]))
                        content[i] = got

                    exts, pos = [], 0
                    while pos < size:
                        got = status(pos, min(size - pos, 64 * MiB))
                        exts += got
                        pos = got[-1][0] + got[-1][1]
                    # Allocation is per slab (a never-written slab is HOLE|ZERO as a whole); inside an allocated slab the
                    # bridge reports, per 4 KiB block, what a TRIM / WRITE_ZEROES left zero. Never a lie: a block with the
                    # ZERO bit reads as zeroes, a block holding data reports neither HOLE nor ZERO.
                    B = 4096
                    flags = {}
                    for (o, l, f) in exts:
                        if o % B or (o + l) % B:
                            fail("extent [%d,+%d) flags %d does not fall on 4 KiB blocks" % (o, l, f))
                        for b in range(o // B, (o + l) // B):
                            flags[b] = f & 3
                    per_slab = SLAB // B
                    for i in range(n):
                        fs = [flags[b] for b in range(i * per_slab, (i + 1) * per_slab)]
                        if i in content:
                            for k, f in enumerate(fs):
                                blk = content[i][k * B:(k + 1) * B]
                                if f & ZERO and blk.count(0) != B:
                                    fail("slab %d block %d reports ZERO but holds data" % (i, k))
                                if blk.count(0) != B and f != 0:
                                    fail("slab %d block %d holds data but reports flags %d" % (i, k, f))
                        if i in (1, 4, 7):
                            continue
                        if i in (2, 3):
                            if any(f not in (0, ZERO, HOLE | ZERO) for f in fs):
                                fail("slab %d (zeroed whole) reports %r" % (i, sorted(set(fs))))
                        elif any(f != HOLE | ZERO for f in fs):
                            fail("never-written slab %d reports %r, expected HOLE|ZERO" % (i, sorted(set(fs))))
                    if flags[(S(1) + MiB) // B] != HOLE | ZERO or flags[(S(1) + 3 * MiB) // B] != ZERO:
                        fail("slab 1: a trimmed block must be HOLE|ZERO and a NO_HOLE-zeroed one ZERO, got %d and %d"
                             % (flags[(S(1) + MiB) // B], flags[(S(1) + 3 * MiB) // B]))

                    def one(off, count, want_flags):
                        e = status(off, count, nbd.CMD_FLAG_REQ_ONE)
                        if len(e) != 1 or e[0][1] > count or e[0][2] & 3 != want_flags:
                            fail("REQ_ONE(%d, %d) gave %r, expected one extent <= count with flags %d"
                                 % (off, count, e, want_flags))
                    one(7, 100, HOLE | ZERO)
                    one(S(1) + 17, 2 * SLAB, 0)
                    one(S(6), SLAB, HOLE | ZERO)
                    one(S(5) + 4096, 3 * SLAB, HOLE | ZERO)
                    e = status(size - 4096, 4096, nbd.CMD_FLAG_REQ_ONE)
                    if len(e) != 1 or e[0][1] != 4096 or e[0][2] & 3 != HOLE | ZERO:
                        fail("REQ_ONE on the last block gave %r" % e)

                    # Writing into the trimmed hole slab 6 makes it data.
                    d6 = os.urandom(MiB)
                    h.pwrite(d6, S(6) + MiB)
                    if h.pread(MiB, S(6) + MiB) != d6:
                        fail("slab 6 rewrite does not read back")
                    e = status(S(6), SLAB)
                    if any(f & 3 for (o, l, f) in e if o < S(7)):
                        fail("slab 6 after a write still reports %r" % e)
                    h.shutdown()
                    print("%s: OK %d slabs, %d extents on slab boundaries, partial/whole/cross-slab trim and zero, fast_zero %s,"
                          " never-written slabs HOLE|ZERO, REQ_ONE x5" % (NAME, n, len(exts), fast))
                    """;

    @Test
    @Order(6)
    void outOfRangeAndReadOnlyErrorsLeaveTheSessionWorking() {
        script(120, "errors.py", cluster.uri("small"), String.valueOf(16 * MiB));
        script(120, "errors_readonly.py", cluster.uri("ro"));
    }

    @Test
    @Order(7)
    void qemuIoPatternsAndQemuImgCompare() {
        script(300, "qemu_io_patterns.sh", cluster.uri("disk"));
    }

    @Test
    @Order(8)
    void fioNbdEngineWithCrc32cVerify() {
        script(300, "fio_verify.sh", cluster.uri("disk"), "128");
    }

    @Test
    @Order(9)
    void ext4OverNbdfuseAndALoopDeviceSurvivesARemount() {
        script(300, "fuse_ext4.sh", cluster.uri("disk"));
    }

    @Test
    @Order(10)
    void everyVolumeIsHealthyWithTwoReplicasOnDifferentMemservers() {
        assertEquals("1073741824", PeerTool.check(60, "nbdinfo", "--size", cluster.uri("disk")).trim());
        assertTrue(cluster.bridge().isAlive(), "the bridge is still running");
        Set<String> memservers = new HashSet<>();
        for (ServeCluster.Memserver m : cluster.memservers()) {
            assertTrue(m.isAlive(), "memserver " + m.address() + " is still running");
            memservers.add(m.address());
        }
        for (Map<String, Object> m : cluster.memserverStatus()) {
            assertEquals("up", m.get("state"), "memserver as the bridge sees it: " + m);
            assertTrue(memservers.contains(String.valueOf(m.get("memserver"))), m + " vs " + memservers);
        }
        Map<String, Object> rebuild = cluster.rebuild();
        assertEquals(0L, rebuild.get("queued"), "rebuild queue: " + rebuild);
        assertEquals(0L, rebuild.get("degraded_slabs"), "rebuild: " + rebuild);

        List<Map<String, Object>> volumes = cluster.volumes();
        assertEquals(6, volumes.size(), volumes.toString());
        for (Map<String, Object> v : volumes) {
            String name = (String) v.get("name");
            assertEquals("healthy", v.get("state"), "volume " + v);
            assertEquals(2L, v.get("replicas"), "volume " + v);
            assertEquals(v.get("allocated"), v.get("healthy"), "every allocated slab healthy: " + v);
            for (String k : new String[]{"degraded", "rebuilding", "lost"}) {
                assertEquals(0L, v.get(k), k + " slabs in " + v);
            }
            List<Map<String, Object>> slabs = cluster.slabs(name, false);
            assertEquals(v.get("allocated"), (long) slabs.size(), "slab list of " + name + ": " + slabs);
            for (Map<String, Object> s : slabs) {
                assertEquals("healthy", s.get("state"), name + " slab " + s);
                assertEquals("", s.get("building"), name + " slab " + s);
                List<String> on = ServeCluster.replicaServers(s);
                assertEquals(2, on.size(), name + " slab on two replicas: " + s);
                assertEquals(2, new HashSet<>(on).size(), name + " slab replicas on different memservers: " + s);
                assertTrue(memservers.containsAll(on), name + " slab " + s + " vs memservers " + memservers);
            }
        }
        Map<String, Object> disk = cluster.volume("disk");
        assertTrue((Long) disk.get("allocated") >= 16, "the scripts wrote all over disk: " + disk);
        assertTrue(cluster.slabs("tz", false).stream().noneMatch(s -> s.get("slab").equals(14L)),
                "tz slab 14 (the fresh MiB) was never written: " + cluster.slabs("tz", false));
        assertEquals(2L, cluster.volume("small").get("allocated"), "errors.py writes the first and last 4 MiB slab");
        assertEquals(0L, cluster.volume("ro").get("allocated"), "nothing was written to ro");
        assertFalse(cluster.bridge().log().contains("[ERROR]"), "errors in the bridge log:\n"
                + cluster.bridge().log());
    }
}
