package dev.rbridge.cli;

import dev.rbridge.nbd.tls.NbdTls;
import dev.rbridge.nbd.tls.PskKeys;
import dev.rbridge.nbd.tls.TlsMode;
import dev.rbridge.common.tls.X509Credentials;
import picocli.CommandLine.Option;

import java.nio.file.Path;

/** TLS on the NBD side, shared by {@code serve} and {@code demo}: the flags and file names nbdkit and qemu-nbd use. */
final class NbdTlsOptions {
    @Option(names = "--tls", paramLabel = "off|on|require", defaultValue = "off",
            description = "TLS for NBD clients (NBD_OPT_STARTTLS; clients use nbds:// URIs). on: offered, plain"
                    + " clients served too; require: every option but STARTTLS is refused in clear (nothing is"
                    + " listed or served without TLS). Needs --tls-certificates or --tls-psk. Default ${DEFAULT-VALUE}.")
    String tls;

    @Option(names = "--tls-certificates", paramLabel = "DIR",
            description = "Directory with " + X509Credentials.SERVER_CERT + " and " + X509Credentials.SERVER_KEY
                    + " (PEM), and " + X509Credentials.CA_CERT + " for --tls-verify-peer: the layout nbdkit and"
                    + " qemu-nbd read.")
    Path certificates;

    @Option(names = "--tls-psk", paramLabel = "FILE",
            description = "Pre-shared keys instead of certificates: identity:hexkey lines, as `psktool -u NAME -p"
                    + " FILE` writes and nbdkit's --tls-psk and qemu's keys.psk read. Clients name their identity"
                    + " (libnbd: tls-username=NAME&tls-psk-file=FILE in the URI).")
    Path psk;

    @Option(names = "--tls-verify-peer",
            description = "Require a client certificate signed by the CA in " + X509Credentials.CA_CERT + ".")
    boolean verifyPeer;

    private NbdTls settings;

    /** TLS is required and clients prove who they are (a pre-shared key, or a certificate from the CA). */
    boolean authenticatesClients() {
        return TlsMode.parse(tls) == TlsMode.REQUIRE && (psk != null || verifyPeer);
    }

    /** Loads and checks the credentials; IllegalArgumentException naming the flag or file when something is wrong. */
    NbdTls settings() {
        if (settings == null) {
            TlsMode mode = TlsMode.parse(tls);
            if (mode == TlsMode.OFF) {
                if (certificates != null || verifyPeer || psk != null) {
                    throw new IllegalArgumentException("--tls-certificates, --tls-psk and --tls-verify-peer need --tls"
                            + " on or --tls require");
                }
                settings = NbdTls.OFF;
            } else if (psk != null) {
                if (certificates != null || verifyPeer) {
                    throw new IllegalArgumentException("--tls-psk and --tls-certificates (or --tls-verify-peer) cannot"
                            + " be used together: pick keys or certificates");
                }
                PskKeys keys = PskKeys.read(psk);
                if (keys.readableByOthers()) {
                    org.slf4j.LoggerFactory.getLogger(NbdTlsOptions.class).warn("{} can be read by other users: "
                            + "chmod 600 it", psk);
                }
                settings = NbdTls.psk(mode, keys);
            } else {
                if (certificates == null) {
                    throw new IllegalArgumentException("--tls " + mode + " needs --tls-certificates DIR (with "
                            + X509Credentials.SERVER_CERT + " and " + X509Credentials.SERVER_KEY
                            + ") or --tls-psk FILE");
                }
                settings = NbdTls.of(mode, X509Credentials.serverContext(certificates, verifyPeer), verifyPeer,
                        "X.509 from " + certificates);
            }
        }
        return settings;
    }
}
