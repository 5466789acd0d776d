package dev.rbridge.rdma;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** The transports {@code --transport} accepts, found by name: every provider the rdma module has, and no other. */
class ProvidersTest {
    @Test
    void namesTheThreeTransportsInTheirOrder() {
        assertEquals(List.of("tcp", "local", "ucx"), Providers.NAMES);
    }

    @Test
    void eachNameGivesItsOwnProviderNewEachTime() {
        for (String name : Providers.NAMES) {
            RemoteMemoryProvider p = Providers.byName(name);
            assertEquals(name, p.name());
            assertNotSame(p, Providers.byName(name), name);
        }
        assertEquals("dev.rbridge.rdma.tcp.TcpProvider", Providers.byName("tcp").getClass().getName());
        assertEquals("dev.rbridge.rdma.local.LocalProvider", Providers.byName("local").getClass().getName());
        assertEquals("dev.rbridge.rdma.ucx.UcxProvider", Providers.byName("ucx").getClass().getName());
    }

    @Test
    void anUnknownNameIsRefusedWithTheNamesThereAre() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Providers.byName("rdma"));
        assertEquals("unknown transport 'rdma' (available: tcp, local, ucx)", e.getMessage());
    }
}
