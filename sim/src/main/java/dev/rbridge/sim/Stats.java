package dev.rbridge.sim;

import java.util.Arrays;

/** Minimum, median and maximum of some durations (seconds), and how many there were. */
record Stats(int count, double min, double median, double max) {
    static final Stats NONE = new Stats(0, Double.NaN, Double.NaN, Double.NaN);

    static Stats of(double[] values) {
        if (values.length == 0) {
            return NONE;
        }
        double[] v = values.clone();
        Arrays.sort(v);
        int n = v.length;
        double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
        return new Stats(n, v[0], median, v[n - 1]);
    }
}
