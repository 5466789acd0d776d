package dev.rbridge.rdma;

/**
 * A granted region as its client sees it: an id, a length, and the access key every data operation must present (the
 * counterpart of an RDMA rkey).
 */
public record RegionDescriptor(long id, long length, long key, RegionTag tag) {
    @Override
    public String toString() {
        return "region " + id + " (" + length + " bytes, " + tag + ")";
    }
}
