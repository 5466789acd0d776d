package dev.rbridge.sim;

import java.util.Arrays;

/** A growable list of ints: four bytes an entry, for the million slab pieces a large cluster holds. */
final class IntList {
    private int[] values = new int[16];
    private int size;

    void add(int v) {
        if (size == values.length) {
            values = Arrays.copyOf(values, size * 2);
        }
        values[size++] = v;
    }

    int get(int i) {
        if (i >= size) {
            throw new IndexOutOfBoundsException(i + " of " + size);
        }
        return values[i];
    }

    int size() {
        return size;
    }

    void clear() {
        size = 0;
    }
}
