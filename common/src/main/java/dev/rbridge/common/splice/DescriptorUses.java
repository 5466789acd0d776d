package dev.rbridge.common.splice;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * The uses under way of descriptors that another thread may close meanwhile: a close marks them closed at once, and
 * they are released (their numbers closed) only once the last use has returned, so that a number the process may
 * reuse at once is never written to. {@link Pipe} and {@link SocketDescriptor} keep one each.
 */
final class DescriptorUses {
    /** Whether a {@link #close} must release the descriptors itself. */
    enum Closing {
        ALREADY_CLOSED, RELEASE_NOW, RELEASE_AFTER_LAST_USE
    }

    /** Uses under way times two, plus one once closed. */
    private final AtomicInteger state = new AtomicInteger();

    /** Starts a use: false when closed (then do not use the descriptors), else call {@link #exit} after. */
    boolean enter() {
        while (true) {
            int s = state.get();
            if ((s & 1) != 0) {
                return false;
            }
            if (state.compareAndSet(s, s + 2)) {
                return true;
            }
        }
    }

    /** Ends a use begun by {@link #enter}: true when it was the last of closed descriptors, to be released now. */
    boolean exit() {
        return state.addAndGet(-2) == 1;
    }

    /** Marks the descriptors closed; says whether the caller releases them now or the last use will. */
    Closing close() {
        while (true) {
            int s = state.get();
            if ((s & 1) != 0) {
                return Closing.ALREADY_CLOSED;
            }
            if (state.compareAndSet(s, s | 1)) {
                return s == 0 ? Closing.RELEASE_NOW : Closing.RELEASE_AFTER_LAST_USE;
            }
        }
    }

    /** Closed, and no use under way: the descriptors are released. */
    boolean released() {
        return state.get() == 1;
    }
}
