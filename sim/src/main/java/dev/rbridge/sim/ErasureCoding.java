package dev.rbridge.sim;

/**
 * K data and M parity splits of a stripe, each a slab on a memserver of its own (not in the product yet): the
 * stripe survives while at most M splits are missing, and re-creating one reads K others.
 */
record ErasureCoding(int data, int parity) implements Scheme {
    ErasureCoding {
        if (data < 1 || parity < 1 || data + parity > 32) {
            throw new IllegalArgumentException("EC needs K >= 1, M >= 1, K + M <= 32: " + data + "+" + parity);
        }
    }

    @Override
    public String name() {
        return "EC " + data + "+" + parity;
    }

    @Override
    public int holders() {
        return data + parity;
    }

    @Override
    public int tolerated() {
        return parity;
    }

    @Override
    public int dataUnits() {
        return data;
    }

    @Override
    public int repairSources() {
        return data;
    }
}
