package dev.rbridge.cli.kernel;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code kmod-hooks/write_data} on a host file (no VM, no kernel nbd): what it writes verifies, and every kind of
 * damage is caught and named with its offset — a flipped byte (torn/corrupt), a block copied to another offset
 * (misplaced), a verify expecting a newer run (stale), a zeroed block.
 */
@Timeout(120)
@Tag("guest")
class WriteDataTest {
    private static final int BLOCK = 4096;
    private static final String SIZE = "8M";
    private static List<String> direct = List.of();

    @TempDir
    Path dir;

    @BeforeAll
    static void build() {
        KmodHooks.writeData();
    }

    private PeerTool.Result run(Path file, String... args) {
        List<String> cmd = new ArrayList<>(List.of(KmodHooks.writeData().toString(), "--size", SIZE, "--threads",
                "3", "--qd", "4"));
        cmd.addAll(direct);
        cmd.addAll(List.of(args));
        cmd.add(file.toString());
        PeerTool.Result r = PeerTool.run(60, cmd);
        if (direct.isEmpty() && r.output().contains("try --no-direct")) {
            direct = List.of("--no-direct"); // a temp folder on tmpfs has no O_DIRECT; the pattern logic is the same
            return run(file, args);
        }
        return r;
    }

    private Path written() {
        Path f = dir.resolve("data");
        PeerTool.Result r = run(f);
        assertEquals(0, r.exitCode(), r.output());
        assertTrue(r.output().contains("write  seq  pass 1") && r.output().contains("write  rand pass 2")
                && r.output().contains("verify seq  pass 2"), r.output());
        assertTrue(r.output().matches("(?s).*MB/s, \\d+ IOPS.*"), r.output());
        assertTrue(r.output().contains("write_data: OK: 2048 blocks verified"), r.output());
        PeerTool.Result again = run(f, "--verify-only");
        assertEquals(0, again.exitCode(), again.output());
        return f;
    }

    private static void assertBad(PeerTool.Result r, long offset, String kind) {
        assertEquals(1, r.exitCode(), r.output());
        assertTrue(r.output().contains("first bad block at offset " + offset + " "), r.output());
        assertTrue(r.output().contains(kind), "expected '" + kind + "':\n" + r.output());
    }

    @Test
    void aFlippedByteIsReportedWithItsOffset() throws IOException {
        Path f = written();
        long at = 1234L * BLOCK + 777;
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.seek(at);
            int b = raf.read();
            raf.seek(at);
            raf.write(b ^ 0x10);
        }
        PeerTool.Result r = run(f, "--verify-only");
        assertBad(r, 1234L * BLOCK, "torn or corrupted");
        assertTrue(r.output().contains("first differing byte: 777 of the block"), r.output());
        assertTrue(r.output().contains("MISMATCH: 1 of 2048 blocks bad"), r.output());
    }

    @Test
    void aBlockCopiedElsewhereIsMisplacedAndAZeroedOneIsCaught() throws IOException {
        Path f = written();
        byte[] block = new byte[BLOCK];
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.seek(10L * BLOCK);
            raf.readFully(block);
            raf.seek(2000L * BLOCK);
            raf.write(block);
            raf.seek(2040L * BLOCK);
            raf.write(new byte[BLOCK]);
        }
        PeerTool.Result r = run(f, "--verify-only");
        assertBad(r, 2000L * BLOCK, "misplaced");
        assertTrue(r.output().matches("(?s).*offset +" + 2000L * BLOCK + " +" + 10L * BLOCK + "\n.*"), r.output());
        assertTrue(r.output().contains("MISMATCH: 2 of 2048 blocks bad"), r.output());

        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
            raf.seek(2000L * BLOCK);
            raf.write(new byte[BLOCK]);
        }
        assertBad(run(f, "--verify-only"), 2000L * BLOCK, "all zeroes");
    }

    @Test
    void anOlderRunOrAnotherSeedIsStale() {
        Path f = written();
        assertBad(run(f, "--verify-only", "--run", "2"), 0, "stale");
        assertBad(run(f, "--verify-only", "--order", "seq,rand,seq"), 0, "stale"); // expects a third pass
        assertBad(run(f, "--verify-only", "--seed", "7"), 0, "another seed");
        // A second run over the first half leaves the second half stale: the first bad block is where run 2 ended.
        PeerTool.Result half = run(f, "--size", "4M", "--run", "2", "--write-only");
        assertEquals(0, half.exitCode(), half.output());
        assertBad(run(f, "--verify-only", "--run", "2"), 4L << 20, "stale");
    }

    @Test
    void helpAndUsageErrors() {
        PeerTool.Result help = PeerTool.run(10, List.of(KmodHooks.writeData().toString(), "--help"));
        assertEquals(0, help.exitCode());
        for (String o : List.of("--size", "--offset", "--bs", "--threads", "--qd", "--order", "--seed", "--run",
                "--verify-only", "--write-only", "--no-direct", "--signal-at")) {
            assertTrue(help.output().contains(o), o + " is not explained:\n" + help.output());
        }
        assertEquals(2, PeerTool.run(10, List.of(KmodHooks.writeData().toString(), "--bogus", "x")).exitCode());
        assertEquals(2, PeerTool.run(10, List.of(KmodHooks.writeData().toString(), "--verify-only",
                dir.resolve("missing").toString())).exitCode());
        PeerTool.Result noSize = PeerTool.run(10, List.of(KmodHooks.writeData().toString(),
                dir.resolve("new").toString()));
        assertEquals(2, noSize.exitCode());
        assertTrue(noSize.output().contains("give --size"), noSize.output());
    }
}
