package dev.rbridge.memserver;

import dev.rbridge.rdma.ConnectionStats;

/** A connected client as an operator sees it ({@link Memserver#clients}). */
public record ClientView(long id, String name, String address, String state, int regions, long bytes,
        ConnectionStats.Snapshot stats) {
}
