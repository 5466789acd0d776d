package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.KeyEnforcement;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Whether withdrawn remote keys are NIC-enforced, decided from what UCX 1.13 itself prints and reads: on this host (no
 * RDMA device, UCX_TLS=tcp as every ucx test) through UCX's own calls, and for RDMA from descriptions in the exact
 * layout UCX 1.13.1's {@code ucp_context_print_info} and {@code ucp_ep_print_info} print (the guest lab checks the real
 * ones on soft-RoCE).
 */
class UcxKeyCheckTest {
    /** A memserver context on soft-RoCE with UCX_TLS=rc_verbs,ud_verbs, as ucp_context_print_info prints it. */
    static final String RXE_CONTEXT = """
            #
            # UCP context
            #
            #     component 0  :  self
            #     component 1  :  tcp
            #     component 2  :  sysv
            #     component 3  :  posix
            #     component 4  :  ib
            #     component 5  :  rdmacm
            #     component 6  :  cma
            #
            #            md 0  :  component 4  rxe0\s
            #
            #      resource 0  :  md 0  dev 0  flags -- rc_verbs/rxe0:1
            #      resource 1  :  md 0  dev 0  flags -- ud_verbs/rxe0:1
            #
            """;
    /** The same host's context with UCX_TLS=sm,self: the IB component is there, no IB memory domain is opened. */
    static final String SHM_CONTEXT = """
            #
            # UCP context
            #
            #     component 0  :  self
            #     component 1  :  tcp
            #     component 2  :  sysv
            #     component 3  :  posix
            #     component 4  :  ib
            #     component 5  :  rdmacm
            #     component 6  :  cma
            #
            #            md 0  :  component 0  self\s
            #            md 1  :  component 2  sysv\s
            #            md 2  :  component 3  posix\s
            #            md 3  :  component 6  cma\s
            #
            #      resource 0  :  md 0  dev 0  flags -- self/memory0
            #      resource 1  :  md 1  dev 1  flags -- sysv/memory
            #      resource 2  :  md 2  dev 1  flags -- posix/memory
            #      resource 3  :  md 3  dev 1  flags -- cma/memory
            #
            """;
    /** An endpoint over rc_verbs with a ud_verbs wire-up lane, as ucp_ep_print_info prints it. */
    static final String RC_ENDPOINT = """
            #
            # UCP endpoint\s
            #
            #               peer: <no debug data>
            #                 lane[0]:  0:rc_verbs/rxe0:1.0 md[0]         -> md[0]/ib/sysdev[255] rma_bw#0 am am_bw#0
            #                 lane[1]:  1:ud_verbs/rxe0:1.0 md[0]         -> md[0]/ib/sysdev[255] keepalive wireup
            #
            #                  put[0]: 0     short: 124     bcopy: 8256     zcopy
            #                  get[0]: 0     bcopy: 4096     zcopy
            #
            #                  rma_bw: mds [0] #
            """;
    /** Two processes of one host with UCX's default transports: GET and PUT may go over cma for large sizes. */
    static final String RC_AND_CMA_ENDPOINT = """
            #
            # UCP endpoint\s
            #
            #               peer: <no debug data>
            #                 lane[0]:  0:rc_verbs/rxe0:1.0 md[0]         -> md[0]/ib/sysdev[255] rma_bw#1 am_bw#1
            #                 lane[1]:  4:posix/memory.0 md[2]            -> md[2]/posix/sysdev[255] am am_bw#0
            #                 lane[2]:  5:cma/memory.0 md[3]              -> md[3]/cma/sysdev[255] rma_bw#0
            #
            #                  put[0]: 0     short: 124     bcopy: 8256     zcopy
            #                  get[0]: 0     bcopy: 4096     zcopy
            #
            #                  rma_bw: mds [0] [3] #
            """;

    private static final List<String> DIRECT = List.of("direct");

    @Test
    void anRdmaContextRegisteringEachRegionOnItsOwnEnforcesKeys() {
        KeyEnforcement k = UcxKeyCheck.context(RXE_CONTEXT, DIRECT);
        assertTrue(k.enforced(), k.reason());
        assertTrue(k.reason().contains("rxe0"), k.reason());
    }

