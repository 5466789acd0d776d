package dev.rbridge.bridge.cli;

import java.util.Locale;

/**
 * One {@code --export} argument: {@code NAME[,size=SIZE][,ro][,min-block=N][,description=TEXT]}. The name may be
 * empty only if it is the sole export; size defaults to {@code --size}.
 */
record ExportSpec(String name, Long size, boolean readOnly, int minimumBlockSize, String description) {

    static ExportSpec parse(String text) {
        String[] parts = text.split(",", -1);
        String name = parts[0];
        Long size = null;
        boolean ro = false;
        int minBlock = 1;
        String description = "";
        for (int i = 1; i < parts.length; i++) {
            String p = parts[i];
            int eq = p.indexOf('=');
            String key = (eq < 0 ? p : p.substring(0, eq)).trim().toLowerCase(Locale.ROOT);
            String value = eq < 0 ? null : p.substring(eq + 1);
            switch (key) {
                case "ro", "read-only", "readonly" -> ro = true;
                case "size" -> size = Sizes.parse(require(key, value, text));
                case "min-block" -> minBlock = Math.toIntExact(Sizes.parse(require(key, value, text)));
                case "description" -> description = require(key, value, text);
                default -> throw new IllegalArgumentException("unknown export attribute '" + key + "' in '" + text
                        + "' (known: size=SIZE, ro, min-block=N, description=TEXT)");
            }
        }
        return new ExportSpec(name, size, ro, minBlock, description);
    }

    private static String require(String key, String value, String text) {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("export attribute '" + key + "' needs a value in '" + text + "'");
        }
        return value;
    }
}
