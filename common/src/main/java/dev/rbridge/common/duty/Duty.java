package dev.rbridge.common.duty;

/**
 * One role's periodic work (renewing leases, hedging reads, checking memservers' health, housekeeping), done in cycles
 * by a {@link DutyCycle} on a thread of its own, in the manner of Aeron's {@code Agent}. Every loop is timed, none
 * spins, so a cycle answers when it is next due rather than how much work it did.
 */
public interface Duty {
    /** What {@link #doWork} answers when nothing is due until {@link DutyCycle#wake} is called. */
    long UNTIL_WOKEN = -1;

    /** The role, for its thread's name and the log lines about it: {@code bridge-lease}, {@code read-hedger}. */
    String role();

    /**
     * Does what is due now; answers how many nanoseconds the thread rests before the next cycle (0: none), or
     * {@link #UNTIL_WOKEN} (any negative number). An exception ends this cycle only: {@link DutyCycle} logs it and rests its back-off.
     */
    long doWork() throws Exception;

    /**
     * Called on the role's thread when an {@link Error} ended it (never on {@link DutyCycle#close}): where the role's
     * absence must be reported (a server's readiness), this is the place. Does nothing by default.
     */
    default void onStopped(Error error) {}
}
