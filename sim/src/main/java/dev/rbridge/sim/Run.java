package dev.rbridge.sim;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * One row of the table: one scheme and placement over the scenario's years. Failures arrive as Poisson processes
 * (exponential gaps): single memservers, whole racks and bridges, each at its rate; a memserver that fails is down
 * and empty until replaced; the pieces it held are offered to their bridges' rebuilds after the detection time.
 */
final class Run {
    private final Scenario scenario;
    private final Scheme scheme;
    private final Scenario.Placing placing;
    /** When and where failures strike: its own stream, so every row of a table sees the same failures. */
    private final Random random;
    private final EventQueue events = new EventQueue();
    private final Cluster cluster;
    private final BridgeRebuilds rebuilds;
    /** Every failure of memservers so far, by id. */
    private final List<Failure> failures = new ArrayList<>();
    private final List<Double> serverRestores = new ArrayList<>();
    private final List<Double> rackRestores = new ArrayList<>();
    private long serverFailures;
    private long rackFailures;
    private long bridgeFailures;
    private long lossEvents;
    private long groupsLost;

    /** One failure of memservers: when, whether a whole rack, and its pieces not yet held again. */
    private static final class Failure {
        final double time;
        final boolean rack;
        int outstanding;

        Failure(double time, boolean rack, int outstanding) {
            this.time = time;
            this.rack = rack;
            this.outstanding = outstanding;
        }
    }

    private Run(Scenario scenario, Scheme scheme, Scenario.Placing placing) {
        this.scenario = scenario;
        this.scheme = scheme;
        this.placing = placing;
        this.random = new Random(scenario.seed());
        this.cluster = new Cluster(scenario, scheme, placing, new Random(new Random(scenario.seed()).nextLong()));
        this.rebuilds = new BridgeRebuilds(events, cluster, scenario, scheme, this::settled);
    }

    /** Simulates {@code scheme} placed as {@code placing} over the scenario; the same inputs give the same outcome. */
    static Outcome simulate(Scenario scenario, Scheme scheme, Scenario.Placing placing) {
        return new Run(scenario, scheme, placing).run();
    }

    private Outcome run() {
        double perYear = Scenario.SECONDS_PER_YEAR;
        arrivals(scenario.servers() * scenario.serverFailuresPerYear() / perYear, this::serverFails);
        arrivals(scenario.racks() * scenario.rackFailuresPerYear() / perYear, this::rackFails);
        arrivals(scenario.bridges() * scenario.bridgeFailuresPerYear() / perYear, this::bridgeFails);
        long ran = events.runUntil(scenario.years() * perYear);
        long bytesLost = groupsLost * scheme.dataUnits() * scenario.slabBytes();
        return new Outcome(scheme.name(), placing.label(), scenario.years(), cluster.groups(), serverFailures,
                rackFailures, bridgeFailures, rebuilds.copies(), stats(serverRestores), stats(rackRestores),
                lossEvents, groupsLost, bytesLost, ran);
    }

    /** Runs {@code what} at exponential gaps of mean 1 / {@code ratePerSecond}, unless the rate is 0. */
    private void arrivals(double ratePerSecond, Runnable what) {
        if (ratePerSecond <= 0) {
            return;
        }
        double gap = -Math.log(1 - random.nextDouble()) / ratePerSecond;
        events.after(gap, () -> {
            what.run();
            arrivals(ratePerSecond, what);
        });
    }

    private void serverFails() {
        SimMemserver s = cluster.servers().get(random.nextInt(scenario.servers()));
        if (s.up) {
            serverFailures++;
            fail(List.of(s), false);
        }
    }

    private void rackFails() {
        int rack = random.nextInt(scenario.racks());
        List<SimMemserver> failing = new ArrayList<>();
        for (SimMemserver s : cluster.servers()) {
            if (s.index / scenario.rackSize() == rack && s.up) {
                failing.add(s);
            }
        }
        if (!failing.isEmpty()) {
            rackFailures++;
            fail(failing, true);
        }
    }

    private void bridgeFails() {
        int b = random.nextInt(scenario.bridges());
        if (rebuilds.bridgeUp(b)) {
            bridgeFailures++;
            rebuilds.bridgeFails(b);
        }
    }

    private void fail(List<SimMemserver> failing, boolean rack) {
        Cluster.Damage d = cluster.fail(failing);
        if (d.groupsLost() > 0) {
            lossEvents++;
            groupsLost += d.groupsLost();
        }
        int id = failures.size();
        failures.add(new Failure(events.now(), rack, d.missing().size()));
        IntList missing = d.missing();
        if (missing.size() > 0) {
            events.after(scenario.detectSeconds(), () -> {
                for (int i = 0; i < missing.size(); i++) {
                    rebuilds.offer(missing.get(i), id);
                }
            });
        }
        events.after(scenario.replaceSeconds(), () -> failing.forEach(s -> s.up = true));
    }

    /** A piece missing since failure {@code id} is held again: the failure's redundancy is back with its last. */
    private void settled(int id) {
        Failure f = failures.get(id);
        if (--f.outstanding == 0) {
            (f.rack ? rackRestores : serverRestores).add(events.now() - f.time);
        }
    }

    private static Stats stats(List<Double> seconds) {
        return Stats.of(seconds.stream().mapToDouble(Double::doubleValue).toArray());
    }
}
