package dev.rbridge.rdma.ucx;

import org.junit.jupiter.api.Assumptions;

import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;

/**
 * The untagged ucx tests run UCX itself (over its tcp transport on loopback), which needs Debian's libucx0: where it
 * is not installed (a fresh machine running {@code ./test --fast}, which installs nothing) they are skipped, saying
 * why, rather than failing. The full {@code ./test} installs it (dev/test-packages.txt), so there they always run.
 */
final class UcxPresent {
    private static final boolean PRESENT = present();

    private UcxPresent() {}

    /** Whether libucp opens (the first call opens it, keeping UCX off the JVM's signals first). */
    static boolean present() {
        try {
            Ucx.keepOffJvmSignals(); // opening libucp loads libucs, which would install UCX's signal handlers
            SymbolLookup.libraryLookup("libucp.so.0", Arena.global());
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    /** Skips the calling test when libucx0 is not installed. */
    static void assume() {
        Assumptions.assumeTrue(PRESENT, "libucx0 is not installed (apt-get install libucx0): this test runs UCX");
    }
}
