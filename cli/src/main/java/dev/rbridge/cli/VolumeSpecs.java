package dev.rbridge.cli;

import dev.rbridge.bridge.volume.VolumeSpec;

import java.util.Locale;

/**
 * One {@code --volume} argument: {@code [name=]NAME[,size=SIZE][,replicas=R][,slab=SIZE][,ro][,min-block=N]
 * [,description=TEXT]}. The same grammar serves {@code rbridge demo --export}.
 */
final class VolumeSpecs {
    private VolumeSpecs() {}

    static final String SYNTAX = "NAME[,size=SIZE][,replicas=R][,slab=SIZE][,ro][,min-block=N][,description=TEXT]";

    static VolumeSpec parse(String what, String text, long defaultSize, int defaultReplicas) {
        String[] parts = text.split(",", -1);
        String name = null;
        Long size = null;
        int replicas = defaultReplicas;
        long slab = VolumeSpec.DEFAULT_SLAB_SIZE;
        boolean ro = false;
        int minBlock = 1;
        String description = "";
        for (int i = 0; i < parts.length; i++) {
            String p = parts[i];
            int eq = p.indexOf('=');
            if (i == 0 && eq < 0) {
                name = p.trim();
                continue;
            }
            String key = (eq < 0 ? p : p.substring(0, eq)).trim().toLowerCase(Locale.ROOT);
            String value = eq < 0 ? null : p.substring(eq + 1).trim();
            switch (key) {
                case "name" -> name = require(what, key, value, text);
                case "ro", "read-only", "readonly" -> ro = true;
                case "size" -> size = Sizes.parse(require(what, key, value, text));
                case "replicas", "r" -> replicas = Integer.parseInt(require(what, key, value, text));
                case "slab", "slab-size" -> slab = Sizes.parse(require(what, key, value, text));
                case "min-block" -> {
                    long n = Sizes.parse(require(what, key, value, text));
                    if (n > Integer.MAX_VALUE) {
                        throw new IllegalArgumentException(what + " attribute 'min-block' is out of range in '" + text
                                + "'");
                    }
                    minBlock = (int) n;
                }
                case "description" -> description = require(what, key, value, text);
                default -> throw new IllegalArgumentException("unknown " + what + " attribute '" + key + "' in '" + text
                        + "' (syntax: " + SYNTAX + ")");
            }
        }
        if (name == null || name.isEmpty()) {
            throw new IllegalArgumentException("'" + text + "' names no " + what + " (syntax: " + SYNTAX + ")");
        }
        long bytes = size != null ? size : defaultSize;
        if (slab > bytes) {
            slab = Math.max(VolumeSpec.MIN_SLAB_SIZE, Long.highestOneBit(bytes - 1) << 1); // one slab covers it
        }
        return new VolumeSpec(name, bytes, slab, replicas, ro, minBlock, description);
    }

    private static String require(String what, String key, String value, String text) {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException(what + " attribute '" + key + "' needs a value in '" + text + "'");
        }
        return value;
    }
}
