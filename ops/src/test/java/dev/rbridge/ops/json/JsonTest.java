package dev.rbridge.ops.json;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class JsonTest {
    record Link(String memserver, long inFlight, long downForMs, String lastError, String unset) {
    }

    @Test
    void recordsAreWrittenWithSnakeCaseKeysInComponentOrder() {
        String text = Json.write(List.of(new Link("a:1", 3, 0, "say \"hi\"\n<b>", null)));
        assertEquals(
                "[{\"memserver\":\"a:1\",\"in_flight\":3,\"down_for_ms\":0,\"last_error\":\"say \\\"hi\\\"\\n<b>\"}]",
                text, "escaped as JSON needs, no HTML escaping, nulls left out");
        Link back = Json.read(text.substring(1, text.length() - 1), Link.class);
        assertEquals(3, back.inFlight());
        assertEquals("say \"hi\"\n<b>", back.lastError());
    }

    @Test
    void parseGivesMapsListsLongsAndDoubles() {
        Object v = Json.parse("{\"b\":1,\"a\":[1.5,true,null,\"\\u00e9\"],\"c\":{}}");
        Map<?, ?> m = (Map<?, ?>) v;
        assertEquals(List.of("b", "a", "c"), List.copyOf(m.keySet()), "document order");
        assertEquals(1L, m.get("b"));
        List<?> a = (List<?>) m.get("a");
        assertEquals(1.5, a.get(0));
        assertEquals(Boolean.TRUE, a.get(1));
        assertNull(a.get(2));
        assertEquals("\u00e9", a.get(3));
    }

    @Test
    void anythingButOneStrictJsonValueIsRefused() {
        for (String bad : new String[]{"", "  ", "{", "{\"a\":1} x", "{a:1}", "['a']", "[1,]", "NaN", "{\"a\":01}",
                "[".repeat(Json.NESTING_LIMIT + 1) + "]".repeat(Json.NESTING_LIMIT + 1)}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
            assertTrue(e.getMessage().startsWith("not JSON"), e.getMessage());
        }
    }
}
