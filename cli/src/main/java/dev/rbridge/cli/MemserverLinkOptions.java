package dev.rbridge.cli;

import dev.rbridge.rdma.ConnectParams;
import picocli.CommandLine.Option;

import java.time.Duration;

/**
 * How a process reaches memservers, for serve and for the tools (ping, bench, mem, through
 * {@link MemserverClientOptions}): {@code --transport}, {@code --timeout} (when a silent memserver counts as dead)
 * and the tcp transport's {@code --lanes}. The variant a command mixes in gives the {@code --lanes} default:
 * {@link Tool} or {@link Bridge}. The words are the tools'; serve gives its own in its help bundle.
 */
class MemserverLinkOptions {
    @Option(names = "--transport", paramLabel = "NAME", defaultValue = Defaults.TRANSPORT,
            description = "Remote-memory transport: tcp or ucx (the memserver's). Default ${DEFAULT-VALUE}.")
    String transport;

    @Option(names = "--timeout", paramLabel = "SECONDS", defaultValue = "" + Defaults.MEMSERVER_TIMEOUT_SECONDS,
            description = "Declare the memserver dead after this long without an answer. Default ${DEFAULT-VALUE}.")
    double timeout;

    @Option(names = "--lanes", paramLabel = "N",
            description = "tcp: TCP connections to open to the memserver, each served by its own memserver thread; "
                    + "data operations go to the first not already busy with half a megabyte. More lanes let "
                    + "large transfers use more memserver cores; one is the lowest latency. Default ${DEFAULT-VALUE}.")
    Integer lanes;

    private MemserverLinkOptions(Integer lanes) {
        this.lanes = lanes;
    }

    /** {@code --timeout}; IllegalArgumentException unless it is positive. */
    Duration operationTimeout() {
        return ServeCommand.seconds("--timeout", timeout);
    }

    /**
     * {@code --lanes}, or null when neither given nor defaulted by the variant; IllegalArgumentException when out of
     * range, or other than 1 with a transport other than tcp.
     */
    Integer checkedLanes() {
        if (lanes == null) {
            return null;
        }
        if (lanes < 1 || lanes > ConnectParams.MAX_LANES) {
            throw new IllegalArgumentException("--lanes must be between 1 and " + ConnectParams.MAX_LANES + ": "
                    + lanes);
        }
        if (lanes != 1 && !transport.equals("tcp")) {
            throw new IllegalArgumentException("--lanes applies to the tcp transport only (" + transport
                    + " chooses its own paths)");
        }
        return lanes;
    }

    /** ping, bench, mem: one lane unless asked, the lowest latency. */
    static final class Tool extends MemserverLinkOptions {
        Tool() {
            super(Defaults.TOOL_LANES);
        }
    }

    /** serve: the lanes its configuration chooses by this host's CPUs, unless asked. */
    static final class Bridge extends MemserverLinkOptions {
        Bridge() {
            super(null);
        }
    }
}
