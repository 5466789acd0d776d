package dev.rbridge.rdma.wire;

import dev.rbridge.rdma.ArenaRegionServiceForTests;
import dev.rbridge.rdma.RegionDescriptor;
import dev.rbridge.rdma.RegionService;
import dev.rbridge.rdma.RegionTag;
import dev.rbridge.rdma.RemoteMemoryException.Status;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The memserver side of the control protocol: each request becomes its session call and reply, errors included. */
class ControlDispatcherTest {
    RegionService.Session session;

    @BeforeEach
    void open() throws Exception {
        session = new ArenaRegionServiceForTests("t").open(new dev.rbridge.rdma.RegionService.Credential.Token("t"),
                "client", new InetSocketAddress("127.0.0.1", 1));
    }

    @Test
    void everyControlRequestIsAnsweredWithItsReply() throws Exception {
        RegionTag tag = new RegionTag("vol", 0, 0, 1);
        Message.AllocateReply a = assertInstanceOf(Message.AllocateReply.class,
                ControlDispatcher.answer(session, new Message.Allocate(1, 8192, tag)));
        RegionDescriptor d = a.region();
        assertEquals(1, a.id());
        assertEquals(new Message.OpenReply(2, d), ControlDispatcher.answer(session, new Message.Open(2, d.id())));
        RegionTag next = new RegionTag("vol", 0, 0, 2);
        assertEquals(new Message.RetagReply(3, new RegionDescriptor(d.id(), 8192, d.key(), next)),
                ControlDispatcher.answer(session, new Message.Retag(3, d.id(), d.key(), next)));
        assertEquals(new Message.LeaseReply(4, 5000, false),
                ControlDispatcher.answer(session, new Message.Lease(4, "vol", "owner", 5000)));
        assertEquals(new Message.UnleaseReply(5), ControlDispatcher.answer(session, new Message.Unlease(5, "vol",
                "owner")));
        assertInstanceOf(Message.InfoReply.class, ControlDispatcher.answer(session, new Message.Info(6)));
        assertEquals(new Message.StateReply(6, 0), ControlDispatcher.answer(session, new Message.State(6)));
        try (RegionService.Pin p = session.pin(d.id(), d.key(), 0, 8192)) {
            p.memory().fill((byte) 7);
            assertEquals(new Message.ZeroReply(7), ControlDispatcher.answer(session, new Message.Zero(7, d.id(),
                    d.key(), 100, 50)));
            assertEquals(0, p.memory().get(ValueLayout.JAVA_BYTE, 100));
            assertEquals(7, p.memory().get(ValueLayout.JAVA_BYTE, 150));
        }
        assertEquals(new Message.FlushReply(8), ControlDispatcher.answer(session, new Message.Flush(8)));
        assertEquals(new Message.ReleaseReply(9), ControlDispatcher.answer(session, new Message.Release(9, d.id(),
                d.key())));
    }

    @Test
    void aRefusalIsAnErrorReplyToTheSameRequestAndLongReasonsAreCut() throws Exception {
        RegionDescriptor d = session.allocate(RegionTag.scratch("x"), 4096);
        assertEquals(new Message.Error(1, Opcode.RELEASE.code(), Status.ACCESS_DENIED.code(),
                "wrong access key for region " + d.id()),
                ControlDispatcher.answer(session,
                        new Message.Release(1, d.id(), d.key() ^ 1)));
        Message.Error cut = ControlDispatcher.error(new Message.Info(2), Status.INTERNAL, "x".repeat(5000));
        assertEquals(ControlDispatcher.MAX_ERROR_CHARS + 3, cut.message().length());
        assertTrue(cut.message().endsWith("..."));
    }

    @Test
    void unreadableAndUnservedRequestsAreBadRequestsOldClientsRecognise() {
        assertEquals(new Message.Error(1, 99, Status.BAD_REQUEST.code(), "unexpected OP_99"),
                ControlDispatcher.answer(session, new Message.Unreadable(1, 99, "unexpected OP_99")));
        assertEquals(new Message.Error(2, 32, Status.BAD_REQUEST.code(), "unexpected OP_32"),
                ControlDispatcher.answer(session, new Message.UcxConnect(2, WireBytes.EMPTY)),
                "a ucx client learns from this that the memserver serves another transport");
        assertEquals(new Message.Error(4, 35, Status.BAD_REQUEST.code(), "unexpected OP_35"),
                ControlDispatcher.answer(session, new Message.UcxProbe(4)),
                "what a ucx memserver that predates UCX_PROBE answers too: its clients then wire up without it");
        assertEquals(new Message.Error(3, 1, Status.BAD_REQUEST.code(), "unexpected HELLO"),
                ControlDispatcher.answer(session, new Message.Hello(3, "t", "again")));
    }

    @Test
    void aListingIsHeldWithTheLengthOfItsReply() throws Exception {
        session.allocate(RegionTag.scratch("one"), 4096);
        session.allocate(new RegionTag("two", 1, 1, 1), 4096);
        ControlDispatcher.Listed listed = ControlDispatcher.list(session, new Message.ListRegions(4));
        assertNull(listed.error());
        assertNotNull(listed.listing());
        assertEquals(MessageEncoder.listBodyLength(listed.listing().regions()), listed.bodyLength());
        assertEquals(2, listed.listing().regions().size());
        listed.listing().close();
    }
}
