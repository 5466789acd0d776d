package dev.rbridge.rdma.wire;

import static dev.rbridge.fuzz.Feeds.check;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

import org.junit.jupiter.api.Tag;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;

import dev.rbridge.fuzz.Feeds;

/**
 * The control protocol's decoder in both directions: what a memserver reads from clients ({@link #memserverSide}) and
 * what a client reads from a memserver ({@link #clientSide}). Invariants: typed messages or
 * {@link MalformedMessageException}, nothing else; every message takes exactly its header and the body length the
 * header announced, never more than was sent nor more than {@link Protocol}'s bounds; a message re-encodes to the
 * bytes it came from (or, where the decoder tolerates slack, to a prefix of its body, with the same header), and the
 * re-encoding decodes to an equal message; WRITE and READ data are announced exactly; the same messages whole, cut in
 * two, or a byte at a time. Parameters (4 bytes each from the end, see {@link Feeds}): cut position, how the
 * transport takes data (moved from the input or skipped).
 */
@Tag("fuzz")
class MessageDecoderFuzzTest {
    private record Outcome(List<Message> messages, String error) {
    }

    @FuzzTest(maxDuration = "10s")
    void memserverSide(FuzzedDataProvider data) {
        fuzz(data, true);
    }

    @FuzzTest(maxDuration = "10s")
    void clientSide(FuzzedDataProvider data) {
        fuzz(data, false);
    }

    private static void fuzz(FuzzedDataProvider data, boolean atMemserver) {
        int cut = data.consumeInt();
        boolean skipData = (data.consumeInt() & 1) != 0;
        byte[] stream = data.consumeRemainingAsBytes();
        Outcome first = null;
        for (int mode = 0; mode < Feeds.modes(stream.length); mode++) {
            Outcome o = run(stream, Feeds.limits(mode, stream.length, cut), atMemserver, skipData);
            if (first == null) {
                first = o;
            } else if (!first.equals(o)) {
                throw new AssertionError("feeding mode " + mode + " decoded " + o + ", whole input " + first);
            }
        }
    }

    private static Outcome run(byte[] stream, int[] limits, boolean atMemserver, boolean skipData) {
        MessageDecoder decoder = atMemserver ? MessageDecoder.forMemserver() : MessageDecoder.forClient();
        ByteBuffer in = ByteBuffer.wrap(stream).order(ByteOrder.LITTLE_ENDIAN);
        List<Message> out = new ArrayList<>();
        long start = 0; // where the message being decoded starts
        boolean helloSeen = false;
        for (int limit : limits) {
            in.limit(limit);
            while (true) {
                Message m;
                try {
                    m = decoder.next(in);
                } catch (MalformedMessageException e) {
                    check(e.getMessage() != null && !e.getMessage().isEmpty(), "a framing error without a message");
                    long took = in.position() - start;
                    check(took <= Protocol.HEADER + Protocol.MAX_HELLO_BODY || !decoder.awaitingHello(),
                            () -> "a greeting error after " + took + " bytes");
                    return new Outcome(out, e.getMessage());
                }
                if (m == null) {
                    check(!in.hasRemaining(), () -> "the decoder stopped with " + in.remaining() + " bytes unread");
                    break;
                }
                long end = start + Protocol.HEADER + decoder.length();
                check(decoder.length() >= 0 && decoder.length() <= Protocol.MAX_BODY,
                        () -> "body length " + decoder.length());
                check(end <= Integer.MAX_VALUE && header(stream, (int) start).getInt() == Protocol.MAGIC,
                        () -> m + " does not start at a header");
                int data = decoder.payloadRemaining();
                check(in.position() + data == end, () -> m + " with " + data + " bytes of data ends at " + in.position()
                        + ", its header says " + end);
                checkEncoding(m, stream, (int) start, decoder.length(), atMemserver);
                if (atMemserver && helloSeen) {
                    check(!(m instanceof Message.OtherVersion), "a version change mid-stream was read as a greeting");
                }
                helloSeen |= m instanceof Message.Hello || m instanceof Message.AuthProof;
                if (data > 0) {
                    check(m instanceof Message.Write w && w.length() == data
                            || m instanceof Message.ReadReply r && r.length() == data,
                            () -> m + " left " + data + " bytes");
                    check(data <= Protocol.MAX_DATA, () -> m + " has " + data + " bytes of data");
                    int n = skipData ? 0 : Math.min(data, in.remaining());
                    in.position(in.position() + n);
                    decoder.payloadMoved(n);
                    if (n < data) {
                        decoder.skipPayload();
                    }
                }
                out.add(m);
                start = end;
            }
        }
        return new Outcome(out, null);
    }

