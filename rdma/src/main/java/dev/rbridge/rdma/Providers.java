package dev.rbridge.rdma;

import dev.rbridge.rdma.local.LocalProvider;
import dev.rbridge.rdma.tcp.TcpProvider;
import dev.rbridge.rdma.ucx.UcxProvider;

import java.util.List;

/** The transports by name, so every command and the memserver accept the same {@code --transport} values. */
public final class Providers {
    private Providers() {
    }

    public static final List<String> NAMES = List.of("tcp", "local", "ucx");

    /** The provider called {@code name}, or IllegalArgumentException naming the ones there are. */
    public static RemoteMemoryProvider byName(String name) {
        return switch (name) {
            case "tcp" -> new TcpProvider();
            case "local" -> new LocalProvider();
            case "ucx" -> new UcxProvider(); // loads nothing of UCX until it connects or listens
            default -> throw new IllegalArgumentException("unknown transport '" + name + "' (available: "
                    + String.join(", ", NAMES) + ")");
        };
    }
}
