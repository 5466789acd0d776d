package dev.rbridge.memserver;

import dev.rbridge.memory.AnonymousMemory;
import dev.rbridge.memory.NumaNodes;

import java.io.IOException;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Optional;
import java.util.function.Function;
import java.util.function.IntFunction;

/**
 * Which NUMA node region memory comes from: as asked ({@code --numa-node N}, {@code off}) or, by default
 * ({@code auto}), the node of the NIC that carries the memserver's listen address, on a host with more than one node.
 * Every byte a client reads or writes crosses between the NIC and region memory; on the NIC's own node it does not
 * also cross the interconnect between sockets. The node is preferred, not bound: once it is full, pages come from the
 * others (see {@link AnonymousMemory#map(long, boolean, boolean, int)}).
 */
public final class NumaPlacement {
    /** How the operator asked: auto, off, or a node number. */
    public record Mode(boolean auto, int node) {
        public static final Mode AUTO = new Mode(true, AnonymousMemory.ANY_NODE);
        public static final Mode OFF = new Mode(false, AnonymousMemory.ANY_NODE);

        /** auto, off or a node number from 0; IllegalArgumentException otherwise. */
        public static Mode parse(String s) {
            String v = s.trim().toLowerCase(Locale.ROOT);
            if (v.equals("auto")) {
                return AUTO;
            }
            if (v.equals("off")) {
                return OFF;
            }
            try {
                int node = Integer.parseInt(v);
                if (node >= 0 && node < MAX_NODES) {
                    return new Mode(false, node);
                }
            } catch (NumberFormatException ignored) {
                // the sentence below says what is accepted
            }
            throw new IllegalArgumentException("--numa-node takes auto, off or a node number from 0 to "
                    + (MAX_NODES - 1) + ", not '" + s + "'");
        }
    }

    /** The node regions prefer ({@link AnonymousMemory#ANY_NODE}: the kernel's default) and the sentence logged. */
    public record Choice(int node, String why) {
    }

    static final int MAX_NODES = AnonymousMemory.MAX_NUMA_NODES;

    private NumaPlacement() {}

    /**
     * The choice for this host, from its sysfs, the interface that holds {@code listen} (null: unresolved) and the
     * nodes this process may use; a node chosen is tried once on a page, so a refusal shows at start, not at the
     * first grant.
     */
    public static Choice choose(Mode mode, InetAddress listen) {
        return choose(mode, listen, Path.of("/sys"), NumaPlacement::interfaceOf, NumaNodes.allowedList(),
                NumaPlacement::probe);
    }

    /**
     * The choice given a sysfs root ({@code devices/system/node/has_memory}, {@code class/net/IF/device/numa_node}),
     * how to find the interface that holds an address, the nodes this process may use (a kernel node list, empty
     * when unknown) and a trial placement of a page on a node (empty when it worked, else why not).
     *
     * @throws IllegalArgumentException when the node asked for has no memory on this host, or cannot be used
     */
    static Choice choose(Mode mode, InetAddress listen, Path sys, Function<InetAddress, Optional<String>> interfaceOf,
            Optional<String> allowed, IntFunction<Optional<String>> probe) {
        Choice c = decide(mode, listen, sys, interfaceOf);
        if (c.node() == AnonymousMemory.ANY_NODE) {
            return c;
        }
        String refusal = allowed.isPresent() && !contains(allowed.get(), c.node())
                ? "this process may use nodes " + allowed.get() + " only (its cpuset: Mems_allowed_list)"
                : probe.apply(c.node()).orElse(null);
        if (refusal == null) {
            return c;
        }
        if (!mode.auto()) {
            throw new IllegalArgumentException("--numa-node " + mode.node() + ": " + refusal);
        }
        return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: none (auto chose node " + c.node()
                + ", but " + refusal + "; --numa-node off keeps this quiet)");
    }

