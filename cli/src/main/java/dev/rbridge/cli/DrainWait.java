package dev.rbridge.cli;

import dev.rbridge.ops.json.Json;

import java.io.IOException;
import java.io.PrintWriter;
import java.net.ConnectException;
import java.net.http.HttpClient;
import java.net.http.HttpResponse;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.TimeUnit;

/**
 * rbridge admin drain --wait, after the drain: polls the memserver's stats every second until its admin interface
 * stops answering (it exits once its last client has gone) or answers for a new instance (a supervisor restarted
 * it), printing the clients it still waits for whenever that changes. Gives up (exit 1, saying why) when nothing
 * moved for --give-up-after ({@link #STALL_SECONDS} by default): the bridges are not taking its replicas elsewhere.
 */
final class DrainWait {
    /** How long drain --wait waits with nothing moving (clients, granted bytes) before it gives up, by default. */
    static final int STALL_SECONDS = 120;

    private final AdminClient admin;
    private final PrintWriter out;
    private final PrintWriter err;
    private final int giveUpAfterSeconds;
    /** The clients last said, the granted bytes last seen, and when either last changed. */
    private long said = -1;
    private long lastGranted = -1;
    private long lastChange;

    DrainWait(AdminClient admin, PrintWriter out, PrintWriter err, int giveUpAfterSeconds) {
        this.admin = admin;
        this.out = out;
        this.err = err;
        this.giveUpAfterSeconds = giveUpAfterSeconds;
    }

    /** Waits as described above; the exit code. */
    int await(String statsUrl) throws InterruptedException {
        lastChange = System.nanoTime();
        try (HttpClient client = AdminClient.newHttpClient()) {
            while (true) {
                OptionalInt exit = poll(client, statsUrl);
                if (exit.isPresent()) {
                    return exit.getAsInt();
                }
                Thread.sleep(1000);
            }
        }
    }

    /** One look at the stats: the exit code once there is one, else empty (look again in a second). */
    private OptionalInt poll(HttpClient client, String statsUrl) throws InterruptedException {
        Map<?, ?> stats;
        try {
            HttpResponse<String> r = admin.get(client, statsUrl);
            if (!(r.statusCode() == 200 && Json.parse(r.body()) instanceof Map<?, ?> m)) {
                err.println("admin: the memserver's stats: " + AdminClient.errorText(r.body()));
                return OptionalInt.of(1);
            }
            stats = m;
        } catch (ConnectException e) {
            return exited("memserver exited: drained");
        } catch (IOException | IllegalArgumentException e) {
            // it may be closing its listener just now: the next poll tells, within the same bound
            if (System.nanoTime() - lastChange > TimeUnit.SECONDS.toNanos(giveUpAfterSeconds)) {
                err.println("admin: the memserver's stats did not answer for " + giveUpAfterSeconds + " s: "
                        + (e.getMessage() == null ? e : e.getMessage()));
                return OptionalInt.of(1);
            }
            return OptionalInt.empty();
        }
        if (!Boolean.TRUE.equals(stats.get("draining"))) {
            return exited("memserver exited: drained (a new instance answers there now)");
        }
        return progress(AdminClient.number(stats.get("clients")), AdminClient.number(stats.get("granted_bytes")));
    }

    private OptionalInt exited(String line) {
        out.println(line);
        out.flush();
        return OptionalInt.of(0);
    }

    /** Says the clients left when that changed; exit 1 once nothing moved for too long, else empty. */
    private OptionalInt progress(long clients, long granted) {
        long now = System.nanoTime();
        if (clients != said || granted != lastGranted) {
            lastChange = now;
            lastGranted = granted;
        }
        if (clients != said) {
            said = clients;
            out.println("draining: waiting for " + clients + " client(s) to leave (" + Sizes.format(granted)
                    + " granted); bridges move their replicas to other memservers first");
            out.flush();
        } else if (now - lastChange > TimeUnit.SECONDS.toNanos(giveUpAfterSeconds)) {
            err.println("admin: nothing moved for " + giveUpAfterSeconds + " s: " + clients + " client(s) stay with "
                    + Sizes.format(granted) + " granted; the bridges cannot take its replicas elsewhere (their logs"
                    + " say why: too few memservers or no room); it stays draining");
            return OptionalInt.of(1);
        }
        return OptionalInt.empty();
    }
}
