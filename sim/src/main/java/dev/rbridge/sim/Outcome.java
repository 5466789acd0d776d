package dev.rbridge.sim;

/**
 * What one row's simulation saw over {@code years}: the failures, the time to restore redundancy after each failure
 * that left pieces to rebuild (from the failure until its last piece was held again, detection included), apart for
 * single memservers and for racks, and the data lost.
 *
 * @param lossEvents failures that lost the data of at least one group
 * @param groupsLost groups whose data was lost (a slab, or a stripe of K slabs)
 * @param bytesLost user data lost: groups lost times the slab-sized units each holds
 */
record Outcome(String scheme, String placing, double years, int groups, long serverFailures, long rackFailures,
        long bridgeFailures, long copies, Stats serverRestore, Stats rackRestore, long lossEvents, long groupsLost,
        long bytesLost, long events) {

    double lossEventsPerYear() {
        return lossEvents / years;
    }

    double bytesLostPerYear() {
        return bytesLost / years;
    }

    /** The 95 % interval of the loss events a year. */
    PoissonBounds lossEventsInterval() {
        PoissonBounds b = PoissonBounds.of(lossEvents);
        return new PoissonBounds(b.lower() / years, b.upper() / years);
    }
}
