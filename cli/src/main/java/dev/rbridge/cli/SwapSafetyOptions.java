package dev.rbridge.cli;

import dev.rbridge.memory.SwapSafety;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import picocli.CommandLine.Option;

/**
 * {@code --mlock-all} and {@code --io-flusher}: what serve, demo and attach need for the machine to swap onto the
 * device they serve or hold ({@link SwapSafety} says why). {@link #apply} runs before the command starts any thread
 * of its own, since the flusher state is inherited by the threads a thread creates, not granted to those already
 * running.
 */
final class SwapSafetyOptions {
    private static final Logger LOG = LoggerFactory.getLogger(SwapSafetyOptions.class);

    @Option(names = "--mlock-all",
            description = "Lock all of this process's memory in RAM (mlockall, current and future), so serving a"
                    + " request never waits for one of its own pages to come back from swap. Needed when the"
                    + " machine swaps onto an rbridge device; needs CAP_IPC_LOCK or a memlock limit that covers the"
                    + " process (ulimit -l unlimited, LimitMEMLOCK=infinity). Size the heap with -Xms equal to -Xmx"
                    + " (RBRIDGE_JAVA_OPTS) so it is locked at start and never grows while serving.")
    boolean mlockAll;

    @Option(names = "--io-flusher", paramLabel = "auto|on|off", defaultValue = "auto",
            description = "Put this process's threads in the kernel's I/O flusher state (prctl PR_SET_IO_FLUSHER,"
                    + " Linux 5.6): their allocations never wait for I/O, which could be I/O to this very device."
                    + " Needs CAP_SYS_RESOURCE. auto (the default) sets it where permitted and logs when it cannot; on"
                    + " refuses to start without it; off leaves it.")
    String ioFlusher;

    /**
     * Locks memory and enters the flusher state as asked.
     *
     * @throws IllegalArgumentException for a bad --io-flusher value
     * @throws IllegalStateException    when the system refuses what was required, saying what to change
     */
    void apply(String command) {
        if (!ioFlusher.equals("auto") && !ioFlusher.equals("on") && !ioFlusher.equals("off")) {
            throw new IllegalArgumentException("--io-flusher must be auto, on or off, not '" + ioFlusher + "'");
        }
        if (!ioFlusher.equals("off")) {
            try {
                SwapSafety.markIoFlusher();
                LOG.info("{}: I/O flusher state set (PR_SET_IO_FLUSHER): allocations on the I/O path never wait"
                        + " for I/O", command);
            } catch (IllegalStateException e) {
                if (ioFlusher.equals("on")) {
                    throw e;
                }
                LOG.info("{}: not in the I/O flusher state ({}); it matters only when the machine swaps or writes"
                        + " back onto a device this process serves", command, e.getMessage());
            }
        }
        if (mlockAll) {
            SwapSafety.lockAllMemory();
            Runtime rt = Runtime.getRuntime();
            LOG.info("{}: all memory locked (mlockall), heap {} of at most {} committed", command,
                    Sizes.format(rt.totalMemory()), Sizes.format(rt.maxMemory()));
            if (rt.totalMemory() < rt.maxMemory()) {
                LOG.warn("{}: the heap can still grow from {} to {}, and memory taken while serving may have to be"
                        + " reclaimed first; give the JVM -Xms equal to -Xmx (RBRIDGE_JAVA_OPTS='-Xms256m -Xmx256m')",
                        command, Sizes.format(rt.totalMemory()), Sizes.format(rt.maxMemory()));
            }
        }
    }
}
