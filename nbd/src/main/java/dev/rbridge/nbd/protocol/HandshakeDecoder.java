package dev.rbridge.nbd.protocol;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Decodes what a client sends during the fixed-newstyle handshake: the client flags, then options. A pure state
 * machine: it touches no socket, accepts input split anywhere, and consumes only the bytes of the message it
 * returns, so whatever follows the option that ends the handshake stays in the buffer for the transmission decoder.
 */
public final class HandshakeDecoder {
    /** Option data above this is skipped and answered with NBD_REP_ERR_TOO_BIG rather than buffered. */
    public static final int DEFAULT_MAX_OPTION_DATA = 64 * 1024;

    private enum State {
        CLIENT_FLAGS, OPTION_HEADER, OPTION_DATA, SKIP_DATA
    }

    private final int serverHandshakeFlags;
    private final int maxOptionData;
    private final ByteBuffer header = ByteBuffer.allocate(16);
    private State state = State.CLIENT_FLAGS;
    private int option;
    private long dataLength;
    private long skipRemaining;
    private ByteBuffer data;

    public HandshakeDecoder(int serverHandshakeFlags) {
        this(serverHandshakeFlags, DEFAULT_MAX_OPTION_DATA);
    }

    public HandshakeDecoder(int serverHandshakeFlags, int maxOptionData) {
        this.serverHandshakeFlags = serverHandshakeFlags;
        this.maxOptionData = maxOptionData;
        header.limit(4);
    }

    /**
     * Decodes the next message from {@code in}, or returns null when {@code in} ran dry first (the partial message
     * is kept, call again with more input).
     *
     * @throws NbdProtocolException when the client broke a rule that leaves no way to answer (wrong magic, flags
     *                              it may not send); the session must be closed
     */
    public HandshakeMessage next(ByteBuffer in) throws NbdProtocolException {
        while (in.hasRemaining()) {
            switch (state) {
                case CLIENT_FLAGS -> {
                    if (fill(in, header)) {
                        int flags = header.getInt(0);
                        int known = Nbd.FLAG_C_FIXED_NEWSTYLE
                                | ((serverHandshakeFlags & Nbd.FLAG_NO_ZEROES) != 0 ? Nbd.FLAG_C_NO_ZEROES : 0);
                        if ((flags & ~known) != 0) {
                            throw new NbdProtocolException(
                                    "client flags 0x" + Integer.toHexString(flags)
                                            + " include bits this server did not offer");
                        }
                        expectHeader();
                        return new ClientFlags(flags);
                    }
                }
                case OPTION_HEADER -> {
                    if (fill(in, header)) {
                        long magic = header.getLong(0);
                        if (magic != Nbd.OPTS_MAGIC) {
                            throw new NbdProtocolException("option header magic 0x" + Long.toHexString(magic)
                                    + " is not IHAVEOPT");
                        }
                        option = header.getInt(8);
                        dataLength = Integer.toUnsignedLong(header.getInt(12));
                        if (dataLength > maxOptionData) {
                            skipRemaining = dataLength;
                            state = State.SKIP_DATA;
                        } else {
                            data = ByteBuffer.allocate((int) dataLength);
                            state = State.OPTION_DATA;
                            if (dataLength == 0) {
                                return finishOption();
                            }
                        }
                    }
                }
                case OPTION_DATA -> {
                    if (fill(in, data)) {
                        return finishOption();
                    }
                }
                case SKIP_DATA -> {
                    int n = (int) Math.min(in.remaining(), skipRemaining);
                    in.position(in.position() + n);
                    skipRemaining -= n;
                    if (skipRemaining == 0) {
                        expectHeader();
                        return new OptionRequest.TooBig(option, dataLength);
                    }
                }
            }
        }
        return null;
    }

    private void expectHeader() {
        state = State.OPTION_HEADER;
        header.clear().limit(16);
    }

    private OptionRequest finishOption() {
        ByteBuffer d = data.flip();
        data = null;
        expectHeader();
        return parse(option, d);
    }

    /** Copies from {@code in} into {@code dst}; true when {@code dst} is full. */
    private static boolean fill(ByteBuffer in, ByteBuffer dst) {
        int n = Math.min(in.remaining(), dst.remaining());
        if (n > 0) {
            dst.put(dst.position(), in, in.position(), n);
            dst.position(dst.position() + n);
            in.position(in.position() + n);
        }
        return !dst.hasRemaining();
    }

