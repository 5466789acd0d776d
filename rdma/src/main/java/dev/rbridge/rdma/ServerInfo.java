package dev.rbridge.rdma;

/** What a memserver says about itself when a client connects. */
public record ServerInfo(String serverId, int protocolVersion, long capacityBytes, long freeBytes) {
}
