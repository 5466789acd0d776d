package dev.rbridge.cli.partition;

import dev.rbridge.cli.history.BlockVersion;
import dev.rbridge.cli.history.History;
import dev.rbridge.cli.history.History.Operation;
import dev.rbridge.cli.history.History.Outcome;
import dev.rbridge.cli.history.RegisterChecker;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * One history of a takeover for {@link RegisterChecker}: what the clients of the new owner (bridge B) did, as they saw
 * it, and the writes the clients of the old owner (bridge A) sent, each allowed to take effect only where fencing
 * allows: between its invocation and B's grant, or never. So a version of A that B reads after B's own write to that
 * block replaced it (or after B had read something newer) is a stale read or a resurrection to the checker, and a
 * version of A whose write A's client sent only after the grant must never be read at all.
 *
 * <p>How A's writes enter: one A acknowledged by the grant keeps its interval; one acknowledged later, or failed, or
 * never answered ends at the grant instead (it may have reached the memservers before it, never after); one that
 * failed or was never answered and that no read returned is left out, which is the checker's own "never took effect"
 * for it. The two histories must come from writers with distinct ids ({@code WriteLoad}'s first writer).
 */
final class TakeoverHistory {
    private final History old;
    private final List<Operation> operations = new ArrayList<>();
    private final List<String> fencingViolations = new ArrayList<>();

    /**
     * @param old       A's clients' history (its times describe the merged one too, as it began first)
     * @param taken     B's clients' history
     * @param grantedBy a time ({@link System#nanoTime}) at or after B's grant: B's start had returned
     */
    TakeoverHistory(History old, History taken, long grantedBy) {
        this.old = old;
        Set<BlockVersion> read = new HashSet<>();
        for (History h : List.of(old, taken)) {
            for (Operation o : h.operations()) {
                if (!o.isWrite() && o.outcome() == Outcome.OK
                        && o.observed() instanceof BlockVersion.Content.Written w) {
                    read.add(w.version());
                }
            }
        }
        for (Operation o : old.operations()) {
            if (!o.isWrite()) {
                add(o, o.completed(), o.outcome(), o.note());
            } else if (o.outcome() == Outcome.OK && o.completed() <= grantedBy) {
                add(o, o.completed(), Outcome.OK, o.note());
            } else if (o.outcome() != Outcome.OK && !read.contains(o.written())) {
                continue; // never took effect, as far as anyone saw
            } else if (o.invoked() <= grantedBy) {
                add(o, grantedBy, Outcome.OK, "fenced at B's grant; " + o.outcome().name().toLowerCase()
                        + (o.note() == null ? "" : ": " + o.note()));
            } else {
                fencingViolations.add(old.describe(o) + (o.outcome() == Outcome.OK ? " was acknowledged by A"
                        : " was read") + ", though A's client sent it after B's grant");
            }
        }
        for (Operation o : taken.operations()) {
            add(o, o.completed(), o.outcome(), o.note());
        }
    }

    private void add(Operation o, long completed, Outcome outcome, String note) {
        operations.add(new Operation(operations.size(), o.kind(), o.block(), o.written(), o.observed(), o.invoked(),
                completed, outcome, note));
    }

    /** A's writes that took effect (or were acknowledged) though sent after the grant: each proves a fencing hole. */
    List<String> fencingViolations() {
        return fencingViolations;
    }

    /** The merged history's operations. */
    List<Operation> operations() {
        return List.copyOf(operations);
    }

    /** The merged history's verdict. */
    RegisterChecker.Result check() {
        return RegisterChecker.check(operations, old::describe);
    }
}
