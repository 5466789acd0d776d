package dev.rbridge.common;

/**
 * Names and strings that peers send (a memserver client's name, an NBD export name, a lease owner), made fit for a log
 * line and a listing: a peer must not be able to forge a log line or drown the log in one of its strings.
 */
public final class Printable {
    private Printable() {}

    /**
     * {@code s} with control characters (a forged log line's newline) and format characters (bidirectional overrides)
     * shown as '?', cut to {@code maxBytes} of UTF-8 at a character boundary.
     */
    public static String cut(String s, int maxBytes) {
        StringBuilder b = new StringBuilder(Math.min(s.length(), maxBytes));
        int bytes = 0;
        for (int i = 0; i < s.length();) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            if (Character.isISOControl(cp) || Character.getType(cp) == Character.FORMAT
                    || Character.getType(cp) == Character.LINE_SEPARATOR
                    || Character.getType(cp) == Character.PARAGRAPH_SEPARATOR
                    || Character.getType(cp) == Character.SURROGATE) {
                cp = '?';
            }
            int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (bytes + n > maxBytes) {
                break;
            }
            bytes += n;
            b.appendCodePoint(cp);
        }
        return b.toString();
    }
}
