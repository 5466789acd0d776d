package dev.rbridge.rdma.wire;

/**
 * The operations of the control protocol, by wire code. Codes 1-19 are the region, lease and data operations every
 * memserver serves (10 came later) (READ and WRITE travel on this connection for the tcp transport only); 32-34 are the ucx
 * transport's additions (35 came later: a client that knows it asks for it, a memserver that predates it answers
 * "unexpected OP_35"); 36-37 the greeting that proves the token without sending it. A code not listed here is an
 * operation this build predates.
 */
public enum Opcode {
    HELLO(1), ALLOCATE(2), OPEN(3), LIST(4), RELEASE(5), RETAG(6), LEASE(7), UNLEASE(8), INFO(9),
    /**
     * Client to memserver: what the memserver is doing ({@link Protocol#STATE_DRAINING}). Came after 1-9: a memserver
     * that predates it answers "unexpected OP_10", which a client reads as "nothing to report".
     */
    STATE(10), READ(16), WRITE(17), ZERO(18), FLUSH(19),
    /** Client to memserver, after HELLO: the memserver worker's UCX address. */
    UCX_CONNECT(32),
    /** Client to memserver: a region's remote address and packed UCX remote key (key and range checked). */
    MAP(33),
    /** Memserver to client: forget these regions' remote keys; the client answers once nothing of it is in flight. */
    INVALIDATE(34),
    /**
     * Client to memserver, after UCX_CONNECT: where the memserver's probe word is and its packed UCX remote key. The
     * client reads the word over its new endpoint before its connect completes, so UCX's wire-up is over both ways.
     */
    UCX_PROBE(35),
    /**
     * Client to memserver, first, instead of HELLO: its name and a nonce. The memserver answers with a nonce of its own,
     * and the token never crosses the wire: each side proves it knows it (AUTH_PROOF). See {@link dev.rbridge.rdma.TokenProof}.
     */
    AUTH(36),
    /** Client to memserver, after AUTH: its proof; the reply is HELLO's, with the memserver's proof. */
    AUTH_PROOF(37);

    private static final Opcode[] BY_CODE = new Opcode[38];

    static {
        for (Opcode o : values()) {
            BY_CODE[o.code] = o;
        }
    }

    private final int code;

    Opcode(int code) {
        this.code = code;
    }

    public int code() {
        return code;
    }

    /** The opcode with this wire code, or null for a code this build does not know. */
    public static Opcode of(int code) {
        return code >= 0 && code < BY_CODE.length ? BY_CODE[code] : null;
    }

    /** The name of a wire code for messages: the opcode's name, or {@code OP_n} for a code this build does not know. */
    public static String name(int code) {
        Opcode o = of(code);
        return o == null ? "OP_" + code : o.name();
    }
}
