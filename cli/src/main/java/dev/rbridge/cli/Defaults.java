package dev.rbridge.cli;

import dev.rbridge.memserver.MemserverConfig;

/**
 * Every default of the rbridge commands, in one place: what an option is when it is not given, and the port a
 * {@code HOST} without one stands for. Options show them with picocli's {@code ${DEFAULT-VALUE}}, so the help and the
 * behaviour cannot disagree. Limits that belong to a module's own configuration stay there and the options show them
 * from it: the NBD server's ({@code NbdServerConfig}), the memserver's connection and region limits
 * ({@code ConnectionLimits}, {@code MemserverConfig}), TCP congestion control ({@code ConnectParams}).
 */
final class Defaults {
    private Defaults() {}

    // ---------------------------------------------------------------------------------------------- addresses

    /** Every listener binds to loopback unless told otherwise: a first run exposes nothing to the network. */
    static final String LOOPBACK = "127.0.0.1";
    /** The port IANA assigned to NBD; nbd-client, qemu and libnbd assume it. */
    static final int NBD_PORT = 10809;
    /** The memserver's data port (its module's own default). */
    static final int MEMSERVER_PORT = MemserverConfig.DEFAULT_PORT;
    /** The ops ports: one per role and endpoint, so a memserver and a bridge on one host do not collide. */
    static final int MEMSERVER_ADMIN_PORT = 7472;
    static final int BRIDGE_ADMIN_PORT = 7473;
    static final int MEMSERVER_METRICS_PORT = 7474;
    static final int BRIDGE_METRICS_PORT = 7475;

    static final String NBD_LISTEN = LOOPBACK + ":" + NBD_PORT;
    static final String MEMSERVER_LISTEN = LOOPBACK + ":" + MEMSERVER_PORT;
    static final String MEMSERVER_ADMIN = LOOPBACK + ":" + MEMSERVER_ADMIN_PORT;
    static final String BRIDGE_ADMIN = LOOPBACK + ":" + BRIDGE_ADMIN_PORT;
    static final String MEMSERVER_METRICS = LOOPBACK + ":" + MEMSERVER_METRICS_PORT;
    static final String BRIDGE_METRICS = LOOPBACK + ":" + BRIDGE_METRICS_PORT;
    /** The value of {@code --admin} and {@code --metrics} that turns the endpoint off. */
    static final String OFF = "none";

    /** demo's export, and the one rbridge attach asks for. */
    static final String EXPORT = "disk";
    static final String ATTACH_URI = "nbd://" + NBD_LISTEN + "/" + EXPORT;

    // --------------------------------------------------------------------------------------------- log levels

    /** serve, demo, memserver, attach run for long and say what they do. */
    static final String SERVER_LOG_LEVEL = "info";
    /** ping, bench, mem, admin: their answer is their output; the log says only what went wrong. */
    static final String TOOL_LOG_LEVEL = "warn";

    // ------------------------------------------------------------------------------------------------- timeouts

    /** serve and the tools: a memserver that leaves an operation unanswered this long is dead. */
    static final int MEMSERVER_TIMEOUT_SECONDS = 5;
    /** serve: the volume lease, renewed every third of it; a hung bridge can be replaced after this long. */
    static final int LEASE_SECONDS = 10;
    /** serve: how long to wait for every memserver at start before serving without the missing ones. */
    static final int START_WAIT_SECONDS = 10;
    /**
     * serve: the most the rebuilds copy a second while clients do I/O (full speed when they do none): measured in
     * bench/README.md to keep a 4K QD1 client's p99 near 2x its idle p99 on two cores.
     */
    static final String REBUILD_RATE = "100M";
    /** attach: the kernel's time for one request before it calls the connection dead. */
    static final int ATTACH_TIMEOUT_SECONDS = 30;
    /** attach: how long I/O waits for a dead connection to be replaced (a bridge restart takes seconds). */
    static final int ATTACH_DEAD_CONN_TIMEOUT_SECONDS = 120;
    /** admin: connecting to an admin interface, and its whole answer. */
    static final int ADMIN_CONNECT_TIMEOUT_SECONDS = 5;
    static final int ADMIN_ANSWER_TIMEOUT_SECONDS = 10;

    // --------------------------------------------------------------------------------------------- transports

    /** serve, memserver and the tools: tcp needs nothing but the JDK. */
    static final String TRANSPORT = "tcp";
    /** demo: memservers and bridge in one process talk by method calls. */
    static final String DEMO_TRANSPORT = "local";
    /** The tools' tcp lanes: one is the lowest latency. */
    static final int TOOL_LANES = 1;
    /** The tools' completion mode: a synchronous client reads its own replies. */
    static final String TOOL_COMPLETION = "caller";

    // ------------------------------------------------------------------------------------------ volumes, sizes

    /** Size of a volume (serve) or export (demo) that gives none. */
    static final String VOLUME_SIZE = "1G";
    static final int REPLICAS = 1;
    static final int DEMO_MEMSERVERS = 1;
    /** The largest NBD READ or WRITE accepted: the NBD spec's limit for clients that were told no other. */
    static final String MAX_PAYLOAD = "32M";
    /** ping and bench: one page per operation. */
    static final String TRANSFER_SIZE = "4K";
    static final int PING_ROUNDS = 10;
    static final int BENCH_TX_DEPTH = 32;
    static final int BENCH_ITERATIONS = 10_000;
    static final int ATTACH_CONNECTIONS = 1;
    static final int ATTACH_BLOCK_SIZE = 4096;
}
