package dev.rbridge.nbd.protocol;

import java.util.List;

/**
 * One option the client sent during option haggling, decoded into what it asks for. Options the decoder cannot
 * parse still arrive as a typed message ({@link Malformed}, {@link TooBig}, {@link Unknown}) so the server can answer
 * each with its NBD_REP_ERR_* reply instead of dropping the connection.
 */
public sealed interface OptionRequest extends HandshakeMessage {
    /** The option number as sent, echoed in every reply. */
    int option();

    /** NBD_OPT_EXPORT_NAME: enter transmission; errors cannot be reported, only a closed connection. */
    record ExportName(String name) implements OptionRequest {
        public int option() {
            return Nbd.OPT_EXPORT_NAME;
        }
    }

    record Abort() implements OptionRequest {
        public int option() {
            return Nbd.OPT_ABORT;
        }
    }

    record ListExports() implements OptionRequest {
        public int option() {
            return Nbd.OPT_LIST;
        }
    }

    record StartTls() implements OptionRequest {
        public int option() {
            return Nbd.OPT_STARTTLS;
        }
    }

    record StructuredReply() implements OptionRequest {
        public int option() {
            return Nbd.OPT_STRUCTURED_REPLY;
        }
    }

    record ExtendedHeaders() implements OptionRequest {
        public int option() {
            return Nbd.OPT_EXTENDED_HEADERS;
        }
    }

    /** NBD_OPT_INFO ({@code go == false}) or NBD_OPT_GO, with the NBD_INFO_* items the client asked for. */
    record Info(boolean go, String name, List<Integer> requests) implements OptionRequest {
        public Info {
            requests = List.copyOf(requests);
        }

        public int option() {
            return go ? Nbd.OPT_GO : Nbd.OPT_INFO;
        }
    }

    /** NBD_OPT_LIST_META_CONTEXT ({@code set == false}) or NBD_OPT_SET_META_CONTEXT. */
    record MetaContext(boolean set, String exportName, List<String> queries) implements OptionRequest {
        public MetaContext {
            queries = List.copyOf(queries);
        }

        public int option() {
            return set ? Nbd.OPT_SET_META_CONTEXT : Nbd.OPT_LIST_META_CONTEXT;
        }
    }

    /** An option this server does not implement; answered with NBD_REP_ERR_UNSUP. */
    record Unknown(int option) implements OptionRequest {
    }

    /** A known option whose data is not what the spec says; answered with NBD_REP_ERR_INVALID. */
    record Malformed(int option, String reason) implements OptionRequest {
    }

    /** An option whose data exceeds what the server buffers; the data was skipped, answered with NBD_REP_ERR_TOO_BIG. */
    record TooBig(int option, long length) implements OptionRequest {
    }
}
