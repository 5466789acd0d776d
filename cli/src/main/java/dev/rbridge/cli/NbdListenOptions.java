package dev.rbridge.cli;

import dev.rbridge.nbd.server.ListenAddress;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Where the NBD server listens, for serve and demo: {@code --listen} (TCP, repeatable) and {@code --unix}. */
final class NbdListenOptions {
    @Option(names = "--listen", paramLabel = "HOST:PORT",
            description = "NBD TCP address; repeatable. Default " + Defaults.NBD_LISTEN
                    + " unless only --unix is given.")
    List<String> tcp = new ArrayList<>();

    @Option(names = "--unix", paramLabel = "PATH", description = "Also (or only) serve NBD on this Unix socket.")
    Path unix;

    /** The TCP addresses given (the default when neither they nor a Unix socket are), then the Unix socket. */
    List<ListenAddress> addresses() {
        List<ListenAddress> out = new ArrayList<>();
        for (String t : tcp.isEmpty() && unix == null ? List.of(Defaults.NBD_LISTEN) : tcp) {
            out.add(ListenAddress.parseTcp(t));
        }
        if (unix != null) {
            out.add(new ListenAddress.Unix(unix));
        }
        return out;
    }
}
