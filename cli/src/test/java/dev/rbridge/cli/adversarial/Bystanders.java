package dev.rbridge.cli.adversarial;

import java.io.IOException;
import java.time.Duration;
import java.util.List;

/**
 * The clients an attack on the ops ports must not hurt, and how the attack tests check them: a libnbd client doing
 * I/O through the bridge ({@link WellBehavedClient}) and an HTTP client asking ops endpoints
 * ({@link WellBehavedHttpClient}). Served means: nothing failed and nobody waited longer than {@link #SERVED_WITHIN}.
 */
final class Bystanders implements AutoCloseable {
    static final Duration SERVED_WITHIN = Duration.ofSeconds(2);

    private final WellBehavedClient nbd;
    private final WellBehavedHttpClient http;

    private Bystanders(WellBehavedClient nbd, WellBehavedHttpClient http) {
        this.nbd = nbd;
        this.http = http;
    }

    /** Starts both clients (the NBD one on {@code nbdUri}) and waits until each has been served a few times. */
    static Bystanders start(String nbdUri, List<WellBehavedHttpClient.Target> targets)
            throws IOException, InterruptedException {
        WellBehavedHttpClient http = new WellBehavedHttpClient(targets);
        WellBehavedClient nbd;
        try {
            nbd = WellBehavedClient.start(nbdUri, 0);
        } catch (IOException | RuntimeException e) {
            http.close();
            throw e;
        }
        Bystanders b = new Bystanders(nbd, http);
        try {
            nbd.awaitCycles(5, Duration.ofSeconds(60));
            http.awaitRounds(2, Duration.ofSeconds(30));
        } catch (InterruptedException | RuntimeException | Error e) {
            b.close();
            throw e;
        }
        return b;
    }

    /** For {@code @BeforeEach}: both are served now; measuring starts afresh for the attack that follows. */
    void servedBefore() throws InterruptedException {
        http.awaitRounds(1, Duration.ofSeconds(30));
        http.assertServedWithin(SERVED_WITHIN);
        nbd.resetLongestGap();
        http.reset();
    }

    /** Both were served throughout what happened since {@link #servedBefore}, and still are a few rounds later. */
    void servedThroughoutAndAfter() throws InterruptedException {
        http.assertServedWithin(SERVED_WITHIN);
        nbd.assertServedWithin(SERVED_WITHIN);
        http.awaitRounds(2, Duration.ofSeconds(30));
        nbd.awaitCycles(3, Duration.ofSeconds(30));
        http.assertServedWithin(SERVED_WITHIN);
        nbd.assertServedWithin(SERVED_WITHIN);
    }

    @Override
    public void close() throws InterruptedException {
        try {
            http.close();
        } finally {
            nbd.close();
        }
    }
}
