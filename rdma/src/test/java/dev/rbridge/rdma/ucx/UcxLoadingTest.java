package dev.rbridge.rdma.ucx;

import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The one-sentence failures when UCX cannot be used: missing libucx0, no RDMA device where one is asked for. */
class UcxLoadingTest {
    @Test
    void aMissingLibucxSaysWhatToInstallAndWhichTransportToUse() {
        String m = Ucx.loadFailure(new UnsatisfiedLinkError("Native code library failed to load: libjucx.so. "
                + "libucp.so.0: cannot open shared object file: No such file or directory"));
        assertTrue(m.contains("apt-get install libucx0") && m.contains("--transport tcp"), m);
    }

    @Test
    void anRdmaTransportWithoutAnRdmaDeviceIsRefusedUpFront() {
        RemoteMemoryException e = assertThrows(RemoteMemoryException.class,
                () -> Ucx.checkRdmaDevice(Map.of("UCX_TLS", "rc_verbs,ud_verbs"), List.of()));
        assertEquals(Status.CONNECT_FAILED, e.status());
        assertTrue(e.getMessage().contains("no RDMA device") && e.getMessage().contains("--transport tcp"),
                e.getMessage());
        assertThrows(RemoteMemoryException.class,
                () -> Ucx.checkRdmaDevice(Map.of("UCX_NET_DEVICES", "rxe0:1"), List.of()));
    }

    @Test
    void tcpOrNoChoiceOrAPresentDeviceIsFine() {
        assertDoesNotThrow(() -> Ucx.checkRdmaDevice(Map.of("UCX_TLS", "tcp"), List.of()));
        assertDoesNotThrow(() -> Ucx.checkRdmaDevice(Map.of(), List.of()));
        assertDoesNotThrow(() -> Ucx.checkRdmaDevice(Map.of("UCX_TLS", "^rc,ud"), List.of()));
        assertDoesNotThrow(() -> Ucx.checkRdmaDevice(Map.of("UCX_TLS", "rc_verbs"), List.of("rxe0")));
        assertDoesNotThrow(() -> Ucx.checkRdmaDevice(Map.of("UCX_NET_DEVICES", "lo,eth0"), List.of()));
    }

    @Test
    void registrationsPinPagesOnlyWhereANicMayHoldThem() {
        assertFalse(Ucx.registrationPinsPages(Map.of(), List.of()), "no RDMA device: nothing can pin");
        assertFalse(Ucx.registrationPinsPages(Map.of("UCX_TLS", "rc_verbs"), List.of()));
        assertTrue(Ucx.registrationPinsPages(Map.of(), List.of("rxe0")), "a device UCX may use");
        assertTrue(Ucx.registrationPinsPages(Map.of("UCX_TLS", "^tcp"), List.of("rxe0")));
        assertTrue(Ucx.registrationPinsPages(Map.of("UCX_TLS", "tcp,rc_verbs"), List.of("mlx5_0")));
        assertTrue(Ucx.registrationPinsPages(Map.of("UCX_TLS", "all"), List.of("mlx5_0")));
        assertFalse(Ucx.registrationPinsPages(Map.of("UCX_TLS", "tcp"), List.of("rxe0")),
                "UCX told to use tcp only emulates GET and PUT");
        assertFalse(Ucx.registrationPinsPages(Map.of("UCX_TLS", "tcp,cma,self"), List.of("rxe0")));
        assertFalse(Ucx.registrationPinsPages(Map.of("UCX_NET_DEVICES", "lo,eth0"), List.of("rxe0")),
                "only non-RDMA devices named");
        assertTrue(Ucx.registrationPinsPages(Map.of("UCX_NET_DEVICES", "rxe0:1"), List.of("rxe0")));
    }

    @Test
    void onlyTransportsKnownNotToPinCountAsNotPinning() {
        List<String> nic = List.of("mlx5_0");
        for (String tls : List.of("tcp", "self", "sm", "shm", "mm", "posix", "sysv", "cma", "knem", "xpmem",
                "tcp,sm,self", "TCP, posix ,sysv,", "\\tcp,\\cma", "tcp:aux,self")) {
            assertFalse(Ucx.registrationPinsPages(Map.of("UCX_TLS", tls), nic), "UCX_TLS=" + tls);
        }
        // Named RDMA transports, and any name this build does not know (a newer UCX's, a typo): when unsure, pinned.
        for (String tls : List.of("rc_verbs", "dc_mlx5", "gga", "srd", "tcp,gga", "sm,rc_x", "cuda_copy,tcp",
                "ud:aux,tcp", "no_such_transport")) {
            assertTrue(Ucx.registrationPinsPages(Map.of("UCX_TLS", tls), nic), "UCX_TLS=" + tls);
        }
    }
}
