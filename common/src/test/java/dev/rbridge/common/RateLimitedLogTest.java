package dev.rbridge.common;

import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;

class RateLimitedLogTest {
    @Test
    void oneLinePerReasonPerIntervalThenTheCountOfWhatWasSuppressed() {
        AtomicLong now = new AtomicLong(1_000);
        RateLimitedLog log = new RateLimitedLog(LoggerFactory.getLogger(RateLimitedLogTest.class), 100, now::get);
        assertEquals(0, log.admit("malformed"), "the first line is written");
        for (int i = 0; i < 7; i++) {
            now.addAndGet(10);
            assertEquals(-1, log.admit("malformed"));
        }
        assertEquals(0, log.admit("hello_timeout"), "each reason has its own interval");
        now.set(1_100);
        assertEquals(7, log.admit("malformed"), "the next line says how many were held back");
        assertEquals(-1, log.admit("malformed"));
        now.set(5_000);
        assertEquals(1, log.admit("malformed"));
        now.set(10_000);
        assertEquals(0, log.admit("malformed"));
    }
}
