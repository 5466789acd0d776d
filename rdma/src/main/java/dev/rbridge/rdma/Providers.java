package dev.rbridge.rdma;

import java.util.List;
import java.util.ServiceLoader;
import java.util.stream.Stream;

/**
 * The transports by name, so every command and the memserver accept the same {@code --transport} values. The
 * providers are found through {@link ServiceLoader} ({@code META-INF/services/dev.rbridge.rdma.RemoteMemoryProvider}
 * lists them), so this package, the SPI's, names none of the packages that implement it.
 */
public final class Providers {
    private Providers() {}

    public static final List<String> NAMES = providers().map(RemoteMemoryProvider::name).toList();

    /** A new provider called {@code name}, or IllegalArgumentException naming the ones there are. */
    public static RemoteMemoryProvider byName(String name) {
        // ucx's provider loads nothing of UCX until it connects or listens
        return providers().filter(p -> p.name().equals(name)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("unknown transport '" + name + "' (available: "
                        + String.join(", ", NAMES) + ")"));
    }

    /** Every provider, each made anew, in the order of the services file. */
    private static Stream<RemoteMemoryProvider> providers() {
        return ServiceLoader.load(RemoteMemoryProvider.class, Providers.class.getClassLoader()).stream()
                .map(ServiceLoader.Provider::get);
    }
}
