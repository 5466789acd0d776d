package dev.rbridge.cli;

/**
 * SIGTERM as a request, not a failure: a server command that stops because it was asked to (systemd, Kubernetes,
 * kill) exits 0 after its shutdown hooks ran, rather than the JVM's 143, which service managers count as a failed
 * stop. SIGINT keeps the JVM's behaviour (130: interrupted at a terminal).
 */
final class GracefulStop {
    private GracefulStop() {}

    /** From now on SIGTERM runs the shutdown hooks and exits 0. Only for commands that serve until stopped. */
    static void onTerm() {
        Signals.handle("TERM", () -> {
            // exit() blocks until the hooks are done; a thread of its own keeps the signal thread free meanwhile
            Thread t = new Thread(() -> System.exit(0), "graceful-stop");
            t.setDaemon(false);
            t.start();
        });
    }
}
