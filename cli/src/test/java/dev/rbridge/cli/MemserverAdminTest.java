package dev.rbridge.cli;

import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.tcp.TcpProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code rbridge admin} against a memserver process: list, revoke, disconnect, drain. */
@Timeout(120)
@Tag("interop")
class MemserverAdminTest {
    private static final Pattern LINE = Pattern.compile("at (\\S+):(\\d+) admin (\\S+)");

    private record Result(int code, String out, String err) {
    }

    private static Result admin(Path dir, String adminAddress, String... args) throws Exception {
        Path err = Files.createTempFile(dir, "admin", ".err");
        String[] all = new String[args.length + 3];
        all[0] = "admin";
        all[1] = "--memserver";
        all[2] = adminAddress;
        System.arraycopy(args, 0, all, 3, args.length);
        Process p = CliProcess.start(err, all);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        return new Result(p.exitValue(), out, Files.readString(err));
    }

    /** The memserver's first line ("lending ... at HOST:PORT admin HOST:PORT"), matched; fails with its log. */
    private static Matcher firstLine(Process m, Path log) throws IOException {
        String line = new BufferedReader(new InputStreamReader(m.getInputStream(), StandardCharsets.UTF_8)).readLine();
        Matcher matcher = LINE.matcher(String.valueOf(line));
        assertTrue(matcher.find(), line + "\n" + Files.readString(log));
        return matcher;
    }

    @Test
    void operatorListsRevokesDisconnectsAndDrains() throws Exception {
        Path dir = Files.createTempDirectory("admin");
        Path log = dir.resolve("memserver.log");
        Process m = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                "--capacity", "64M", "--token", "k");
        try {
            Matcher matcher = firstLine(m, log);
            InetSocketAddress data = new InetSocketAddress(matcher.group(1), Integer.parseInt(matcher.group(2)));
            String adminAddress = matcher.group(3);

            try (RemoteConnection c = new TcpProvider().connect(new ConnectParams().address(data).token("k")
                    .clientName("operator-test")); Arena arena = Arena.ofShared()) {
                RegionDescriptor keep = c.allocate(new RegionTag("vol1", 5, 1, 2), 1 << 20).get();
                RegionDescriptor doomed = c.allocate(RegionTag.scratch("doomed"), 4096).get();
                c.write(keep, 0, arena.allocate(4096)).get();

                Result clients = admin(dir, adminAddress, "--token", "k", "clients");
                assertEquals(0, clients.code(), clients.err());
                assertTrue(clients.out().contains("operator-test") && clients.out().contains("WRITE OPS"),
                        clients.out());
                Result regions = admin(dir, adminAddress, "--token", "k", "--json", "regions");
                assertTrue(regions.out().contains("\"volume\":\"vol1\",\"slab\":5,\"replica\":1,\"generation\":2"),
                        regions.out());
                Result stats = admin(dir, adminAddress, "--token", "k", "--json", "stats");
                assertTrue(stats.out().contains("\"granted_bytes\":" + ((1 << 20) + 4096)), stats.out());
                assertTrue(stats.out().contains("\"write_ops\":1,\"write_bytes\":4096"), "krping counters: "
                        + stats.out());

                Result refused = admin(dir, adminAddress, "--token", "wrong", "clients");
                assertEquals(1, refused.code());
                assertTrue(refused.err().contains("wrong or missing token"), refused.err());

                assertEquals(0, admin(dir, adminAddress, "--token", "k", "revoke", String.valueOf(doomed.id())).code());
                ExecutionException gone = assertThrows(ExecutionException.class,
                        () -> c.read(doomed, 0, arena.allocate(8)).get(5, TimeUnit.SECONDS));
                assertEquals(RemoteMemoryException.Status.NO_SUCH_REGION,
                        ((RemoteMemoryException) gone.getCause()).status());
                Result missing = admin(dir, adminAddress, "--token", "k", "revoke", "424242");
                assertEquals(1, missing.code());
                assertTrue(missing.err().contains("no region 424242"), missing.err());

                assertEquals(0, admin(dir, adminAddress, "--token", "k", "disconnect", "1").code());
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (c.isOpen() && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                    c.flush().exceptionally(t -> null);
                }
                assertFalse(c.isOpen(), "the disconnected client notices");
            }

            try (RemoteConnection late = new TcpProvider().connect(new ConnectParams().address(data).token("k"))) {
                Result drain = admin(dir, adminAddress, "--token", "k", "drain");
                assertEquals(0, drain.code(), drain.err());
                assertThrows(RemoteMemoryException.class,
                        () -> new TcpProvider().connect(new ConnectParams().address(data).token("k")),
                        "a draining memserver takes no new clients");
                assertTrue(m.isAlive(), "drain waits for the last client");
            }
            assertTrue(m.waitFor(30, TimeUnit.SECONDS), "the memserver exits once drained");
            assertTrue(Files.readString(log).contains("drained"), Files.readString(log));
        } finally {
            m.destroyForcibly();
        }
    }

    @Test
    void withoutATokenReadsWorkAndStateChangesAreRefusedInOneLine() throws Exception {
        Path dir = Files.createTempDirectory("admin");
        Path log = dir.resolve("memserver.log");
        Process m = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                "--capacity", "64M");
        try {
            Matcher matcher = firstLine(m, log);
            String adminAddress = matcher.group(3);

            Result stats = admin(dir, adminAddress, "--json", "stats");
            assertEquals(0, stats.code(), stats.err());
            assertTrue(stats.out().contains("\"draining\":false"), stats.out());
            for (String action : new String[]{"drain", "shutdown"}) {
                Result refused = admin(dir, adminAddress, action);
                assertEquals(1, refused.code());
                assertEquals(1, refused.err().strip().lines().count(), "one line: " + refused.err());
                assertTrue(refused.err().startsWith("admin: " + action + " refused: ")
                        && refused.err().contains("--token-file"), refused.err());
            }
            Path guess = Files.writeString(dir.resolve("guess"), "guess\n"); // --token would add its warning
            Result revoke = admin(dir, adminAddress, "--token-file", guess.toString(), "revoke", "1");
            assertTrue(revoke.err().startsWith("admin: revoke refused: ") && revoke.code() == 1, revoke.err());
            assertTrue(m.isAlive(), "nothing was shut down");
            assertTrue(admin(dir, adminAddress, "--json", "stats").out().contains("\"draining\":false"),
                    "nothing drained");
        } finally {
            m.destroyForcibly();
        }
    }

    @Test
    void withATokenAStateChangeWithoutItIsRefusedWithAHint() throws Exception {
        Path dir = Files.createTempDirectory("admin");
        Path log = dir.resolve("memserver.log");
        Process m = CliProcess.start(log, "memserver", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
                "--capacity", "64M", "--token", "k");
        try {
            Matcher matcher = firstLine(m, log);
            Result refused = admin(dir, matcher.group(3), "shutdown");
            assertEquals(1, refused.code());
            assertEquals("admin: shutdown refused: wrong or missing token (give --token-file FILE with the server's"
                    + " token)", refused.err().strip());
            assertTrue(m.isAlive());
        } finally {
            m.destroyForcibly();
        }
    }
}
