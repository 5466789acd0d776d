package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.rdma.RemoteConnection;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Which of a volume's replicas are where, as the bridge sees memservers come and go: the regions found at start-up
 * taken back (reattach), a region found on a memserver that came back judged against what the volume serves, what a
 * memserver holds (before it may be let go or while it drains), the replicas of a memserver that went down failed,
 * and the slabs a resync can help.
 */
public final class ReplicaRoster {
    private final Volume volume;

    ReplicaRoster(Volume volume) {
        this.volume = volume;
    }

    /**
     * Reattach at start: {@code found} holds, per slab index, every region of this volume on the reachable
     * memservers (with its key). Returns the regions to release (stale generations, half-built copies).
     */
    public List<Replica> reattach(Map<Integer, List<Replica>> found) {
        Slab[] slabs = volume.slabs();
        List<Replica> release = new ArrayList<>();
        for (var e : found.entrySet()) {
            int index = e.getKey();
            if (index < 0 || index >= slabs.length) {
                release.addAll(e.getValue()); // a slab beyond the configured size: the volume shrank
                continue;
            }
            for (Replica r : e.getValue()) {
                if (r.region().length() != slabs[index].length) {
                    throw new IllegalStateException("volume '" + volume.name() + "': memserver " + r.link().label()
                            + " holds slab " + index + " as " + r.region().length() + " bytes, but the configured size "
                            + volume.spec().size() + " and slab size " + volume.spec().slabSize() + " make it "
                            + slabs[index].length
                            + " bytes; start with the size and slab size the volume was created with");
                }
            }
            release.addAll(slabs[index].reattach(e.getValue()));
        }
        for (Slab s : slabs) {
            if (s.set == null && volume.manifest().allocated(s.index)) {
                s.lostEverything();
            }
        }
        return release;
    }

    /** How many lost slabs count a region on {@code link} among the copies that may still hold all their data. */
    public long lostCopiesOn(MemserverLink link) {
        Slab[] slabs = volume.slabs();
        long n = 0;
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set != null && set.lost() && set.lostAtThisGeneration.stream().anyMatch(r -> r.link() == link)) {
                n++;
            }
        }
        return n;
    }

    /** The slabs with a replica (live or being built) on {@code connection}. */
    public List<Slab> slabsOn(RemoteConnection connection) {
        Slab[] slabs = volume.slabs();
        List<Slab> out = new ArrayList<>();
        for (Slab s : slabs) {
            if (s.replicaOn(connection) != null) {
                out.add(s);
            }
        }
        return out;
    }

    /** How many slabs have a replica on {@code connection} (live replicas a memserver holds for this volume). */
    public long replicasOn(RemoteConnection connection) {
        Slab[] slabs = volume.slabs();
        long n = 0;
        for (Slab s : slabs) {
            if (s.replicaOn(connection) != null) {
                n++;
            }
        }
        return n;
    }

    /** A memserver's connection died: every replica on it fails. */
    public void connectionLost(RemoteConnection connection, String reason) {
        Slab[] slabs = volume.slabs();
        for (Slab s : slabs) {
            Replica r = s.replicaOn(connection);
            if (r != null) {
                s.fail(r, reason);
            }
        }
    }

    /**
     * A memserver came back holding {@code candidate}: true if a slab that lost its last replica takes it back (same
     * memserver instance, region and generation), false if it is stale and should be released.
     */
    public boolean adoptLost(Replica candidate) {
        Slab[] slabs = volume.slabs();
        long slab = candidate.region().tag().slab();
        return slab >= 0 && slab < slabs.length && slabs[(int) slab].adoptLost(candidate,
                candidate.region().tag().generation());
    }

    /** The generation a slab is served at (0 if it was never written or the index is out of range). */
    public long currentGeneration(long slab) {
        Slab[] slabs = volume.slabs();
        if (slab < 0 || slab >= slabs.length) {
            return 0;
        }
        ReplicaSet set = slabs[(int) slab].set;
        return set == null ? 0 : set.generation;
    }

    /** True if the region is one of the volume's current replicas (live or building). */
    public boolean holds(String serverId, long regionId) {
        Slab[] slabs = volume.slabs();
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set == null) {
                continue;
            }
            for (Replica r : set.live) {
                if (r.serverId().equals(serverId) && r.region().id() == regionId) {
                    return true;
                }
            }
            if (set.building != null && set.building.serverId().equals(serverId)
                    && set.building.region().id() == regionId) {
                return true;
            }
        }
        return false;
    }

    /** Fails every replica whose connection has closed (health duty). */
    public void failClosedReplicas() {
        Slab[] slabs = volume.slabs();
        for (Slab s : slabs) {
            s.failClosed();
        }
    }

    /** Slabs with more than one live replica (candidates for a resync). */
    public List<Slab> replicated() {
        Slab[] slabs = volume.slabs();
        List<Slab> out = new ArrayList<>();
        for (Slab s : slabs) {
            ReplicaSet set = s.set;
            if (set != null && set.live.size() > 1) {
                out.add(s);
            }
        }
        return out;
    }
}