    private static Choice decide(Mode mode, InetAddress listen, Path sys,
            Function<InetAddress, Optional<String>> interfaceOf) {
        if (mode.equals(Mode.OFF)) {
            return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: off (--numa-node off)");
        }
        Optional<String> nodesText = read(sys.resolve("devices/system/node/has_memory"));
        if (!mode.auto()) {
            // Checked here rather than at the first grant, so a typo stops the start instead of every allocation.
            if (nodesText.isPresent() && !contains(nodesText.get(), mode.node())) {
                throw new IllegalArgumentException("--numa-node " + mode.node() + ": this host has memory on nodes "
                        + nodesText.get() + " only");
            }
            return new Choice(mode.node(), "NUMA placement: region memory from node " + mode.node()
                    + " (--numa-node " + mode.node() + ")");
        }
        if (nodesText.isEmpty() || count(nodesText.get()) < 2) {
            return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: none (auto: this host has one NUMA node)");
        }
        if (listen == null) {
            return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: none (auto: the --listen host does not "
                    + "resolve to an address; --numa-node N chooses)");
        }
        if (listen.isAnyLocalAddress()) {
            return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: none (auto: the memserver listens on every "
                    + "interface, so no one NIC says where to place memory; --numa-node N chooses)");
        }
        Optional<String> nic = interfaceOf.apply(listen);
        if (nic.isEmpty()) {
            return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: none (auto: no interface holds "
                    + listen.getHostAddress() + "; --numa-node N chooses)");
        }
        Optional<String> nodeText = deviceNode(sys, nic.get());
        int node = nodeText.map(NumaPlacement::parseNode).orElse(AnonymousMemory.ANY_NODE);
        if (node < 0 || !contains(nodesText.get(), node)) {
            return new Choice(AnonymousMemory.ANY_NODE, "NUMA placement: none (auto: " + nic.get() + " reports no "
                    + "NUMA node with memory" + (nodeText.isEmpty() ? ", it is not a PCI device (a bridge, bond or "
                            + "virtual interface?)" : ": " + nodeText.get())
                    + "; --numa-node N chooses)");
        }
        return new Choice(node, "NUMA placement: region memory from node " + node + " (auto: the node of "
                + nic.get() + ", which holds " + listen.getHostAddress() + "; memory on nodes " + nodesText.get()
                + ")");
    }

    /** Maps a page preferring {@code node}: empty when that worked, else the system's refusal. */
    private static Optional<String> probe(int node) {
        try (AnonymousMemory _ = AnonymousMemory.map(AnonymousMemory.PAGE_SIZE, false, false, node)) {
            return Optional.empty();
        } catch (IllegalStateException e) {
            return Optional.of(e.getMessage());
        }
    }

    /**
     * The numa_node of the device behind interface {@code nic}: its own, or its nearest ancestor's (a virtio NIC's
     * device is a virtio device, and the PCI function above it knows the node).
     */
    private static Optional<String> deviceNode(Path sys, String nic) {
        Path device;
        try {
            device = sys.resolve("class/net").resolve(nic).resolve("device").toRealPath();
        } catch (IOException e) {
            return Optional.empty();
        }
        Path top;
        try {
            top = sys.toRealPath();
        } catch (IOException e) {
            return Optional.empty();
        }
        for (Path d = device; d != null && d.startsWith(top) && !d.equals(top); d = d.getParent()) {
            Optional<String> node = read(d.resolve("numa_node"));
            if (node.isPresent()) {
                return node;
            }
        }
        return Optional.empty();
    }

    private static Optional<String> interfaceOf(InetAddress address) {
        try {
            NetworkInterface nic = NetworkInterface.getByInetAddress(address);
            return nic == null || nic.isLoopback() ? Optional.empty() : Optional.of(nic.getName());
        } catch (SocketException e) {
            return Optional.empty();
        }
    }

    private static Optional<String> read(Path file) {
        try {
            return Optional.of(Files.readString(file).trim());
        } catch (IOException e) {
            return Optional.empty();
        }
    }

    private static int parseNode(String s) {
        try {
            return Integer.parseInt(s);
        } catch (NumberFormatException e) {
            return AnonymousMemory.ANY_NODE;
        }
    }

    /** Whether a kernel node list ("0", "0-1", "0,2-3") holds {@code node}; a malformed list holds nothing. */
    static boolean contains(String list, int node) {
        return NumaNodes.parse(list).get(node);
    }

    /** How many nodes a kernel node list names; 0 when it is malformed. */
    static int count(String list) {
        return NumaNodes.parse(list).cardinality();
    }
}
