package dev.rbridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/**
 * What ping and bench share (a picocli mixin): the memserver they test and how they reach it, the bytes each of their
 * reads and writes moves, and whether they print their result as JSON.
 */
final class TransferTestOptions {
    @Mixin
    MemserverClientOptions remote;

    @Option(names = "--size", paramLabel = "SIZE", defaultValue = Defaults.TRANSFER_SIZE,
            description = "Bytes each read and each write moves (K, M, G are binary). Default ${DEFAULT-VALUE}.")
    String size;

    @Option(names = "--json", description = "Print the result as one JSON object instead of text (times in"
            + " microseconds).")
    boolean json;

    /** {@code --size} in bytes; ParameterException (exit 2) unless it is positive and under 2 GiB. */
    int bytes(CommandLine.Model.CommandSpec spec) {
        try {
            int bytes = Math.toIntExact(Sizes.parse(size));
            if (bytes <= 0) {
                throw new IllegalArgumentException("--size must be positive");
            }
            return bytes;
        } catch (ArithmeticException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--size must be under 2G: " + size);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
    }
}
