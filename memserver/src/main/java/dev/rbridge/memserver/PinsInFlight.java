package dev.rbridge.memserver;

import java.util.List;

/**
 * One client's operations in flight: its pins not yet closed nor handed to a device, which a grant in a new epoch of
 * their volume waits for ({@link TakeoverDrain}). Every data operation joins and leaves it, so it allocates nothing:
 * the pins are linked through their own fields, under this object's lock (taken by the client's operations, never
 * contended but by a takeover looking on).
 *
 * <p>The lock also orders a pin against a takeover: a pin joins before its region's key is checked a second time, and a
 * grant rotates the key before it {@linkplain #addOn looks} here, so either the grant's look comes first and the check
 * after it sees the new key, or the look sees the pin.
 */
final class PinsInFlight {
    /** The most recently joined pin; each links to the one before it. Guarded by this. */
    private RegionPin newest;

    /** {@code p} is in flight from now on. */
    synchronized void add(RegionPin p) {
        p.olderInFlight = newest;
        p.newerInFlight = null;
        if (newest != null) {
            newest.newerInFlight = p;
        }
        newest = p;
        p.inFlight = true;
    }

    /** {@code p} is no longer in flight; nothing when it was not (closed, or handed to a device, before). */
    synchronized void remove(RegionPin p) {
        if (!p.inFlight) {
            return;
        }
        p.inFlight = false;
        RegionPin older = p.olderInFlight;
        RegionPin newer = p.newerInFlight;
        if (older != null) {
            older.newerInFlight = newer;
        }
        if (newer != null) {
            newer.olderInFlight = older;
        } else {
            newest = older;
        }
        p.olderInFlight = null;
        p.newerInFlight = null;
    }

    /** Adds to {@code out} the pins in flight on {@code volume}'s regions. */
    synchronized void addOn(String volume, List<RegionPin> out) {
        for (RegionPin p = newest; p != null; p = p.olderInFlight) {
            if (p.region.descriptor.tag().volume().equals(volume)) {
                out.add(p);
            }
        }
    }
}
