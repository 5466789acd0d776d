package dev.rbridge.cli.serve;

import dev.rbridge.nbd.interop.PeerTool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

import java.io.IOException;

/**
 * The bridge over the ucx transport: {@code rbridge serve} and two {@code rbridge memserver --transport ucx}
 * processes (UCX_TLS=tcp: this host has no RDMA device), one volume replicated on both. Real NBD clients check the data
 * end to end: fio's nbd engine with crc32c verification and an nbdcopy sha256 round trip. (A ucx memserver refuses
 * READ and WRITE on its control connection, so data that verifies went over UCX.)
 */
@Timeout(600)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Tag("interop")
class UcxServeInteropTest {
    @RegisterExtension
    static final ServeCluster.LogsOnFailure LOGS = new ServeCluster.LogsOnFailure();

    static ServeCluster cluster;

    @BeforeAll
    static void start() throws IOException {
        PeerTool.require("nbdcopy", "libnbd-bin");
        PeerTool.require("fio", "fio");
        cluster = LOGS.watch(ServeCluster.builder("ucx")
                .transport("ucx")
                .memservers(2)
                .capacity("1G")
                .volume("disk,size=512M,replicas=2,slab=16M")
                .start());
    }

    @AfterAll
    static void stop() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    @Order(1)
    void fioNbdEngineWithCrc32cVerify() {
        System.out.print(PeerTool.script(300, "fio_verify.sh", cluster.uri("disk"), "128"));
    }

    @Test
    @Order(2)
    void nbdcopyRoundTripOf256MiB() {
        System.out.print(PeerTool.script(300, "nbdcopy_roundtrip.sh", cluster.uri("disk"), "256"));
    }
}
