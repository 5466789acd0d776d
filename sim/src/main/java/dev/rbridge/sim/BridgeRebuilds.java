package dev.rbridge.sim;

import dev.rbridge.bridge.volume.Rebuilder;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntConsumer;

/**
 * The bridges' rebuild roles, as {@link Rebuilder} runs them: each bridge keeps a queue of its missing pieces in the
 * order they were offered and copies one at a time; the target is the placement policy's choice (with the room
 * reserved while the copy runs); when no memserver has room, or the target fails under the copy, the piece goes to
 * the back of the queue and the bridge rests {@link Rebuilder#BACKOFF}. A bridge that fails loses the copy it was
 * making and rebuilds nothing until it is back. How long a copy takes is the model's: the slab (times the pieces read,
 * for erasure coding) at the copy speed, or longer when the memservers' links are shared by more copies (each copy's
 * share is fixed when it starts).
 */
final class BridgeRebuilds {
    private record Task(int piece, int failure) {
    }

    private static final double BACKOFF_SECONDS = Rebuilder.BACKOFF.toNanos() / 1e9;

    private final EventQueue events;
    private final Cluster cluster;
    private final Scenario scenario;
    private final Scheme scheme;
    /** Told the failure a piece was missing for once it is held again (or no longer needs this copy). */
    private final IntConsumer settled;
    private final List<ArrayDeque<Task>> queues;
    private final boolean[] busy;
    private final boolean[] down;
    private final int[] incarnation;
    private long copies;

    BridgeRebuilds(EventQueue events, Cluster cluster, Scenario scenario, Scheme scheme, IntConsumer settled) {
        this.events = events;
        this.cluster = cluster;
        this.scenario = scenario;
        this.scheme = scheme;
        this.settled = settled;
        int n = scenario.bridges();
        this.queues = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            queues.add(new ArrayDeque<>());
        }
        this.busy = new boolean[n];
        this.down = new boolean[n];
        this.incarnation = new int[n];
    }

    /** Pieces copied onto a new memserver so far. */
    long copies() {
        return copies;
    }

    /** Queues a missing piece with the bridge that serves its group (for the failure {@code failure}). */
    void offer(int piece, int failure) {
        int b = cluster.bridgeOf(cluster.groupOf(piece));
        queues.get(b).addLast(new Task(piece, failure));
        next(b);
    }

    /** The bridge fails: its copy under way is lost, and it rebuilds again once restarted. */
    void bridgeFails(int b) {
        if (down[b]) {
            return;
        }
        down[b] = true;
        incarnation[b]++;
        events.after(scenario.bridgeRestartSeconds(), () -> {
            down[b] = false;
            next(b);
        });
    }

    boolean bridgeUp(int b) {
        return !down[b];
    }

    /** Starts the bridge's next copy unless one runs, it rests or it is down; skips pieces no longer missing. */
    private void next(int b) {
        ArrayDeque<Task> q = queues.get(b);
        while (!busy[b] && !down[b] && !q.isEmpty()) {
            Task t = q.pollFirst();
            if (cluster.missing(t.piece())) {
                start(b, t);
            } else {
                settled.accept(t.failure());
            }
        }
    }

    private void start(int b, Task t) {
        int group = cluster.groupOf(t.piece());
        SimMemserver target = cluster.chooseTarget(group);
        if (target == null) {
            queues.get(b).addLast(t);
            rest(b);
            return;
        }
        busy[b] = true;
        List<SimMemserver> sources = cluster.sources(group, scheme.repairSources());
        cluster.reserve(target);
        target.streams++;
        int most = target.streams;
        int[] sourceIncarnations = new int[sources.size()];
        for (int i = 0; i < sources.size(); i++) {
            SimMemserver s = sources.get(i);
            s.streams++;
            most = Math.max(most, s.streams);
            sourceIncarnations[i] = s.incarnation;
        }
        double slab = scenario.slabBytes();
        double seconds = Math.max(slab * Math.max(1, sources.size()) / scenario.streamBytesPerSecond(),
                slab * most / scenario.linkBytesPerSecond());
        int bridgeIncarnation = incarnation[b];
        int targetIncarnation = target.incarnation;
        events.after(seconds, () -> {
            busy[b] = false;
            if (target.incarnation == targetIncarnation) {
                target.streams--;
            }
            for (int i = 0; i < sources.size(); i++) {
                if (sources.get(i).incarnation == sourceIncarnations[i]) {
                    sources.get(i).streams--;
                }
            }
            finish(b, t, target, targetIncarnation, bridgeIncarnation);
        });
    }

    private void finish(int b, Task t, SimMemserver target, int targetIncarnation, int bridgeIncarnation) {
        if (incarnation[b] != bridgeIncarnation || target.incarnation != targetIncarnation) {
            cluster.release(target, targetIncarnation);
            queues.get(b).addLast(t);
            rest(b);
            return;
        }
        if (cluster.missing(t.piece())) {
            cluster.fill(t.piece(), target);
            copies++;
        } else {
            cluster.release(target, targetIncarnation); // its group was lost and re-created meanwhile
        }
        settled.accept(t.failure());
        next(b);
    }

    /** The bridge could not make progress: it rests, then goes on with its queue. */
    private void rest(int b) {
        busy[b] = true;
        events.after(BACKOFF_SECONDS, () -> {
            busy[b] = false;
            next(b);
        });
    }
}
