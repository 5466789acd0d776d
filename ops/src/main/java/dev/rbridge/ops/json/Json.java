package dev.rbridge.ops.json;

import com.google.gson.FieldNamingPolicy;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonParseException;
import com.google.gson.Strictness;
import com.google.gson.ToNumberPolicy;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;

import java.io.IOException;
import java.io.StringReader;

/**
 * Every JSON that rbridge writes or reads goes through here, so there is one library (Gson) and one key style:
 * {@code snake_case}, derived from record component names ({@code downForMs} is written {@code down_for_ms}), the
 * style Prometheus and the memserver's admin interface already used. Write records, lists and maps; read into the
 * plain tree of {@link #parse} or into a record with {@link #read}.
 */
public final class Json {
    /** Deeper than any answer of ours nests (three levels); a hostile document cannot recurse the reader away. */
    public static final int NESTING_LIMIT = 32;

    private static final Gson GSON = new GsonBuilder()
            .setFieldNamingPolicy(FieldNamingPolicy.LOWER_CASE_WITH_UNDERSCORES)
            // answers are served as application/json with nosniff, and --json prints them for people to read
            .disableHtmlEscaping()
            .setObjectToNumberStrategy(ToNumberPolicy.LONG_OR_DOUBLE)
            .setStrictness(Strictness.STRICT)
            .create();

    private Json() {}

    /** {@code value} as compact JSON; records and maps keep their order. */
    public static String write(Object value) {
        return GSON.toJson(value);
    }

    /**
     * A JSON text as maps (in document order), lists, strings, {@code Long} for integral numbers, {@code Double} for
     * the others, booleans and null.
     *
     * @throws IllegalArgumentException naming what is wrong when {@code text} is not exactly one JSON value
     */
    public static Object parse(String text) {
        return read(text, Object.class);
    }

    /** A JSON text as a {@code type} (a record's components read from their snake_case keys). */
    public static <T> T read(String text, Class<T> type) {
        if (text.isBlank()) {
            throw new IllegalArgumentException("not JSON: empty text");
        }
        try (JsonReader reader = new JsonReader(new StringReader(text))) {
            reader.setStrictness(Strictness.STRICT);
            reader.setNestingLimit(NESTING_LIMIT);
            T value = GSON.fromJson(reader, type);
            if (reader.peek() != JsonToken.END_DOCUMENT) {
                throw new IllegalArgumentException("not JSON: text after the value at " + reader.getPath());
            }
            return value;
        } catch (JsonParseException | IOException | IllegalStateException e) {
            throw new IllegalArgumentException("not JSON: " + e.getMessage(), e);
        }
    }
}
