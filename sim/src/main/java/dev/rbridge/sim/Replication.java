package dev.rbridge.sim;

/** R copies of each slab, as the bridge keeps volumes today: any one copy serves and rebuilds the others. */
record Replication(int copies) implements Scheme {
    Replication {
        if (copies < 1 || copies > 8) {
            throw new IllegalArgumentException("replicas must be 1 to 8: " + copies);
        }
    }

    @Override
    public String name() {
        return "R=" + copies;
    }

    @Override
    public int holders() {
        return copies;
    }

    @Override
    public int tolerated() {
        return copies - 1;
    }

    @Override
    public int dataUnits() {
        return 1;
    }

    @Override
    public int repairSources() {
        return 1;
    }
}
