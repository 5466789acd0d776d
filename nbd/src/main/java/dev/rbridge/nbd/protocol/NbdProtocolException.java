package dev.rbridge.nbd.protocol;

/**
 * The peer broke a mandatory rule of the protocol (bad magic, unknown client flags, ...). The only safe answer is to
 * end that one session; the message says what was wrong so the log can tell an operator which client misbehaved.
 */
public final class NbdProtocolException extends Exception {
    public NbdProtocolException(String message) {
        super(message);
    }
}