    @Test
    void aRegistrationCacheOrOneOdpKeyOrAMethodUcxIgnoresEnforcesNothing() {
        for (List<String> methods : List.of(List.of("rcache", "odp", "direct"), List.of("rcache"), List.of("ODP"),
                List.of(" Direct "), List.of("Direct"), List.of("direkt"), List.of(""))) {
            KeyEnforcement k = UcxKeyCheck.context(RXE_CONTEXT, methods);
            assertFalse(k.enforced(), "UCX_IB_REG_METHODS=" + methods);
            assertTrue(k.reason().startsWith("UCX_IB_REG_METHODS="), k.reason());
        }
        // UCX takes the first method it knows; an unknown entry before 'direct' is skipped as UCX skips it.
        assertTrue(UcxKeyCheck.context(RXE_CONTEXT, List.of(" Direct ", "direct")).enforced());
        assertFalse(UcxKeyCheck.context(RXE_CONTEXT, null).enforced(), "no IB component");
        assertNull(UcxKeyCheck.regMethod(List.of(" Direct ")));
        assertEquals("rcache", UcxKeyCheck.regMethod(List.of("RCache", "direct")));
    }

    @Test
    void aContextWithoutAnIbMemoryDomainEnforcesNothing() {
        KeyEnforcement k = UcxKeyCheck.context(SHM_CONTEXT, DIRECT);
        assertFalse(k.enforced());
        assertTrue(k.reason().contains("cma/memory"), k.reason());
    }

    @Test
    void anEndpointWhoseRmaLanesAreAllRdmaEnforcesKeys() {
        KeyEnforcement k = UcxKeyCheck.endpoint(RC_ENDPOINT);
        assertTrue(k.enforced(), k.reason());
        assertTrue(k.reason().contains("rc_verbs/rxe0:1"), k.reason());
    }

    @Test
    void anEndpointThatMayUseCmaForRmaEnforcesNothing() {
        KeyEnforcement k = UcxKeyCheck.endpoint(RC_AND_CMA_ENDPOINT);
        assertFalse(k.enforced());
        assertTrue(k.reason().contains("cma/memory"), k.reason());
    }

    /** Over tcp UCX has no RMA lane and emulates GET and PUT with active messages: what UCX prints here says so. */
    @Test
    void thisHostsTcpEndpointsAndContextAreSeenAsNotEnforced() throws Exception {
        try (UcxLoopback loopback = new UcxLoopback("keys"); UcxConnection c = loopback.connect("keys")) {
            String info = c.loop().call(() -> UcxInfo.endpointInfo(c.endpointForTests()), 30_000);
            assertTrue(info.contains("tcp/"), info);
            KeyEnforcement ep = UcxKeyCheck.endpoint(info);
            assertFalse(ep.enforced());
            assertTrue(ep.reason().contains("emulates"), ep.reason());

            KeyEnforcement listener = loopback.listener.keysEnforced();
            assertFalse(listener.enforced());
            assertTrue(listener.reason().contains("no InfiniBand/RoCE memory domain"), listener.reason());
            assertTrue(UcxInfo.contextInfo(loopback.listener.context).contains("tcp/lo"));
        }
    }

    /** UCX_IB_REG_METHODS as UCX itself reads it: the environment's value as written, else UCX's default. */
    @Test
    void theIbRegistrationMethodsAreReadThroughUcx() throws Throwable {
        UcxPresent.assume();
        Ucx.serverContext(); // loaded
        String before = System.getenv("UCX_IB_REG_METHODS");
        try {
            Ucx.setenv("UCX_IB_REG_METHODS", " Direct ");
            assertEquals(List.of(" Direct "), UcxInfo.ibRegMethods());
            Ucx.setenv("UCX_IB_REG_METHODS", "rcache,direct");
            assertEquals(List.of("rcache", "direct"), UcxInfo.ibRegMethods());
            Ucx.setenv("UCX_IB_REG_METHODS", null);
            assertEquals(List.of("rcache", "odp", "direct"), UcxInfo.ibRegMethods(), "UCX 1.13's default");
        } finally {
            Ucx.setenv("UCX_IB_REG_METHODS", before);
        }
    }
}
