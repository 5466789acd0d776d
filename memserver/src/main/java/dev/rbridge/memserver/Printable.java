package dev.rbridge.memserver;

/** Names and strings that clients send, made fit for a log line and a listing: {@link dev.rbridge.common.Printable}. */
final class Printable {
    private Printable() {
    }

    /** {@link dev.rbridge.common.Printable#cut}: control characters shown as '?', cut to {@code maxBytes} of UTF-8. */
    static String cut(String s, int maxBytes) {
        return dev.rbridge.common.Printable.cut(s, maxBytes);
    }
}
