package dev.rbridge.nbd.tls;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The psktool file format, and every way a PSK file can be wrong, said with its line. */
class PskKeysTest {
    @TempDir
    Path dir;

    private static final String KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    private Path file(String text) throws IOException {
        return Files.writeString(dir.resolve("keys.psk"), text);
    }

    private String error(String text) throws IOException {
        Path f = file(text);
        return assertThrows(IllegalArgumentException.class, () -> PskKeys.read(f)).getMessage();
    }

    @Test
    void readsPsktoolLines() throws IOException {
        PskKeys keys = PskKeys.read(file("alice:" + KEY + "\n\nbob:" + KEY.toUpperCase() + "\n"));
        assertEquals(2, keys.size());
        assertArrayEquals(java.util.HexFormat.of().parseHex(KEY), keys.key("alice"));
        assertArrayEquals(java.util.HexFormat.of().parseHex(KEY), keys.key("bob"));
        assertNull(keys.key("carol"));
    }

    @Test
    void identitiesMayHoldColonsTheKeyIsAfterTheLastOne() throws IOException {
        assertEquals(1, PskKeys.read(file("host:alice:" + KEY)).size());
    }

    @Test
    void eachMistakeIsSaidWithItsLine() throws IOException {
        assertTrue(error("alice:" + KEY + "\nbob\n").contains("line 2: expected identity:hexkey"));
        assertTrue(error("alice:xyz\n").contains("line 1: the key of 'alice' is not hexadecimal"));
        assertTrue(error("alice:0011\n").contains("has 2 bytes"));
        assertTrue(error("alice:" + KEY + "\nalice:" + KEY).contains("line 2: identity 'alice' appears twice"));
        assertTrue(error("\n\n").contains("holds no key"));
        assertTrue(error(":" + KEY).contains("expected identity:hexkey"));
        String missing = assertThrows(IllegalArgumentException.class,
                () -> PskKeys.read(dir.resolve("none.psk"))).getMessage();
        assertTrue(missing.contains("not found") && missing.contains("psktool"), missing);
    }

    @Test
    void aFileOthersCanReadIsNoticed() throws IOException {
        Path f = file("alice:" + KEY);
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString("rw-------"));
        assertFalse(PskKeys.read(f).readableByOthers());
        Files.setPosixFilePermissions(f, PosixFilePermissions.fromString("rw-r--r--"));
        assertTrue(PskKeys.read(f).readableByOthers());
    }
}
