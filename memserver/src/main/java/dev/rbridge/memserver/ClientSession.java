package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectionStats;
import dev.rbridge.rdma.Lease;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionInfo;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException;
import dev.rbridge.rdma.ServerInfo;
import dev.rbridge.rdma.ServerState;

import java.util.List;

/** A connected client. Its regions outlive it: a restarted bridge reattaches to them. */
final class ClientSession implements RegionService.Session, Leases.Holder {
    private final Memserver server;
    final long id;
    final String name;
    final String peer;
    volatile ConnectionStats stats;
    volatile Runnable disconnect;
    /** Its connection ended: its leases bind nobody. */
    volatile boolean ended;
    /** Its operations in flight: what a grant in a new epoch of their volume waits for. */
    final PinsInFlight pins = new PinsInFlight();

    ClientSession(Memserver server, long id, String name, String peer) {
        this.server = server;
        this.id = id;
        this.name = name;
        this.peer = peer;
    }

    public long id() {
        return id;
    }

    public String name() {
        return name;
    }

    public String peer() {
        return peer;
    }

    public boolean ended() {
        return ended;
    }

    public ServerInfo serverInfo() {
        return server.info();
    }

    @Override
    public dev.rbridge.rdma.ServerState state() {
        return new ServerState(server.draining());
    }

    public RegionDescriptor allocate(RegionTag tag, long length) throws RemoteMemoryException {
        return server.allocate(this, tag, length);
    }

    public RegionDescriptor open(long regionId) throws RemoteMemoryException {
        return server.openRegion(this, regionId);
    }

    public List<RegionInfo> list() {
        return server.list();
    }

    public RegionService.Listing listing() throws RemoteMemoryException {
        return server.listing();
    }

    public void release(long regionId, long key) throws RemoteMemoryException {
        server.release(this, regionId, key);
    }

    public RegionDescriptor retag(long regionId, long key, RegionTag tag) throws RemoteMemoryException {
        return server.retag(this, regionId, key, tag);
    }

    public Lease lease(String volume, String owner, long ttlMillis) throws RemoteMemoryException {
        return server.lease(this, volume, owner, ttlMillis, Lease.NO_ID);
    }

    @Override
    public Lease lease(String volume, String owner, long ttlMillis, long leaseId) throws RemoteMemoryException {
        return server.lease(this, volume, owner, ttlMillis, leaseId);
    }

    public void unlease(String volume, String owner) {
        server.unlease(this, volume, owner, Lease.NO_ID);
    }

    @Override
    public void unlease(String volume, String owner, long leaseId) {
        server.unlease(this, volume, owner, leaseId);
    }

    public RegionService.Pin pin(long regionId, long key, long offset, long length) throws RemoteMemoryException {
        return server.pin(this, regionId, key, offset, length);
    }

    public void zero(long regionId, long key, long offset, long length) throws RemoteMemoryException {
        server.zero(this, regionId, key, offset, length);
    }

    public void attach(ConnectionStats stats, Runnable disconnect) {
        this.stats = stats;
        this.disconnect = disconnect;
    }

    public void closed() {
        ended = true;
        server.ended(this);
    }
}
