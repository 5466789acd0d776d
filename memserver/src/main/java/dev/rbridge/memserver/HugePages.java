package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.rdma.ucx.UcxProvider;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;

/**
 * Whether regions are backed by 2 MiB huge pages: as asked ({@code on}, {@code off}) or, by default ({@code auto}),
 * where registration pins region memory to an RDMA NIC and the kernel's huge page pool covers the capacity. A NIC
 * holds a registered region page by page: 2 MiB pages mean 512 times fewer entries in its translation tables and
 * fewer pages to pin and fault in at registration. Where nothing pins pages (tcp, local, ucx without an RDMA device)
 * small pages that are allocated as first touched serve best, and auto keeps them.
 */
public final class HugePages {
    /** How the operator asked. */
    public enum Mode {
        AUTO, ON, OFF;

        /** auto, on or off, any case; IllegalArgumentException otherwise. */
        public static Mode parse(String s) {
            try {
                return valueOf(s.trim().toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("--huge-pages takes auto, on or off, not '" + s + "'");
            }
        }
    }

    /** The decision and the sentence the memserver logs about it. */
    public record Choice(boolean use, String why) {
    }

    private HugePages() {}

    /** The choice for this host: its transport's pinning, its huge page pool (/proc/meminfo). */
    public static Choice choose(Mode mode, String transport, long capacityBytes) {
        boolean pinned = mode == Mode.AUTO && transport.equals("ucx") && UcxProvider.registrationsPinPages();
        return choose(mode, pinned, pinned ? freeHugePageBytes() : 0, capacityBytes);
    }

    /**
     * The choice, given whether registered region memory is pinned to an RDMA NIC here and how many bytes of huge
     * pages the pool has free.
     */
    static Choice choose(Mode mode, boolean registrationsPin, long freeHugeBytes, long capacityBytes) {
        return switch (mode) {
            case ON -> new Choice(true, "huge pages: on (--huge-pages on)");
            case OFF -> new Choice(false, "huge pages: off (--huge-pages off)");
            case AUTO -> {
                if (!registrationsPin) {
                    yield new Choice(false, "huge pages: off (auto: no RDMA NIC pins region memory here, so 4 KiB "
                            + "pages, backed as first touched)");
                }
                long needed = roundUp(capacityBytes);
                if (freeHugeBytes >= needed) {
                    yield new Choice(true, "huge pages: on (auto: regions are registered with an RDMA NIC, and the "
                            + "pool has " + mib(freeHugeBytes) + " free for the " + mib(needed) + " of --capacity)");
                }
                yield new Choice(false, "huge pages: off (auto: regions are registered with an RDMA NIC, but the "
                        + "huge page pool has " + mib(freeHugeBytes) + " free and --capacity needs " + mib(needed)
                        + "; 4 KiB pages are pinned one by one instead. Reserve "
                        + needed / AnonymousMemory.HUGE_PAGE_SIZE + " with sysctl vm.nr_hugepages, or say "
                        + "--huge-pages off to keep this choice quietly)");
            }
        };
    }

    /** HugePages_Free x Hugepagesize from /proc/meminfo; 0 when it cannot be read. */
    static long freeHugePageBytes() {
        try {
            return freeHugePageBytes(Files.readAllLines(Path.of("/proc/meminfo")));
        } catch (IOException e) {
            return 0;
        }
    }

    /** The same from the lines of a meminfo: 0 when either is missing or malformed, or the pages are not 2 MiB. */
    static long freeHugePageBytes(List<String> meminfo) {
        long free = -1;
        long size = -1;
        try {
            for (String line : meminfo) {
                String[] f = line.trim().split("\\s+");
                if (f.length >= 2 && f[0].equals("HugePages_Free:")) {
                    free = Long.parseLong(f[1]);
                } else if (f.length >= 2 && f[0].equals("Hugepagesize:")) {
                    size = Long.parseLong(f[1]) * 1024;
                }
            }
        } catch (NumberFormatException e) {
            return 0;
        }
        return free < 0 || size != AnonymousMemory.HUGE_PAGE_SIZE ? 0 : free * size;
    }

    private static long roundUp(long bytes) {
        long page = AnonymousMemory.HUGE_PAGE_SIZE;
        return (bytes + page - 1) / page * page;
    }

    private static String mib(long bytes) {
        return (bytes >> 20) + " MiB";
    }
}
