package dev.rbridge.ops.http;

import org.junit.jupiter.api.Test;
import org.slf4j.Logger;

import java.lang.reflect.Proxy;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RateLimitedLogTest {
    /** A logger that keeps the text of each WARN. */
    private static Logger recording(List<String> warnings) {
        return (Logger) Proxy.newProxyInstance(Logger.class.getClassLoader(), new Class<?>[] {Logger.class},
                (proxy, method, args) -> {
                    if (method.getName().equals("warn") && args != null && args.length >= 2) {
                        warnings.add(String.valueOf(args[1]));
                    }
                    return method.getReturnType() == boolean.class ? Boolean.TRUE : null;
                });
    }

    @Test
    void aFloodOfOneKindIsOneLinePerIntervalSayingHowManyWereLeftOut() throws Exception {
        List<String> warnings = new CopyOnWriteArrayList<>();
        RateLimitedLog log = new RateLimitedLog(recording(warnings), 2, TimeUnit.SECONDS);
        for (int i = 0; i < 100; i++) {
            log.warn("malformed", "bad request " + i);
        }
        log.warn("evicted", "evicted one");
        assertEquals(List.of("bad request 0", "evicted one"), warnings, "one line per kind");
        Thread.sleep(2100);
        log.warn("malformed", "bad request 100");
        assertEquals(3, warnings.size());
        assertTrue(warnings.get(2).startsWith("bad request 100 (99 more like it in the last 2 s"), warnings.get(2));
    }
}
