package dev.rbridge.rdma.ucx;

import dev.rbridge.common.ffm.Libc;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.util.List;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

/**
 * What UCX itself says about a context, an endpoint and its configuration, through UCX's public C API (JUCX 1.12 has
 * no call for any of it, and UCX 1.13's {@code ucp_ep_query} has no transport field): {@code ucp_context_print_info}
 * (the memory domains and transports a context opened), {@code ucp_ep_print_info} (an endpoint's lanes, and which of
 * them carry GET and PUT) and the IB memory domain's effective configuration as UCX reads it, from the environment
 * and ucx.conf ({@code uct_md_config_read}, {@code uct_config_get}). Only once UCX is loaded ({@link Ucx}).
 */
final class UcxInfo {
    private UcxInfo() {}

    /** The native functions, bound on first use (UCX must not load before a ucx transport is used). */
    private static final class Native {
        static final Linker LINKER = Linker.nativeLinker();
        static final SymbolLookup UCP = SymbolLookup.libraryLookup("libucp.so.0", Arena.global());
        static final SymbolLookup UCT = SymbolLookup.libraryLookup("libuct.so.0", Arena.global());
        static final MethodHandle OPEN_MEMSTREAM = libc("open_memstream",
                FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS));
        static final MethodHandle FCLOSE = libc("fclose", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        static final MethodHandle FREE = libc("free", FunctionDescriptor.ofVoid(ADDRESS));
        static final MethodHandle CONTEXT_PRINT_INFO = bind(UCP, "ucp_context_print_info",
                FunctionDescriptor.ofVoid(ADDRESS, ADDRESS));
        static final MethodHandle EP_PRINT_INFO = bind(UCP, "ucp_ep_print_info",
                FunctionDescriptor.ofVoid(ADDRESS, ADDRESS));
        static final MethodHandle QUERY_COMPONENTS = bind(UCT, "uct_query_components",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        static final MethodHandle RELEASE_COMPONENT_LIST = bind(UCT, "uct_release_component_list",
                FunctionDescriptor.ofVoid(ADDRESS));
        static final MethodHandle COMPONENT_QUERY = bind(UCT, "uct_component_query",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        static final MethodHandle MD_CONFIG_READ = bind(UCT, "uct_md_config_read",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS));
        static final MethodHandle CONFIG_GET = bind(UCT, "uct_config_get",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG));
        static final MethodHandle CONFIG_RELEASE = bind(UCT, "uct_config_release",
                FunctionDescriptor.ofVoid(ADDRESS));

        private static MethodHandle libc(String name, FunctionDescriptor d) {
            return Libc.downcallWithoutErrno(name, d);
        }

        private static MethodHandle bind(SymbolLookup lib, String name, FunctionDescriptor d) {
            return LINKER.downcallHandle(lib.find(name).orElseThrow(() -> new UnsatisfiedLinkError(name)), d);
        }
    }

    /** uct_component_attr_t: field_mask (8 bytes), then name[UCT_COMPONENT_NAME_MAX = 16]. */
    private static final long COMPONENT_NAME_OFFSET = 8;
    private static final long COMPONENT_ATTR_SIZE = 64;
    private static final long COMPONENT_ATTR_FIELD_NAME = 1;

    /** Writes to a C stream. */
    private interface Printer {
        void print(MemorySegment file) throws Throwable;
    }

    /** {@code ucp_context_print_info}: the context's components, memory domains and transport resources. */
    static String contextInfo(UcpContext context) {
        MemorySegment ctx = MemorySegment.ofAddress(context.getNativeId());
        return printed(file -> {
            Native.CONTEXT_PRINT_INFO.invokeExact(ctx, file);
        });
    }

    /**
     * {@code ucp_ep_print_info}: the endpoint's lanes and the GET/PUT protocol of each RMA lane. Call it on the thread
     * that progresses the endpoint's worker.
     */
    static String endpointInfo(UcpEndpoint endpoint) {
        MemorySegment ep = MemorySegment.ofAddress(endpoint.getNativeId());
        return printed(file -> {
            Native.EP_PRINT_INFO.invokeExact(ep, file);
        });
    }

