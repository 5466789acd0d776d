package dev.rbridge.sim;

/**
 * The 95 % confidence interval of a Poisson rate seen as {@code k} events: the Wilson-Hilferty approximation of the
 * exact (Garwood) bounds, within a few per cent of them from k = 0 on (k = 0 gives 0 to 3.7).
 */
record PoissonBounds(double lower, double upper) {
    private static final double Z = 1.959964;

    static PoissonBounds of(long k) {
        double lower = k == 0 ? 0 : k * Math.pow(1 - 1.0 / (9 * k) - Z / (3 * Math.sqrt(k)), 3);
        double n = k + 1;
        double upper = n * Math.pow(1 - 1 / (9 * n) + Z / (3 * Math.sqrt(n)), 3);
        return new PoissonBounds(lower, upper);
    }
}
