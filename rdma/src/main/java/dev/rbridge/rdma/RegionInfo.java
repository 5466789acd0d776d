package dev.rbridge.rdma;

/** A region as listed by the memserver: its descriptor (key withheld as 0 unless the lister may use it) and owner. */
public record RegionInfo(RegionDescriptor descriptor, String owner) {
}
