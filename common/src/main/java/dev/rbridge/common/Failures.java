package dev.rbridge.common;

import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/** What went wrong in an asynchronous operation, without the wrappers futures add around it. */
public final class Failures {
    private Failures() {}

    /** The failure inside any {@link CompletionException} and {@link ExecutionException} wrappers. */
    public static Throwable cause(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    /** The cause's message, or the cause itself when it has none: a reason for a log line or an error. */
    public static String reason(Throwable t) {
        Throwable c = cause(t);
        return c.getMessage() == null ? c.toString() : c.getMessage();
    }
}
