package dev.rbridge.sim;

import dev.rbridge.bridge.placement.PlacementPolicy;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.random.RandomGenerator;

/**
 * The simulated cluster's data: memservers, and groups of {@link Scheme#holders} slab-sized pieces (a slab's replicas,
 * or a stripe's splits), each piece on a memserver of its own chosen by the bridge's {@link PlacementPolicy}. A piece
 * costs four bytes (which memserver holds it, or -1 while it is missing) plus one entry in its holder's list, so a
 * million pieces take a few MiB.
 */
final class Cluster {
    private final Scheme scheme;
    private final long slabBytes;
    private final int bridges;
    private final RandomGenerator random;
    private final List<SimMemserver> servers = new ArrayList<>();
    private final int groups;
    /** Piece {@code group * holders + i}: the index of the memserver holding it, or -1 while it is missing. */
    private final int[] holder;
    /** Pieces of each group that are held. */
    private final byte[] live;

    /** What a failure did: the pieces to rebuild, and the groups whose data it lost (re-created empty at once). */
    record Damage(IntList missing, int groupsLost) {
    }

    /** Builds the memservers and places every group's pieces, as new volumes are placed. */
    Cluster(Scenario s, Scheme scheme, Scenario.Placing placing, RandomGenerator random) {
        this.scheme = scheme;
        this.slabBytes = s.slabBytes();
        this.bridges = s.bridges();
        this.random = random;
        for (int i = 0; i < s.servers(); i++) {
            String rack = placing == Scenario.Placing.RACKS ? "rack-" + i / s.rackSize() : null;
            servers.add(new SimMemserver(i, s.capacityBytes(), rack));
        }
        long pieces = (long) (s.servers() * (double) s.capacityBytes() * s.fill() / slabBytes);
        long g = pieces / scheme.holders();
        if (g * scheme.holders() > Integer.MAX_VALUE - 1 || g < 1) {
            throw new IllegalArgumentException("the cluster holds " + pieces + " pieces: use a larger slab or fewer"
                    + " memservers (at least one group, at most 2^31)");
        }
        this.groups = (int) g;
        this.holder = new int[groups * scheme.holders()];
        this.live = new byte[groups];
        Arrays.fill(holder, -1);
        for (int group = 0; group < groups; group++) {
            for (int i = 0; i < scheme.holders(); i++) {
                SimMemserver t = chooseTarget(group);
                if (t == null) {
                    throw new IllegalArgumentException("no room to place group " + group + " of " + scheme.name()
                            + " (fill too high, or fewer racks than pieces)");
                }
                reserve(t);
                fill(group * scheme.holders() + i, t);
            }
        }
    }

    int groups() {
        return groups;
    }

    List<SimMemserver> servers() {
        return servers;
    }

    /** The bridge that serves the group (its volume's): groups are split evenly, in order. */
    int bridgeOf(int group) {
        return (int) ((long) group * bridges / groups);
    }

    int groupOf(int piece) {
        return piece / scheme.holders();
    }

    boolean missing(int piece) {
        return holder[piece] < 0;
    }

    /** The memservers holding the group's pieces now. */
    List<SimMemserver> holdersOf(int group) {
        List<SimMemserver> h = new ArrayList<>(scheme.holders());
        for (int i = 0; i < scheme.holders(); i++) {
            int x = holder[group * scheme.holders() + i];
            if (x >= 0) {
                h.add(servers.get(x));
            }
        }
        return h;
    }

    /** Where a new piece of the group goes: the bridge's own choice, never beside the group's other pieces. */
    SimMemserver chooseTarget(int group) {
        List<SimMemserver> holders = holdersOf(group);
        return PlacementPolicy.choose(servers, holders, holders, slabBytes, random);
    }

    /** Up to {@code n} holders of the group to read from, starting at a random one. */
    List<SimMemserver> sources(int group, int n) {
        List<SimMemserver> h = holdersOf(group);
        if (h.size() <= n) {
            return h;
        }
        int start = random.nextInt(h.size());
        List<SimMemserver> picked = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            picked.add(h.get((start + i) % h.size()));
        }
        return picked;
    }

    /** Takes a slab's room on {@code target} for a piece about to be written there (the bridge's reservation). */
    void reserve(SimMemserver target) {
        target.free -= slabBytes;
    }

    /** Gives back a reservation, unless the memserver failed since (its room came back with it). */
    void release(SimMemserver target, int incarnation) {
        if (target.incarnation == incarnation) {
            target.free += slabBytes;
        }
    }

    /** The piece, copied onto {@code target} (room reserved), is held again. */
    void fill(int piece, SimMemserver target) {
        holder[piece] = target.index;
        live[groupOf(piece)]++;
        target.pieces.add(piece);
    }

    /**
     * The memservers fail at once (all marked down before anything is re-placed): their pieces go missing; a group
     * left with fewer than {@link Scheme#needed} pieces has lost its data, is counted and is re-created at once on
     * other memservers (as if restored from elsewhere), so the population stays the same.
     */
    Damage fail(List<SimMemserver> failing) {
        IntList missing = new IntList();
        IntList lost = new IntList();
        for (SimMemserver s : failing) {
            IntList pieces = s.pieces;
            for (int i = 0; i < pieces.size(); i++) {
                int piece = pieces.get(i);
                int group = groupOf(piece);
                holder[piece] = -1;
                live[group]--;
                missing.add(piece);
                if (live[group] == scheme.needed() - 1) {
                    lost.add(group);
                }
            }
        }
        failing.forEach(SimMemserver::fail);
        for (int i = 0; i < lost.size(); i++) {
            recreate(lost.get(i));
        }
        return new Damage(missing, lost.size());
    }

    /** Places every missing piece of a lost group anew (left missing, for the rebuild, where none has room). */
    private void recreate(int group) {
        for (int i = 0; i < scheme.holders(); i++) {
            int piece = group * scheme.holders() + i;
            if (holder[piece] < 0) {
                SimMemserver t = chooseTarget(group);
                if (t != null) {
                    reserve(t);
                    fill(piece, t);
                }
            }
        }
    }
}