    private static ByteBuffer header(byte[] stream, int start) {
        return ByteBuffer.wrap(stream, start, Protocol.HEADER).slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** {@code m}, decoded from the message at {@code stream[start]} with a body of {@code length}, re-encoded. */
    private static void checkEncoding(Message m, byte[] stream, int start, int length, boolean atMemserver) {
        ByteBuffer h = header(stream, start);
        long id = h.getLong(8);
        int code = Short.toUnsignedInt(h.getShort(6));
        check(m.id() == id, () -> m + " has another id than its header's " + id);
        if (m instanceof Message.Unreadable u) {
            check(u.code() == code && u.reason() != null && !u.reason().isEmpty(), () -> m + " names no reason");
            return;
        }
        // A greeting of another version, HELLO or AUTH, is one message, OtherVersion, answered as HELLO's.
        boolean otherVersion =
                m instanceof Message.OtherVersion && (code == Opcode.HELLO.code() || code == Opcode.AUTH.code());
        check(m.code() == code || m instanceof Message.Error e && e.code() == code || otherVersion,
                () -> m + " is not opcode " + code);
        ByteBuffer enc = MessageEncoder.encode(m);
        int encLength = enc.getInt(20);
        int fixed = enc.remaining() - Protocol.HEADER; // what encode wrote of the body: no WRITE or READ data
        // The header is the one it came from, but for the body length where the decoder ignored slack; the version of
        // a reply other than HELLO's (a client reads those whatever version they name, so that it reads the
        // VERSION_MISMATCH error a memserver of another version sends); and the status of a request (requests have
        // none: a memserver ignores the field).
        boolean versioned = atMemserver || m instanceof Message.HelloReply || m instanceof Message.OtherVersion;
        check(Arrays.equals(enc.array(), 0, 4, stream, start, start + 4)
                && (!versioned || Arrays.equals(enc.array(), 4, 6, stream, start + 4, start + 6))
                && (otherVersion || Arrays.equals(enc.array(), 6, 8, stream, start + 6, start + 8))
                && Arrays.equals(enc.array(), 8, 16, stream, start + 8, start + 16)
                && (atMemserver || Arrays.equals(enc.array(), 16, 20, stream, start + 16, start + 20)),
                () -> m + " re-encodes to another header");
        if (m instanceof Message.Error && length < 2) {
            check(encLength == 2, () -> m + " re-encodes to a body of " + encLength); // no room for a message: empty
        } else {
            // Invalid UTF-8 in a string reads as U+FFFD, whose encoding may be longer than the bytes it replaced.
            // toString withholds a HELLO's token, which may hold replaced bytes too.
            boolean replaced = m.toString().indexOf('\uFFFD') >= 0
                    || m instanceof Message.Hello hello && hello.token() != null
                            && hello.token().indexOf('\uFFFD') >= 0;
            if (!replaced) {
                int at = start + Protocol.HEADER;
                if (m instanceof Message.LeaseReply l) {
                    // Its flag reads any byte but 0 as true and is written as 1; its owner-change count is absent
                    // from older memservers' replies (read as unknown, written as the current layout).
                    check(Arrays.equals(enc.array(), Protocol.HEADER, Protocol.HEADER + 8, stream, at, at + 8),
                            () -> m + " re-encodes to another ttl");
                    check(l.tookOver() == (stream[at + 8] != 0), () -> m + " read its flag from " + stream[at + 8]);
                    if (length >= 17) {
                        check(Arrays.equals(enc.array(), Protocol.HEADER + 9, Protocol.HEADER + 17, stream, at + 9,
                                at + 17), () -> m + " re-encodes to another owner-change count");
                    } else {
                        check(l.ownerChanges() == dev.rbridge.rdma.Lease.UNKNOWN_OWNER_CHANGES,
                                () -> m + " read a count from a body of " + length);
                    }
                    // Its epoch, lease id and continued flag came later still: all three, or none (read as none).
                    if (length >= 34) {
                        check(Arrays.equals(enc.array(), Protocol.HEADER + 17, Protocol.HEADER + 33, stream, at + 17,
                                at + 33), () -> m + " re-encodes to another epoch or lease id");
                        check(Boolean.valueOf(stream[at + 33] != 0).equals(l.continued()),
                                () -> m + " read its continued flag from " + stream[at + 33]);
                    } else {
                        check(l.epoch() == dev.rbridge.rdma.Lease.NO_EPOCH && l.continued() == null,
                                () -> m + " read an epoch from a body of " + length);
                    }
                } else if (m instanceof Message.Lease || m instanceof Message.Unlease) {
                    // A lease id ends them, absent from older clients' requests (read as none, written as 0).
                    long leaseId = m instanceof Message.Lease l ? l.leaseId() : ((Message.Unlease) m).leaseId();
                    int withoutId = fixed - 8;
                    check(Arrays.equals(enc.array(), Protocol.HEADER, Protocol.HEADER + withoutId, stream, at,
                            at + withoutId), () -> m + " re-encodes to another body");
                    if (length >= fixed) {
                        check(Arrays.equals(enc.array(), Protocol.HEADER + withoutId, Protocol.HEADER + fixed, stream,
                                at + withoutId, at + fixed), () -> m + " re-encodes to another lease id");
                    } else {
                        check(leaseId == dev.rbridge.rdma.Lease.NO_ID, () -> m + " read a lease id from a body of "
                                + length);
                    }
                } else {
                    check(encLength <= length, () -> m + " re-encodes to a body of " + encLength + ", it came in "
                            + length);
                    check(Arrays.equals(enc.array(), Protocol.HEADER, Protocol.HEADER + fixed, stream, at, at + fixed),
                            () -> m + " re-encodes to another body");
                }
            }
        }
        check(equal(m, redecode(enc, atMemserver)), () -> m + " re-encoded decodes to another message");
    }

    /** Decodes an encoded message alone, after the greeting a memserver's decoder needs first. */
    private static Message redecode(ByteBuffer enc, boolean atMemserver) {
        MessageDecoder d = atMemserver ? MessageDecoder.forMemserver() : MessageDecoder.forClient();
        try {
            int code = Short.toUnsignedInt(enc.getShort(6));
            if (atMemserver && code != Opcode.HELLO.code() && code != Opcode.AUTH.code()) {
                Message greeting = code == Opcode.AUTH_PROOF.code()
                        ? new Message.AuthStart(0, "", WireBytes.EMPTY)
                        : new Message.Hello(0, "", "");
                check(d.next(MessageEncoder.encode(greeting)) != null, "the greeting did not decode");
            }
            Message again = d.next(enc.duplicate().order(ByteOrder.LITTLE_ENDIAN));
            check(again != null, "a whole encoded message did not decode");
            return again;
        } catch (MalformedMessageException e) {
            throw new AssertionError("a re-encoded message is malformed", e);
        }
    }

    private static boolean equal(Message a, Message b) {
        return Objects.equals(a, b);
    }
}