    /**
     * How the IB memory domain registers memory as UCX would configure it now (UCX_IB_REG_METHODS from the
     * environment, else ucx.conf, else UCX's default), as UCX prints the list: entries between commas, as written.
     * Null when UCX has no IB component (built without it, or libibverbs missing).
     */
    static List<String> ibRegMethods() {
        String value = ibMdConfig("REG_METHODS");
        return value == null ? null : List.of(value.split(",", -1));
    }

    /** A setting of the IB memory domain's configuration as UCX reads it, or null without an IB component. */
    private static String ibMdConfig(String name) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment listOut = a.allocate(ADDRESS);
            MemorySegment countOut = a.allocate(JAVA_INT);
            check("uct_query_components", (int) Native.QUERY_COMPONENTS.invokeExact(listOut, countOut));
            MemorySegment list = listOut.get(ADDRESS, 0).reinterpret(ADDRESS.byteSize() * countOut.get(JAVA_INT, 0));
            try {
                for (int i = 0; i < countOut.get(JAVA_INT, 0); i++) {
                    MemorySegment component = list.getAtIndex(ADDRESS, i);
                    MemorySegment attr = a.allocate(COMPONENT_ATTR_SIZE, 8);
                    attr.set(JAVA_LONG, 0, COMPONENT_ATTR_FIELD_NAME);
                    check("uct_component_query", (int) Native.COMPONENT_QUERY.invokeExact(component, attr));
                    if (attr.getString(COMPONENT_NAME_OFFSET).equals("ib")) {
                        return mdConfig(a, component, name);
                    }
                }
                return null;
            } finally {
                Native.RELEASE_COMPONENT_LIST.invokeExact(listOut.get(ADDRESS, 0));
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }

    private static String mdConfig(Arena a, MemorySegment component, String name) throws Throwable {
        MemorySegment configOut = a.allocate(ADDRESS);
        check("uct_md_config_read", (int) Native.MD_CONFIG_READ.invokeExact(component, MemorySegment.NULL,
                MemorySegment.NULL, configOut));
        MemorySegment config = configOut.get(ADDRESS, 0);
        try {
            MemorySegment value = a.allocate(4096);
            check("uct_config_get " + name, (int) Native.CONFIG_GET.invokeExact(config, a.allocateFrom(name), value,
                    value.byteSize()));
            return value.getString(0);
        } finally {
            Native.CONFIG_RELEASE.invokeExact(config);
        }
    }

    private static void check(String what, int status) {
        if (status != 0) {
            throw new IllegalStateException(what + " failed (UCX status " + status + ")");
        }
    }

    /** What {@code printer} writes to a C stream (open_memstream), as a string. */
    private static String printed(Printer printer) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment bufferOut = a.allocate(ADDRESS);
            MemorySegment sizeOut = a.allocate(JAVA_LONG);
            MemorySegment file = (MemorySegment) Native.OPEN_MEMSTREAM.invokeExact(bufferOut, sizeOut);
            if (file.equals(MemorySegment.NULL)) {
                throw new IllegalStateException("open_memstream failed");
            }
            try {
                printer.print(file);
            } finally {
                int closed = (int) Native.FCLOSE.invokeExact(file); // sets the buffer and its size
                if (closed != 0) {
                    Native.FREE.invokeExact(bufferOut.get(ADDRESS, 0));
                    throw new IllegalStateException("fclose of the memory stream failed");
                }
            }
            MemorySegment buffer = bufferOut.get(ADDRESS, 0);
            try {
                return buffer.reinterpret(sizeOut.get(JAVA_LONG, 0) + 1).getString(0);
            } finally {
                Native.FREE.invokeExact(buffer);
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }
}
