package dev.rbridge.bridge.volume;

import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RemoteConnection;

/**
 * One copy of a slab: a region on one memserver, reached over the connection it was granted or opened on. When that
 * connection dies the replica is dead for good; a new connection means a new replica (after a rebuild or, for a
 * slab that lost every replica, after checking the memserver instance, region and generation).
 *
 * @param serverId the memserver instance (a restarted memserver has a new one and none of the old regions)
 */
public record Replica(MemserverLink link, RemoteConnection connection, String serverId, RegionDescriptor region) {
    public String describe() {
        return link.label() + "#" + region.id();
    }

    boolean sameRegionAs(Replica other) {
        return serverId.equals(other.serverId) && region.id() == other.region.id();
    }
}
