package dev.rbridge.bridge.placement;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.random.RandomGenerator;

/**
 * Which memserver takes the next replica of a slab: among those that are up, not excluded, not draining and have
 * room, the power of two choices on free bytes (two drawn at random, the one with more room wins). When failure
 * domains are known ({@link PlacementCandidate#failureDomain}), candidates in a domain that holds none of the slab's
 * replicas yet come first; only when there is none does a domain take a second replica. Without labels (every real
 * memserver today) that rule is a no-op and the choice is as it always was. Pure: no I/O, the randomness handed in,
 * so the simulator runs the very decision the bridge makes.
 *
 * <p>The two are first drawn from all candidates, a few times, until both qualify: a pair accepted so is as likely as
 * any other pair of qualifying candidates, so the choice is the same as drawing from the list of those that qualify,
 * which is built only when the draws miss (few qualify). A cluster of a thousand memservers pays a few checks a
 * choice instead of a thousand.
 */
public final class PlacementPolicy {
    /** Pairs drawn from all candidates before the ones that qualify are listed. */
    private static final int DRAWS = 4;

    private PlacementPolicy() {}

    /**
     * The candidate for a new region of {@code length} bytes, or null when none qualifies.
     *
     * @param candidates every memserver, in a stable order, indexed in constant time
     * @param exclude never chosen (the slab's holders, and memservers that refused it just now)
     * @param holders memservers that hold a replica of the slab: their failure domains are avoided when known
     */
    public static <C extends PlacementCandidate> C choose(List<C> candidates, Collection<? extends C> exclude,
            Collection<? extends C> holders, long length, RandomGenerator random) {
        int n = candidates.size();
        for (int i = 0; n >= 2 && i < DRAWS; i++) {
            int a = random.nextInt(n);
            C x = candidates.get(a);
            C y = candidates.get(other(a, n, random));
            if (fits(x, exclude, length) && fits(y, exclude, length) && inFreshDomain(x, holders)
                    && inFreshDomain(y, holders)) {
                return moreRoom(x, y);
            }
        }
        List<C> fit = new ArrayList<>();
        List<C> spread = new ArrayList<>();
        for (C c : candidates) {
            if (fits(c, exclude, length)) {
                fit.add(c);
                if (inFreshDomain(c, holders)) {
                    spread.add(c);
                }
            }
        }
        return twoChoices(spread.isEmpty() ? fit : spread, random);
    }

    /** Up, not excluded, not draining, with room for {@code length} bytes. */
    private static boolean fits(PlacementCandidate c, Collection<? extends PlacementCandidate> exclude, long length) {
        return !exclude.contains(c) && !c.draining() && c.up() && c.freeBytes() >= length;
    }

    /** Whether {@code c}'s domain is unknown, or known and held by none of {@code holders}. */
    private static boolean inFreshDomain(PlacementCandidate c, Collection<? extends PlacementCandidate> holders) {
        String domain = c.failureDomain();
        if (domain == null) {
            return true;
        }
        for (PlacementCandidate h : holders) {
            if (domain.equals(h.failureDomain())) {
                return false;
            }
        }
        return true;
    }

    /** Two distinct candidates drawn at random, the one with more free bytes (the first drawn on a tie). */
    private static <C extends PlacementCandidate> C twoChoices(List<C> from, RandomGenerator random) {
        if (from.isEmpty()) {
            return null;
        }
        if (from.size() == 1) {
            return from.getFirst();
        }
        int a = random.nextInt(from.size());
        return moreRoom(from.get(a), from.get(other(a, from.size(), random)));
    }

    /** An index below {@code n} other than {@code a}, each as likely. */
    private static int other(int a, int n, RandomGenerator random) {
        int b = random.nextInt(n - 1);
        return b >= a ? b + 1 : b;
    }

    /** The one with more free bytes; {@code x} on a tie. */
    private static <C extends PlacementCandidate> C moreRoom(C x, C y) {
        return x.freeBytes() >= y.freeBytes() ? x : y;
    }
}
