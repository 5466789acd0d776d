package dev.rbridge.rdma.link;

import javax.net.ssl.SSLException;

/** What a failed TLS handshake means, in the words an operator acts on; JSSE's own message follows in brackets. */
public final class TlsFailures {
    private TlsFailures() {}

    /** {@code e} explained from the side that saw it; {@code host}: the name or address the client asked for. */
    public static String explain(SSLException e, String host) {
        String m = String.valueOf(e.getMessage());
        String why;
        if (m.contains("certificate_expired") || m.contains("validity check failed") || m.contains("expired")) {
            why = "a certificate has expired (or is not valid yet): renew it";
        } else if (m.contains("PKIX path") || m.contains("unable to find valid certification path")) {
            why = "the peer's certificate is not signed by the CA in ca-cert.pem";
        } else if (m.contains("No subject alternative") || m.contains("No name matching")) {
            why = "the peer's certificate is not issued for " + host + " (its subject alternative names must "
                    + "include it)";
        } else if (m.contains("certificate_required")) {
            why = "the peer requires a client certificate (client-cert.pem and client-key.pem in the "
                    + "certificates directory)";
        } else if (m.contains("bad_certificate") || m.contains("certificate_unknown")
                || m.contains("unknown_ca")) {
            why = "the peer refused our certificate (not from the CA it trusts)";
        } else {
            why = "the peers could not agree";
        }
        return why + " [" + m + "]";
    }
}
