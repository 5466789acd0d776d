package dev.rbridge.rdma.wire;

/**
 * The remote-memory control protocol, version {@value #VERSION}: the constants every peer shares. Little-endian; every
 * message is a {@value #HEADER}-byte header (magic, version, opcode, request id, status, body length) and that many
 * bytes of body. The layouts are tabled in {@code docs/wire-formats.md}.
 *
 * <p>Version 1 is extended only by adding opcodes: no message of an existing opcode changes layout or meaning, so
 * peers of any v1 build keep working together for the operations both know. A memserver that predates an opcode
 * answers it with {@code BAD_REQUEST} "unexpected OP_n" and the connection goes on. The version changes only when an
 * existing message's layout or meaning does.
 */
public final class Protocol {
    private Protocol() {}

    /** The bytes "RBRM" on the wire, read little-endian. */
    public static final int MAGIC = 0x4D524252;
    public static final int VERSION = 1;
    public static final int HEADER = 24;
    /** Largest READ or WRITE data in one message; a client splits larger operations. */
    public static final int MAX_DATA = 16 << 20;
    /** Largest body of any message: data plus the fixed fields of READ or WRITE, or a LIST reply. */
    public static final int MAX_BODY = MAX_DATA + 64;
    /** A HELLO carries a token and a client name: a few hundred bytes; this leaves room for long tokens. */
    public static final int MAX_HELLO_BODY = 4 << 10;
    /**
     * Largest body of a control message other than a LIST reply or an INVALIDATE: requests a memserver buffers whole
     * (ALLOCATE, LEASE, ...), and replies a client does (descriptors, errors, UCX addresses and keys).
     */
    public static final int MAX_CONTROL_BODY = 64 << 10;
    /** Region id, key and offset: the fixed part of READ, WRITE and ZERO requests. */
    public static final int DATA_ADDRESS = 24;
    /** A READ request's body: the data address and a 32-bit length. */
    public static final int READ_BODY = DATA_ADDRESS + 4;
    /** A ZERO request's body: the data address and a 64-bit length. */
    public static final int ZERO_BODY = DATA_ADDRESS + 8;
    /**
     * What a ucx memserver's probe word holds (the bytes "UCXPROBE"): a client reads it over its new UCX endpoint
     * (UCX_PROBE) and checks it, so its connect proves the data path and leaves no UCX wire-up half done.
     */
    public static final long UCX_PROBE_WORD = 0x45424F5250584355L;

    /** STATE reply flag: the memserver is draining (no new clients or regions; it exits once its clients leave). */
    public static final int STATE_DRAINING = 1;
    /** Strings are a 16-bit length and that many bytes of UTF-8; longer ones are cut. */
    public static final int MAX_STRING = 0xFFFF;
}
