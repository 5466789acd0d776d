package dev.rbridge.common;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

class FailuresTest {
    @Test
    void theCauseIsFoundInsideEveryWrapper() {
        IOException root = new IOException("connection reset");
        Throwable wrapped = new CompletionException(new ExecutionException(new CompletionException(root)));
        assertSame(root, Failures.cause(wrapped));
        assertEquals("connection reset", Failures.reason(wrapped));
    }

    @Test
    void aWrapperWithoutCauseAndACauseWithoutMessageAreKept() {
        CompletionException empty = new CompletionException("gave up", null);
        assertSame(empty, Failures.cause(empty));
        IllegalStateException silent = new IllegalStateException();
        assertEquals(silent.toString(), Failures.reason(new ExecutionException(silent)));
        RuntimeException other = new RuntimeException("not a wrapper", root());
        assertSame(other, Failures.cause(other));
    }

    private static Throwable root() {
        return new IOException("inner");
    }
}
