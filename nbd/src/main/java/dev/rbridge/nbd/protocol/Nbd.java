package dev.rbridge.nbd.protocol;

/**
 * Numbers of the NBD protocol (NetworkBlockDevice/nbd {@code doc/proto.md}). Everything on the wire is big-endian.
 * Grouped by the phase and field they belong to; names follow the spec without the {@code NBD_} prefix.
 */
public final class Nbd {
    private Nbd() {}

    // --- handshake: magics and flags
    public static final long INIT_MAGIC = 0x4e42444d41474943L; // "NBDMAGIC"
    public static final long OPTS_MAGIC = 0x49484156454F5054L; // "IHAVEOPT"
    public static final long OPTION_REPLY_MAGIC = 0x3e889045565a9L;

    public static final int FLAG_FIXED_NEWSTYLE = 1;
    public static final int FLAG_NO_ZEROES = 1 << 1;
    public static final int FLAG_C_FIXED_NEWSTYLE = 1;
    public static final int FLAG_C_NO_ZEROES = 1 << 1;

    // --- options
    public static final int OPT_EXPORT_NAME = 1;
    public static final int OPT_ABORT = 2;
    public static final int OPT_LIST = 3;
    public static final int OPT_PEEK_EXPORT = 4;
    public static final int OPT_STARTTLS = 5;
    public static final int OPT_INFO = 6;
    public static final int OPT_GO = 7;
    public static final int OPT_STRUCTURED_REPLY = 8;
    public static final int OPT_LIST_META_CONTEXT = 9;
    public static final int OPT_SET_META_CONTEXT = 10;
    public static final int OPT_EXTENDED_HEADERS = 11;

    // --- option replies
    public static final int REP_ACK = 1;
    public static final int REP_SERVER = 2;
    public static final int REP_INFO = 3;
    public static final int REP_META_CONTEXT = 4;
    private static final int REP_FLAG_ERROR = 1 << 31;
    public static final int REP_ERR_UNSUP = REP_FLAG_ERROR | 1;
    public static final int REP_ERR_POLICY = REP_FLAG_ERROR | 2;
    public static final int REP_ERR_INVALID = REP_FLAG_ERROR | 3;
    public static final int REP_ERR_PLATFORM = REP_FLAG_ERROR | 4;
    public static final int REP_ERR_TLS_REQD = REP_FLAG_ERROR | 5;
    public static final int REP_ERR_UNKNOWN = REP_FLAG_ERROR | 6;
    public static final int REP_ERR_SHUTDOWN = REP_FLAG_ERROR | 7;
    public static final int REP_ERR_BLOCK_SIZE_REQD = REP_FLAG_ERROR | 8;
    public static final int REP_ERR_TOO_BIG = REP_FLAG_ERROR | 9;
    public static final int REP_ERR_EXT_HEADER_REQD = REP_FLAG_ERROR | 10;

    // --- NBD_INFO_* items of NBD_REP_INFO
    public static final int INFO_EXPORT = 0;
    public static final int INFO_NAME = 1;
    public static final int INFO_DESCRIPTION = 2;
    public static final int INFO_BLOCK_SIZE = 3;

    // --- transmission flags (16 bits, sent with the export)
    public static final int FLAG_HAS_FLAGS = 1;
    public static final int FLAG_READ_ONLY = 1 << 1;
    public static final int FLAG_SEND_FLUSH = 1 << 2;
    public static final int FLAG_SEND_FUA = 1 << 3;
    public static final int FLAG_ROTATIONAL = 1 << 4;
    public static final int FLAG_SEND_TRIM = 1 << 5;
    public static final int FLAG_SEND_WRITE_ZEROES = 1 << 6;
    public static final int FLAG_SEND_DF = 1 << 7;
    public static final int FLAG_CAN_MULTI_CONN = 1 << 8;
    public static final int FLAG_SEND_RESIZE = 1 << 9;
    public static final int FLAG_SEND_CACHE = 1 << 10;
    public static final int FLAG_SEND_FAST_ZERO = 1 << 11;

    // --- transmission: magics
    public static final int REQUEST_MAGIC = 0x25609513;
    public static final int SIMPLE_REPLY_MAGIC = 0x67446698;
    public static final int STRUCTURED_REPLY_MAGIC = 0x668e33ef;

    /** Size of a compact (non-extended) request header. */
    public static final int REQUEST_HEADER_LENGTH = 28;
    public static final int SIMPLE_REPLY_HEADER_LENGTH = 16;
    public static final int STRUCTURED_REPLY_HEADER_LENGTH = 20;

    // --- commands
    public static final int CMD_READ = 0;
    public static final int CMD_WRITE = 1;
    public static final int CMD_DISC = 2;
    public static final int CMD_FLUSH = 3;
    public static final int CMD_TRIM = 4;
    public static final int CMD_CACHE = 5;
    public static final int CMD_WRITE_ZEROES = 6;
    public static final int CMD_BLOCK_STATUS = 7;

    // --- command flags
    public static final int CMD_FLAG_FUA = 1;
    public static final int CMD_FLAG_NO_HOLE = 1 << 1;
    public static final int CMD_FLAG_DF = 1 << 2;
    public static final int CMD_FLAG_REQ_ONE = 1 << 3;
    public static final int CMD_FLAG_FAST_ZERO = 1 << 4;

    // --- structured reply flags and chunk types
    public static final int REPLY_FLAG_DONE = 1;
    public static final int REPLY_TYPE_NONE = 0;
    public static final int REPLY_TYPE_OFFSET_DATA = 1;
    public static final int REPLY_TYPE_OFFSET_HOLE = 2;
    public static final int REPLY_TYPE_BLOCK_STATUS = 5;
    public static final int REPLY_TYPE_ERROR = (1 << 15) | 1;
    public static final int REPLY_TYPE_ERROR_OFFSET = (1 << 15) | 2;

    // --- base:allocation states
    public static final String CONTEXT_BASE_ALLOCATION = "base:allocation";
    public static final int STATE_HOLE = 1;
    public static final int STATE_ZERO = 1 << 1;

    /** Longest string (export name, query, description) the spec allows. */
    public static final int MAX_STRING_LENGTH = 4096;

    public static String commandName(int type) {
        return switch (type) {
            case CMD_READ -> "READ";
            case CMD_WRITE -> "WRITE";
            case CMD_DISC -> "DISC";
            case CMD_FLUSH -> "FLUSH";
            case CMD_TRIM -> "TRIM";
            case CMD_CACHE -> "CACHE";
            case CMD_WRITE_ZEROES -> "WRITE_ZEROES";
            case CMD_BLOCK_STATUS -> "BLOCK_STATUS";
            default -> "CMD_" + type;
        };
    }

    public static String optionName(int option) {
        return switch (option) {
            case OPT_EXPORT_NAME -> "EXPORT_NAME";
            case OPT_ABORT -> "ABORT";
            case OPT_LIST -> "LIST";
            case OPT_PEEK_EXPORT -> "PEEK_EXPORT";
            case OPT_STARTTLS -> "STARTTLS";
            case OPT_INFO -> "INFO";
            case OPT_GO -> "GO";
            case OPT_STRUCTURED_REPLY -> "STRUCTURED_REPLY";
            case OPT_LIST_META_CONTEXT -> "LIST_META_CONTEXT";
            case OPT_SET_META_CONTEXT -> "SET_META_CONTEXT";
            case OPT_EXTENDED_HEADERS -> "EXTENDED_HEADERS";
            default -> "OPT_" + Integer.toUnsignedString(option);
        };
    }
}