    /** Parses the data of one option. Public so tests and tools can parse without a stream. */
    public static OptionRequest parse(int option, ByteBuffer d) {
        try {
            return switch (option) {
                case Nbd.OPT_EXPORT_NAME -> new OptionRequest.ExportName(string(d, d.remaining(), "export name"));
                case Nbd.OPT_ABORT -> empty(d, new OptionRequest.Abort());
                case Nbd.OPT_LIST -> empty(d, new OptionRequest.ListExports());
                case Nbd.OPT_STARTTLS -> empty(d, new OptionRequest.StartTls());
                case Nbd.OPT_STRUCTURED_REPLY -> empty(d, new OptionRequest.StructuredReply());
                case Nbd.OPT_EXTENDED_HEADERS -> empty(d, new OptionRequest.ExtendedHeaders());
                case Nbd.OPT_INFO, Nbd.OPT_GO -> parseInfo(option, d);
                case Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT -> parseMetaContext(option, d);
                default -> new OptionRequest.Unknown(option);
            };
        } catch (MalformedOptionException e) {
            return new OptionRequest.Malformed(option, e.getMessage());
        }
    }

    private static OptionRequest empty(ByteBuffer d, OptionRequest request) throws MalformedOptionException {
        if (d.hasRemaining()) {
            throw new MalformedOptionException(Nbd.optionName(request.option()) + " carries no data, got "
                    + d.remaining() + " bytes");
        }
        return request;
    }

    private static OptionRequest parseInfo(int option, ByteBuffer d) throws MalformedOptionException {
        String name = exportName(d, 2);
        int count = u16(d, "number of information requests");
        if (d.remaining() != 2 * count) {
            throw new MalformedOptionException(count + " information requests need " + 2 * count
                    + " bytes, the option has " + d.remaining());
        }
        List<Integer> requests = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            requests.add(Short.toUnsignedInt(d.getShort()));
        }
        return new OptionRequest.Info(option == Nbd.OPT_GO, name, requests);
    }

    private static OptionRequest parseMetaContext(int option, ByteBuffer d) throws MalformedOptionException {
        String name = exportName(d, 4);
        long count = u32(d, "number of queries");
        if (count * 4 > d.remaining()) {
            throw new MalformedOptionException(count + " queries cannot fit in " + d.remaining() + " bytes");
        }
        List<String> queries = new ArrayList<>((int) count);
        for (long i = 0; i < count; i++) {
            long length = u32(d, "query length");
            if (length > d.remaining()) {
                throw new MalformedOptionException("query length " + length + " overruns the option data");
            }
            queries.add(string(d, (int) length, "query"));
        }
        if (d.hasRemaining()) {
            throw new MalformedOptionException(d.remaining() + " bytes follow the last query");
        }
        return new OptionRequest.MetaContext(option == Nbd.OPT_SET_META_CONTEXT, name, queries);
    }

    /**
     * The export name that starts INFO, GO and the meta-context options: its 32-bit length, then the name, which must
     * leave room for the {@code after} bytes of the count that follows it.
     */
    private static String exportName(ByteBuffer d, int after) throws MalformedOptionException {
        long nameLength = u32(d, "export name length");
        if (nameLength > d.remaining() - (long) after) {
            throw new MalformedOptionException("export name length " + nameLength + " overruns the option data");
        }
        return string(d, (int) nameLength, "export name");
    }

    private static long u32(ByteBuffer d, String what) throws MalformedOptionException {
        if (d.remaining() < 4) {
            throw new MalformedOptionException("option data ends before the " + what);
        }
        return Integer.toUnsignedLong(d.getInt());
    }

    private static int u16(ByteBuffer d, String what) throws MalformedOptionException {
        if (d.remaining() < 2) {
            throw new MalformedOptionException("option data ends before the " + what);
        }
        return Short.toUnsignedInt(d.getShort());
    }

    private static String string(ByteBuffer d, int length, String what) throws MalformedOptionException {
        if (length > Nbd.MAX_STRING_LENGTH) {
            throw new MalformedOptionException(
                    what + " is " + length + " bytes, the limit is " + Nbd.MAX_STRING_LENGTH);
        }
        ByteBuffer slice = d.slice(d.position(), length);
        d.position(d.position() + length);
        String s;
        try {
            s = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(slice).toString();
        } catch (CharacterCodingException e) {
            throw new MalformedOptionException(what + " is not valid UTF-8");
        }
        if (s.indexOf('\0') >= 0) {
            throw new MalformedOptionException(what + " contains a NUL character");
        }
        return s;
    }

    private static final class MalformedOptionException extends Exception {
        MalformedOptionException(String message) {
            super(message, null, false, false);
        }
    }
}
