package dev.rbridge.rdma;

/**
 * A region as listed by the memserver: its descriptor (key withheld as 0: opening the region gives the key, subject to
 * the volume's lease) and the name of the client that allocated it.
 */
public record RegionInfo(RegionDescriptor descriptor, String owner) {
}
