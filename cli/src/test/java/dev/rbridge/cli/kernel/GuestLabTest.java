package dev.rbridge.cli.kernel;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.parallel.Execution;
import org.junit.jupiter.api.parallel.ExecutionMode;
import org.junit.jupiter.api.parallel.ResourceLock;

/**
 * Marks a test class that boots the qemu guest lab: tagged {@code guest}, run in a thread of its own beside the
 * host-side tests (cli/pom.xml enables JUnit's parallel execution with every other class in the main thread), and
 * holding the {@value #LAB} lock, so at most one guest test runs at a time: two TCG guests on a 2-core machine would
 * each take twice as long and crowd out the host-side tests beside them.
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@Tag("guest")
@Execution(ExecutionMode.CONCURRENT)
@ResourceLock(GuestLabTest.LAB)
@interface GuestLabTest {
    /** The lock every guest test class holds while it runs. */
    String LAB = "qemu-guest-lab";
}
