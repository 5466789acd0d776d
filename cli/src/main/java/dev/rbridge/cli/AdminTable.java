package dev.rbridge.cli;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * rbridge admin's tables: a server's JSON answer as aligned columns, one header style, byte counts as sizes, and no
 * control character from the server reaching the operator's terminal.
 */
final class AdminTable {
    private AdminTable() {}

    /** An answer printed: an array row by row, an object as NAME and VALUE pairs, anything else as sent. */
    static void print(PrintWriter out, Object answer, String body) {
        if (answer instanceof List<?> rows) {
            table(out, rows);
        } else if (answer instanceof Map<?, ?> fields) {
            table(out, pairs(fields));
        } else {
            out.println(body);
        }
    }

    /** An object's fields, nested ones flattened, as rows of a name and its value. */
    private static List<Map<String, Object>> pairs(Map<?, ?> fields) {
        List<Map<String, Object>> pairs = new ArrayList<>();
        Map<String, String> flat = new LinkedHashMap<>();
        flatten(fields, flat);
        flat.forEach((k, v) -> {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("name", k);
            row.put("value", human(k, v));
            pairs.add(row);
        });
        return pairs;
    }

    /** Prints a JSON array of objects as aligned columns; nested objects' fields become columns of their own. */
    private static void table(PrintWriter out, List<?> array) {
        if (array.isEmpty()) {
            out.println("(none)");
            return;
        }
        List<Map<String, String>> rows = new ArrayList<>();
        for (Object o : array) {
            Map<String, String> cells = new LinkedHashMap<>();
            flatten(o, cells);
            cells.replaceAll(AdminTable::human);
            rows.add(cells);
        }
        List<String> columns = new ArrayList<>();
        for (Map<String, String> r : rows) {
            for (String k : r.keySet()) {
                if (!columns.contains(k)) {
                    columns.add(k);
                }
            }
        }
        int[] width = new int[columns.size()];
        for (int i = 0; i < columns.size(); i++) {
            width[i] = columns.get(i).length();
            for (Map<String, String> r : rows) {
                width[i] = Math.max(width[i], r.getOrDefault(columns.get(i), "").length());
            }
        }
        StringBuilder h = new StringBuilder();
        for (int i = 0; i < columns.size(); i++) {
            h.append(String.format("%-" + (width[i] + 2) + "s", header(columns.get(i))));
        }
        out.println(h.toString().stripTrailing());
        for (Map<String, String> r : rows) {
            StringBuilder line = new StringBuilder();
            for (int i = 0; i < columns.size(); i++) {
                line.append(String.format("%-" + (width[i] + 2) + "s", printable(r.getOrDefault(columns.get(i), ""))));
            }
            out.println(line.toString().stripTrailing());
        }
    }

    /** One header style for every table: the JSON key in capitals, words apart ("SLAB SIZE"). */
    static String header(String key) {
        return key.toUpperCase(Locale.ROOT).replace('_', ' ');
    }

    /** Byte counts as sizes (64MiB), the rest as sent; keys say which are bytes. --json keeps raw numbers. */
    static String human(String key, String value) {
        boolean bytes = key.equals("size") || key.equals("slab_size") || key.equals("capacity") || key.equals("free")
                || key.equals("length") || key.equals("copied") || key.equals("copied_total") || key.equals("start")
                || key.endsWith("_bytes") || key.equals("bytes");
        if (!bytes || value == null || value.isEmpty()) {
            return value;
        }
        try {
            return Sizes.format((long) Double.parseDouble(value));
        } catch (NumberFormatException e) {
            return value;
        }
    }

    private static void flatten(Object value, Map<String, String> cells) {
        if (value instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (e.getValue() instanceof Map<?, ?> || e.getValue() instanceof List<?>) {
                    flatten(e.getValue(), cells);
                } else {
                    cells.put(String.valueOf(e.getKey()), e.getValue() == null ? "" : String.valueOf(e.getValue()));
                }
            }
        }
    }

    /** A value from the server on the operator's terminal: no control characters (escape sequences). */
    private static String printable(String s) {
        return s.codePoints().map(c -> Character.isISOControl(c) ? '?' : c)
                .collect(StringBuilder::new, StringBuilder::appendCodePoint, StringBuilder::append).toString();
    }
}
