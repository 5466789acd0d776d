package dev.rbridge.bridge;

import dev.rbridge.bridge.volume.Volume;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

/** Bytes in and out of a volume from its first byte, for the bridge's in-JVM tests; each call waits up to 20 s. */
final class VolumeBytes {
    private VolumeBytes() {}

    /** 256 KiB of {@code c}. */
    static byte[] filled(char c) {
        byte[] b = new byte[256 << 10];
        Arrays.fill(b, (byte) c);
        return b;
    }

    static void write(Volume v, byte[] data) throws Exception {
        v.write(0, ByteBuffer.allocateDirect(data.length).put(data).flip(), false).get(20, TimeUnit.SECONDS);
    }

    static byte[] read(Volume v, int length) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(length);
        v.read(0, b).get(20, TimeUnit.SECONDS);
        byte[] out = new byte[length];
        b.get(out);
        return out;
    }
}
