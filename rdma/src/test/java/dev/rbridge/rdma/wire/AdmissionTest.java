package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.ConnectionGate;
import dev.rbridge.rdma.ConnectionLimits;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.EOFException;
import java.net.InetSocketAddress;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The memserver's side of the greeting, as every transport uses it: admission by the service, refusals answered, and
 * each peer turned away counted once, for one reason, however many of the paths that count see it.
 */
class AdmissionTest {
    static final InetSocketAddress PEER = new InetSocketAddress("127.0.0.7", 40000);
    final ArenaRegionServiceForTests service = new ArenaRegionServiceForTests("secret");
    final ConnectionGate gate = new ConnectionGate(new ConnectionLimits(8, 8, 1, 1));
    final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();

    @AfterEach
    void stop() {
        timer.shutdownNow();
    }

    Admission admission() {
        ConnectionGate.Admitted a = assertInstanceOf(ConnectionGate.Admitted.class, gate.admit(PEER.getAddress(),
                () -> {
                }));
        return new Admission(service, PEER, a.slot());
    }

    @Test
    void aHelloWithTheTokenIsAdmittedAndItsPlaceAuthenticated() {
        Admission a = admission();
        Admission.Admitted ok = assertInstanceOf(Admission.Admitted.class, a.greet(new Message.Hello(5, "secret",
                "bridge")));
        assertEquals(5, ok.helloId());
        assertEquals(0, gate.unauthenticated());
        assertEquals(1, service.sessions().size());
        a.closed();
        assertEquals(0, gate.connections(), "its place is free again");
        assertEquals(0, service.sessions().size(), "its session heard of the end");
        assertEquals(Map.of(), service.refused());
    }

    @Test
    void anotherVersionIsRefusedNamingBothAndCountedOnce() {
        Admission a = admission();
        Admission.Refused r = assertInstanceOf(Admission.Refused.class, a.greet(new Message.OtherVersion(3, 2)));
        assertEquals(Status.VERSION_MISMATCH.code(), r.reply().status());
        assertEquals(3, r.reply().id());
        assertTrue(r.reply().message().contains("v1") && r.reply().message().contains("v2"), r.reply().message());
        assertNull(a.failed(new EOFException()), "the close that follows counts nothing more");
        assertEquals(Map.of("version", 1L), service.refused());
    }

    @Test
    void aWrongTokenIsRefusedAndCountedByTheService() {
        Admission.Refused r = assertInstanceOf(Admission.Refused.class, admission().greet(new Message.Hello(1, "guess",
                "x")));
        assertEquals(Status.AUTH_FAILED.code(), r.reply().status());
        assertEquals(Map.of("token", 1L), service.refused());
    }

    @Test
    void garbageBeforeAdmissionIsCountedOnceEvenIfTheGuardFiresToo() throws Exception {
        CountDownLatch closed = new CountDownLatch(1);
        Admission a = admission();
        Message.Error reply = a.failed(new MalformedMessageException("bad magic 0x20544547"));
        assertEquals("malformed message: bad magic 0x20544547", reply.message());
        a.guard(timer, 10, closed::countDown); // its thread is slow to close: the guard fires meanwhile
        assertTrue(closed.await(5, TimeUnit.SECONDS));
        a.failed(new MalformedMessageException("again"));
        assertEquals(Map.of("malformed", 1L), service.refused());
    }

    @Test
    void theHelloGuardCutsOffASilentPeerAndIsCancelledWhenTheConnectionEnds() throws Exception {
        CountDownLatch closed = new CountDownLatch(1);
        admission().guard(timer, 20, closed::countDown);
        assertTrue(closed.await(5, TimeUnit.SECONDS));
        assertEquals(Map.of("hello_timeout", 1L), service.refused());

        CountDownLatch never = new CountDownLatch(1);
        Admission ended = admission();
        ended.guard(timer, 50, never::countDown);
        ended.closed();
        assertFalse(never.await(300, TimeUnit.MILLISECONDS), "a connection that ended is not cut off again");
        assertEquals(Map.of("hello_timeout", 1L), service.refused());
    }

    @Test
    void anAdmittedClientIsNotCountedAsRefusedWhenItsConnectionEndsBadly() {
        Admission a = admission();
        a.greet(new Message.Hello(1, "secret", "x"));
        assertTrue(a.failed(new MalformedMessageException("later garbage")) != null);
        assertNull(a.failed(new OutOfMemoryError("test")));
        assertEquals(Map.of(), service.refused());
    }

    @Test
    void noMemoryForAnAdmittedClientsBuffersIsRefusedAsNoCapacity() {
        Admission a = admission();
        a.greet(new Message.Hello(4, "secret", "x"));
        Message.Error r = a.noMemory(4, new OutOfMemoryError("direct buffer memory"));
        assertEquals(Status.NO_CAPACITY.code(), r.status());
        assertEquals(4, r.id());
        assertEquals(Map.of("no_memory", 1L), service.refused());
    }

    @Test
    void aPeerEvictedWhileItsGreetingWasCheckedIsCutOffWithoutAWord() {
        Admission first = admission();
        // A newcomer from the same address takes the place of the one that has not authenticated (limit 1).
        ConnectionGate.Admitted second = assertInstanceOf(ConnectionGate.Admitted.class,
                gate.admit(PEER.getAddress(), () -> {
                }));
        assertTrue(second.evicted() != null);
        Admission.Refused r = assertInstanceOf(Admission.Refused.class, first.greet(new Message.Hello(1, "secret",
                "x")));
        assertNull(r.reply());
        first.closed();
    }
}
