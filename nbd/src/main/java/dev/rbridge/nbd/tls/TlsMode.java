package dev.rbridge.nbd.tls;

import java.util.Locale;

/** Whether the NBD server offers TLS (NBD_OPT_STARTTLS), and whether it insists on it. */
public enum TlsMode {
    /** STARTTLS is answered "unsupported": every byte travels in clear. */
    OFF,
    /** Clients may upgrade with STARTTLS; plain clients are served too. */
    ON,
    /**
     * Every option but STARTTLS and ABORT before TLS gets NBD_REP_ERR_TLS_REQD, EXPORT_NAME (which has no error
     * reply) closes the connection: nothing is listed, described or served in clear.
     */
    REQUIRE;

    /** "off", "on" or "require" (any case); IllegalArgumentException naming the choices otherwise. */
    public static TlsMode parse(String s) {
        try {
            return valueOf(s.trim().toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--tls must be off, on or require, not '" + s + "'");
        }
    }

    @Override
    public String toString() {
        return name().toLowerCase(Locale.ROOT);
    }
}
