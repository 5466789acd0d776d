package dev.rbridge.memserver;

/** Names and strings that clients send, made fit for a log line and a listing. */
final class Printable {
    private Printable() {
    }

    /**
     * {@code s} with control characters (a forged log line's newline) shown as '?', cut to {@code maxBytes} of UTF-8
     * at a character boundary.
     */
    static String cut(String s, int maxBytes) {
        StringBuilder b = new StringBuilder(Math.min(s.length(), maxBytes));
        int bytes = 0;
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            if (Character.isISOControl(cp) || Character.getType(cp) == Character.FORMAT) {
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
