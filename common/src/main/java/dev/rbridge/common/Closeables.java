package dev.rbridge.common;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.Closeable;
import java.io.IOException;

/** Closing what is given up on (a refused or failed socket, a listener at shutdown): a failure changes nothing. */
public final class Closeables {
    private static final Logger log = LoggerFactory.getLogger(Closeables.class);

    private Closeables() {}

    /** Closes {@code c}; a failure to close is logged at debug and otherwise ignored: nothing is left to do with it. */
    public static void closeQuietly(Closeable c) {
        try {
            c.close();
        } catch (IOException e) {
            log.debug("close failed", e);
        }
    }
}
