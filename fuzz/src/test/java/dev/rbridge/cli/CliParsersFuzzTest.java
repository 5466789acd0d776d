package dev.rbridge.cli;

import static dev.rbridge.fuzz.Feeds.check;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.junit.FuzzTest;

import dev.rbridge.bridge.volume.VolumeSpec;
import picocli.CommandLine;

/**
 * The parsers of what people (or a configuration management system) hand the command line: an accepted value meets
 * its documented bounds and reads back the same when written out again; a refused one is an
 * {@link IllegalArgumentException} with a message, which the commands turn into a usage error. Anything else would
 * reach the user as a stack trace. Host names resolve against the fuzz module's empty hosts file
 * ({@code jdk.net.hosts.file} in its pom), never through DNS.
 */
@Tag("fuzz")
class CliParsersFuzzTest {
    private static final long DEFAULT_SIZE = 1L << 30;
    private static Path config;

    @BeforeAll
    static void configFile() throws IOException {
        config = Files.createTempFile("rbridge-fuzz-", ".conf");
    }

    @AfterAll
    static void removeConfigFile() throws IOException {
        Files.deleteIfExists(config);
    }

    @FuzzTest(maxDuration = "10s")
    void sizes(byte[] bytes) {
        String text = new String(bytes, StandardCharsets.UTF_8);
        long n;
        try {
            n = Sizes.parse(text);
        } catch (IllegalArgumentException e) {
            check(e.getMessage() != null && e.getMessage().contains(text),
                    () -> "refused without naming the text: " + e);
            return;
        }
        check(n >= 0, () -> "'" + text + "' read as " + n);
        String formatted = Sizes.format(n);
        check(Sizes.parse(formatted) == n,
                () -> n + " formatted as " + formatted + " reads back as " + Sizes.parse(formatted));
    }

    @FuzzTest(maxDuration = "10s")
    void volumeSpec(byte[] bytes) {
        String text = new String(bytes, StandardCharsets.UTF_8);
        VolumeSpec v;
        try {
            v = VolumeSpecs.parse("volume", text, DEFAULT_SIZE, 2);
        } catch (IllegalArgumentException e) {
            check(e.getMessage() != null && !e.getMessage().isEmpty(), () -> "refused without a message: " + e);
            return;
        }
        check(v.size() > 0 && v.replicas() >= 1 && v.replicas() <= 8 && Long.bitCount(v.slabSize()) == 1
                && v.minimumBlockSize() >= 0 && !v.name().isEmpty() && v.name().indexOf(',') < 0
                && v.name().equals(v.name().trim()), () -> "'" + text + "' read as " + v);
        // Written out in the documented syntax, it reads back the same.
        String again = "name=" + v.name() + ",size=" + v.size() + ",replicas=" + v.replicas() + ",slab=" + v.slabSize()
                + ",min-block=" + v.minimumBlockSize() + (v.readOnly() ? ",ro" : "")
                + (v.description().isEmpty() ? "" : ",description=" + v.description());
        VolumeSpec w = VolumeSpecs.parse("volume", again, DEFAULT_SIZE, 2);
        check(w.equals(v), () -> "'" + text + "' read as " + v + ", written as '" + again + "' reads back as " + w);
    }

    @FuzzTest(maxDuration = "10s")
    void endpoints(byte[] bytes) {
        String text = new String(bytes, StandardCharsets.UTF_8);
        InetSocketAddress a;
        try {
            a = Endpoints.parse(text, Defaults.MEMSERVER_PORT);
        } catch (IllegalArgumentException e) {
            check(e.getMessage() != null && e.getMessage().contains(text),
                    () -> "refused without naming the text: " + e);
            return;
        }
        check(a.getPort() >= 0 && a.getPort() <= 65535 && !a.getHostString().isEmpty(),
                () -> "'" + text + "' read as " + a);
        boolean hasPort = text.lastIndexOf(':') > text.indexOf(']');
        check(hasPort || a.getPort() == Defaults.MEMSERVER_PORT, () -> "'" + text + "' without a port read as " + a);
    }

    /** The same file applied to {@code serve} and to {@code memserver}, as {@code --config} does. */
    @FuzzTest(maxDuration = "10s")
    void configFile(byte[] bytes) {
        try {
            Files.write(config, bytes);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        for (Object command : new Object[]{new ServeCommand(), new MemserverCommand()}) {
            CommandLine cl = new CommandLine(command);
            cl.parseArgs();
            try {
                ConfigFile.apply(config, cl.getCommandSpec());
            } catch (IllegalArgumentException e) {
                check(e.getMessage() != null && e.getMessage().contains(config.toString()),
                        () -> "refused without naming the file: " + e);
            }
        }
    }
}
