package dev.rbridge.ops.json;

import static dev.rbridge.fuzz.Feeds.check;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.junit.FuzzTest;

/**
 * The JSON reader of the admin API against any text a request body can carry: a value or
 * {@link IllegalArgumentException} with a message, nothing else; a value nests no deeper than
 * {@link Json#NESTING_LIMIT}, holds only the types {@link Json#parse} names, and written back with {@link Json#write}
 * reads back equal.
 */
@Tag("fuzz")
class JsonFuzzTest {
    @FuzzTest(maxDuration = "10s")
    void parse(byte[] bytes) {
        String text = new String(bytes, StandardCharsets.UTF_8);
        Object value;
        try {
            value = Json.parse(text);
        } catch (IllegalArgumentException e) {
            check(e.getMessage() != null && e.getMessage().startsWith("not JSON"), () -> "rejected with " + e);
            return;
        }
        check(depth(value) <= Json.NESTING_LIMIT, () -> "a value nested " + depth(value) + " deep was accepted");
        String written = Json.write(value);
        Object again = Json.parse(written);
        check(equal(value, again),
                () -> text + " read as " + value + ", written as " + written + ", read back as " + again);
    }

    private static int depth(Object v) {
        return switch (v) {
            case Map<?, ?> m -> 1 + m.values().stream().mapToInt(JsonFuzzTest::depth).max().orElse(0);
            case List<?> l -> 1 + l.stream().mapToInt(JsonFuzzTest::depth).max().orElse(0);
            case null -> 0;
            case String s -> 0;
            case Long n -> 0;
            case Double d -> {
                check(Double.isFinite(d), () -> "a number read as " + d);
                yield 0;
            }
            case Boolean b -> 0;
            default -> throw new AssertionError("a " + v.getClass() + " in a parsed value");
        };
    }

    /** Equal as JSON: numbers by value (-0.0 and 0.0 are one number to a reader of JSON). */
    private static boolean equal(Object a, Object b) {
        if (a instanceof Double x && b instanceof Double y) {
            return x.doubleValue() == y.doubleValue();
        }
        if (a instanceof Map<?, ?> x && b instanceof Map<?, ?> y) {
            if (x.size() != y.size() || !List.copyOf(x.keySet()).equals(List.copyOf(y.keySet()))) {
                return false;
            }
            return x.keySet().stream().allMatch(k -> equal(x.get(k), y.get(k)));
        }
        if (a instanceof List<?> x && b instanceof List<?> y) {
            if (x.size() != y.size()) {
                return false;
            }
            for (int i = 0; i < x.size(); i++) {
                if (!equal(x.get(i), y.get(i))) {
                    return false;
                }
            }
            return true;
        }
        return java.util.Objects.equals(a, b);
    }
}
