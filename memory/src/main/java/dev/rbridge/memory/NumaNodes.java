package dev.rbridge.memory;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.BitSet;
import java.util.Optional;

/**
 * The kernel's NUMA node lists, read one way: the nodes this process may place memory on (its cpuset's
 * {@code Mems_allowed_list}) and the list syntax the kernel writes in sysfs and {@code /proc} ("0", "0-1", "0,2-3").
 */
public final class NumaNodes {
    private static final String ALLOWED = "Mems_allowed_list:";

    private NumaNodes() {}

    /** {@code Mems_allowed_list} of {@code /proc/self/status} as the kernel wrote it; empty when it cannot be read. */
    public static Optional<String> allowedList() {
        try {
            return Files.readAllLines(Path.of("/proc/self/status")).stream()
                    .filter(l -> l.startsWith(ALLOWED))
                    .map(l -> l.substring(ALLOWED.length()).trim()).findFirst();
        } catch (IOException e) {
            return Optional.empty();
        }
    }

    /** The lowest node this process may place memory on; node 0 when the kernel does not say. */
    public static int firstAllowed() {
        BitSet allowed = parse(allowedList().orElse("0"));
        return allowed.isEmpty() ? 0 : allowed.nextSetBit(0);
    }

    /**
     * The nodes a kernel node list names, below {@link AnonymousMemory#MAX_NUMA_NODES}; none when the list is
     * malformed, so a list that cannot be read never names a node by accident.
     */
    public static BitSet parse(String list) {
        BitSet set = new BitSet();
        if (list.isBlank()) {
            return set;
        }
        for (String part : list.split(",")) {
            String[] range = part.split("-", -1);
            try {
                int from = Integer.parseInt(range[0].trim());
                int to = range.length == 2 ? Integer.parseInt(range[1].trim()) : from;
                if (range.length > 2 || from < 0 || to < from || to >= AnonymousMemory.MAX_NUMA_NODES) {
                    return new BitSet();
                }
                set.set(from, to + 1);
            } catch (NumberFormatException e) {
                return new BitSet();
            }
        }
        return set;
    }
}
