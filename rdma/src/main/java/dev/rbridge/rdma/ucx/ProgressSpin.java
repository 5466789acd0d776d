package dev.rbridge.rdma.ucx;

import java.util.Map;

/**
 * Whether a client's progress thread polls the worker once more or goes to sleep in {@code waitForEvents}. Sleeping
 * costs a wake-up per completion (the NIC's event, an epoll return, a context switch) where an RDMA round trip takes
 * a few microseconds, so while operations are outstanding the thread polls for up to a budget first. It never polls
 * while nothing is outstanding (an idle bridge and every memserver sleep at once), and a budget that ran out empty
 * makes the following idle spells sleep at once, twice as many each time (up to {@link #MAX_SKIP}), so a peer that
 * answers slowly is not polled for; a spell that finds work resets that. Used by its loop's thread only; the clock is
 * the caller's.
 *
 * <p>It polls by default only where data goes through an RDMA NIC: there a poll reads the completion queue in user
 * space. Where UCX emulates RMA over TCP or shared memory each poll is a system call on a socket, and an emulated
 * round trip takes longer than the budget anyway (bench/README.md, "rdma-costs.sh").
 */
final class ProgressSpin {
    /** The default budget: several RDMA round trips, and short enough not to matter when it runs out. */
    static final long DEFAULT_BUDGET_NANOS = 20_000;
    /** The largest budget the environment may ask for. */
    static final long MAX_BUDGET_NANOS = 1_000_000;
    /** Most idle spells that sleep at once after a run of empty budgets. */
    static final int MAX_SKIP = 1024;
    /** The environment variable that sets the budget in microseconds; 0 turns polling off. */
    static final String BUDGET_VARIABLE = "RBRIDGE_UCX_SPIN_US";

    private final long budgetNanos;
    private boolean spinning;
    private long spinStart;
    private int skip;
    private int backoff;
    private long spells;
    private long emptySpells;

    ProgressSpin(long budgetNanos) {
        if (budgetNanos < 0 || budgetNanos > MAX_BUDGET_NANOS) {
            throw new IllegalArgumentException("the progress spin budget must be 0 to " + MAX_BUDGET_NANOS
                    + " ns, not " + budgetNanos);
        }
        this.budgetNanos = budgetNanos;
    }

    /**
     * The budget {@code env} asks for ({@value #BUDGET_VARIABLE}, microseconds), else the default where {@code rdma}
     * (data goes through an RDMA NIC), else none.
     */
    static ProgressSpin fromEnvironment(Map<String, String> env, boolean rdma) {
        String value = env.get(BUDGET_VARIABLE);
        if (value == null || value.isBlank()) {
            return new ProgressSpin(rdma ? DEFAULT_BUDGET_NANOS : 0);
        }
        long micros;
        try {
            micros = Long.parseLong(value.strip());
        } catch (NumberFormatException e) {
            micros = -1;
        }
        if (micros < 0 || micros > MAX_BUDGET_NANOS / 1000) {
            throw new IllegalArgumentException(BUDGET_VARIABLE + " must be a whole number of microseconds from 0 (no "
                    + "polling) to " + MAX_BUDGET_NANOS / 1000 + ", not '" + value + "'");
        }
        return new ProgressSpin(micros * 1000);
    }

    long budgetNanos() {
        return budgetNanos;
    }

    /** Whether it ever polls. */
    boolean enabled() {
        return budgetNanos > 0;
    }

    /** The loop found work (completions or tasks): a spell in progress ends well. */
    void worked() {
        if (spinning) {
            spinning = false;
            backoff = 0;
        }
    }

    /**
     * The loop found nothing at {@code now} with {@code outstanding} operations posted: true to poll again, false
     * to sleep.
     */
    boolean pollAgain(int outstanding, long now) {
        if (budgetNanos == 0 || outstanding <= 0) {
            spinning = false;
            return false;
        }
        if (!spinning) {
            if (skip > 0) {
                skip--;
                return false;
            }
            spinning = true;
            spinStart = now;
            spells++;
            return true;
        }
        if (now - spinStart < budgetNanos) {
            return true;
        }
        spinning = false;
        emptySpells++;
        backoff = Math.min(MAX_SKIP, Math.max(1, backoff * 2));
        skip = backoff;
        return false;
    }

    /** Spells begun so far. */
    long spells() {
        return spells;
    }

    /** Spells whose budget ran out with nothing found. */
    long emptySpells() {
        return emptySpells;
    }
}
