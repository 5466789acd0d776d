package dev.rbridge.common;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PrintableTest {
    @Test
    void controlFormatAndSeparatorCharactersAreShownAsQuestionMarks() {
        assertEquals("a?b?c?d?e?f", Printable.cut("a\nb\rc\u001bd\u202ee\u2028f", 100));
        assertEquals("plain name", Printable.cut("plain name", 100));
    }

    @Test
    void cutsAtACharacterBoundaryWithinTheByteLimit() {
        String s = Printable.cut("é".repeat(10), 5); // 2 bytes each
        assertEquals("éé", s);
        String emoji = Printable.cut("\uD83D\uDE00".repeat(3) + "x", 9);
        assertEquals("\uD83D\uDE00\uD83D\uDE00", emoji);
        assertTrue(Printable.cut("y".repeat(10_000), 128).getBytes(StandardCharsets.UTF_8).length <= 128);
    }

    @Test
    void aLoneSurrogateIsShownAsAQuestionMark() {
        assertEquals("a?b", Printable.cut("a\uD800b", 100));
    }
}
