package dev.rbridge.cli;

import dev.rbridge.common.tls.X509Credentials;
import dev.rbridge.rdma.ConnectParams;
import dev.rbridge.rdma.Providers;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteConnection;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryProvider;
import picocli.CommandLine;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.lang.foreign.Arena;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** How a command reaches a memserver: the options ping, bench and mem share (a picocli mixin). */
final class MemserverClientOptions {
    @Option(names = "--server", paramLabel = "HOST:PORT", required = true, description = "The memserver.")
    String server;

    @Mixin
    TokenOptions token;

    @Option(names = "--tls-certificates", paramLabel = "DIR",
            description = "Speak TLS to the memserver (started with --tls-certificates): DIR holds ca-cert.pem, the CA"
                    + " its certificate must chain to (and name the address in --server), and client-cert.pem and"
                    + " client-key.pem for a memserver that verifies clients. ucx: the control connection only.")
    Path tlsCertificates;

    @Mixin
    MemserverLinkOptions.Tool link;

    @Option(names = "--completion", paramLabel = "MODE", defaultValue = Defaults.TOOL_COMPLETION,
            description = "tcp: who reads the memserver's replies. caller: a thread waiting on an operation reads "
                    + "them itself when nobody else is (a synchronous client's cost: no hand-off between threads); "
                    + "thread: always the connection's reader thread, which then wakes the waiter (how rbridge serve "
                    + "runs). Default ${DEFAULT-VALUE}.")
    String completion;

    /** What every command's --tcp-congestion says after naming the sockets it governs. */
    static final String TCP_CONGESTION_HELP = ": cubic, reno, bbr, ... as the kernel offers them, or system for the"
            + " host's default. BBR throttles a connection with several large transfers in flight on a microsecond"
            + " path; a host that refuses the choice keeps its default and the log says why. Default ${DEFAULT-VALUE}.";

    @Option(names = "--tcp-congestion", paramLabel = "NAME", defaultValue = ConnectParams.TCP_CONGESTION_DEFAULT,
            description = "tcp: TCP congestion control of the connection" + TCP_CONGESTION_HELP)
    String tcpCongestion;

    @Mixin
    LogLevelOption.Tool logLevel;

    /** The transport to connect with, or IllegalArgumentException naming the ones that work from a command. */
    RemoteMemoryProvider provider() {
        if (link.transport.equals("local")) {
            throw new IllegalArgumentException("the local transport exists only inside one process (rbridge demo); "
                    + "use --transport tcp or ucx to reach a memserver");
        }
        return Providers.byName(link.transport);
    }

    /** The connect parameters, or IllegalArgumentException naming what is wrong with the options. */
    ConnectParams params(String clientName) {
        String secret = token.forTool(clientName.replaceFirst("^rbridge[ -]", ""));
        Duration timeout = link.operationTimeout();
        int lanes = link.checkedLanes();
        if (!completion.equals("caller") && !completion.equals("thread")) {
            throw new IllegalArgumentException("--completion must be caller or thread: " + completion);
        }
        return new ConnectParams().address(Endpoints.parse(server, Defaults.MEMSERVER_PORT))
                .token(secret).clientName(clientName)
                .operationTimeout(timeout).lanes(lanes)
                .callerDriven(callerReads()).tcpCongestion(tcpCongestion)
                .tls(tlsCertificates == null ? null : X509Credentials.clientContext(tlsCertificates));
    }

    /** How long a tool waits for one answer, in seconds: twice {@code --timeout}, so the connection gives up first. */
    long answerWaitSeconds() {
        return (long) Math.ceil(link.timeout * 2);
    }

    /** Whether a thread waiting on an operation reads its reply itself ({@code --completion caller}). */
    boolean callerReads() {
        return completion.equals("caller");
    }

    /** What a tool does with its connection and scratch region; returns the exit code. */
    interface ScratchWork {
        int run(RemoteConnection c, RegionDescriptor region, Arena arena) throws Exception;
    }

    /**
     * Connects as {@code tool}, borrows a scratch region of {@code bytes}, runs {@code work} and gives the region
     * back. Bad options end as picocli usage errors (exit 2); a failed operation as one {@code tool: reason} line on
     * stderr and exit 1.
     */
    int withScratchRegion(CommandLine.Model.CommandSpec spec, String tool, long bytes, ScratchWork work)
            throws Exception {
        ConnectParams params;
        RemoteMemoryProvider p;
        try {
            params = params("rbridge-" + tool);
            p = provider();
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        long wait = answerWaitSeconds();
        try (RemoteConnection c = p.connect(params); Arena arena = Arena.ofShared()) {
            RegionDescriptor region = c.allocate(RegionTag.scratch(tool), bytes).get(wait, TimeUnit.SECONDS);
            try {
                return work.run(c, region, arena);
            } finally {
                if (c.isOpen()) {
                    c.release(region).get(wait, TimeUnit.SECONDS);
                }
            }
        } catch (RemoteMemoryException e) {
            spec.commandLine().getErr().println(tool + ": " + e.getMessage());
            return 1;
        } catch (ExecutionException e) {
            spec.commandLine().getErr().println(tool + ": " + (e.getCause() == null ? e : e.getCause().getMessage()));
            return 1;
        } catch (TimeoutException e) {
            spec.commandLine().getErr().println(tool + ": no answer from the memserver within " + wait + " s");
            return 1;
        }
    }
}
