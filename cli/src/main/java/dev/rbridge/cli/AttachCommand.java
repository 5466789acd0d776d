package dev.rbridge.cli;

import dev.rbridge.kmod.attach.Attacher;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

@Command(name = "attach", mixinStandardHelpOptions = true,
        description = {"Attach an NBD export to a kernel block device /dev/nbdX through the kernel's nbd netlink"
                + " interface (no nbd-client needed; needs root and the nbd module: modprobe nbd).",
                "By default it then stays in the foreground and watches the device: when the kernel reports the"
                        + " link dead (the bridge restarted, the network broke) it connects again and hands the new sockets"
                        + " over, while I/O waits up to --dead-conn-timeout. Stopping it (SIGTERM, Ctrl-C) leaves the device"
                        + " attached; 'rbridge detach' detaches."},
        footer = {"", "Examples:",
                "  rbridge attach " + Defaults.ATTACH_URI + "                 # first free /dev/nbdX, watch it",
                "  rbridge attach --device /dev/nbd0 --connections 4 nbd://10.0.0.7:" + Defaults.NBD_PORT + "/disk",
                "  rbridge attach --no-persist nbd+unix:///disk?socket=/run/rbridge/nbd.sock",
                "  rbridge status; rbridge detach /dev/nbd0"})
public final class AttachCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "URI", defaultValue = Defaults.ATTACH_URI,
            description = "nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH. Default ${DEFAULT-VALUE}.")
    String uri;

    @Option(names = "--device", paramLabel = "/dev/nbdN", description = "Which device; default: the first free one.")
    String device;

    @Option(names = "--connections", paramLabel = "N", defaultValue = "" + Defaults.ATTACH_CONNECTIONS,
            description = "Connections (one kernel hardware queue each; more than 1 needs a multi-conn export, which"
                    + " rbridge's are). Default ${DEFAULT-VALUE}.")
    int connections;

    @Option(names = "--block-size", paramLabel = "BYTES", defaultValue = "" + Defaults.ATTACH_BLOCK_SIZE,
            description = "Logical block size: 512, 1024, 2048 or 4096. Default ${DEFAULT-VALUE}.")
    int blockSize;

    @Option(names = "--timeout", paramLabel = "SECONDS", defaultValue = "" + Defaults.ATTACH_TIMEOUT_SECONDS,
            description = "A request unanswered this long marks its connection dead. Default ${DEFAULT-VALUE}.")
    long timeout;

    @Option(names = "--dead-conn-timeout", paramLabel = "SECONDS",
            defaultValue = "" + Defaults.ATTACH_DEAD_CONN_TIMEOUT_SECONDS,
            description = "How long I/O waits for a dead connection to be replaced before failing with EIO."
                    + " Default ${DEFAULT-VALUE}.")
    long deadConnTimeout;

    @Option(names = "--persist", negatable = true, defaultValue = "true", fallbackValue = "true",
            description = "Stay, watch the device and reconnect when its link dies (the default); --no-persist exits"
                    + " once attached.")
    boolean persist;

    @Option(names = "--disconnect-on-exit",
            description = "Detach the device when this process ends (for a device tied to a service's lifetime).")
    boolean disconnectOnExit;

    @CommandLine.Mixin
    LogLevelOption.Server logLevel;

    @CommandLine.Mixin
    SwapSafetyOptions swapSafety;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        Attacher.Target target;
        Attacher.Options options;
        try {
            target = Attacher.Target.parse(uri);
            options = new Attacher.Options(device == null ? -1 : Attacher.parseDevice(device), connections, blockSize,
                    timeout, deadConnTimeout, disconnectOnExit);
            swapSafety.apply("attach");
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        } catch (IllegalStateException e) {
            spec.commandLine().getErr().println("attach: " + e.getMessage());
            return 1;
        }
        Attacher.Attached attached;
        try {
            attached = Attacher.attach(target, options);
        } catch (IOException e) {
            spec.commandLine().getErr().println("attach: " + e.getMessage());
            return 1;
        }
        System.out.println("rbridge attach: " + attached.device() + " is " + target.uri() + " (" + Sizes.format(
                attached.size()) + ", " + attached.connections() + " connection(s), block size " + blockSize
                + (attached.readOnly() ? ", read-only" : "") + ")");
        System.out.flush();
        if (!persist && !disconnectOnExit) {
            return 0;
        }
        AtomicBoolean running = new AtomicBoolean(true);
        CountDownLatch done = new CountDownLatch(1);
        GracefulStop.onTerm();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running.set(false);
            try {
                done.await(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "shutdown"));
        try {
            if (persist) {
                System.out.println("rbridge attach: watching " + attached.device() + " for dead links; 'rbridge detach "
                        + attached.device() + "' detaches");
                System.out.flush();
                Attacher.persist(target, options, attached, running::get);
            } else {
                while (running.get()) { // --disconnect-on-exit alone: just hold the device until stopped
                    Thread.sleep(500);
                }
            }
        } catch (IOException e) {
            spec.commandLine().getErr().println("attach: watching " + attached.device() + " failed: " + e.getMessage());
            return 1;
        } finally {
            done.countDown();
        }
        return 0;
    }
}
