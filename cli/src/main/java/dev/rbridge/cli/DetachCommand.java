package dev.rbridge.cli;

import dev.rbridge.kmod.attach.Attacher;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.util.concurrent.Callable;

@Command(name = "detach", mixinStandardHelpOptions = true,
        description = "Disconnect a kernel nbd device (attached by 'rbridge attach' or nbd-client): outstanding I/O"
                + " fails, the device reads as empty until attached again. Unmount its filesystem first.")
public final class DetachCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "DEVICE", description = "/dev/nbdN or N")
    String device;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        int index;
        try {
            index = Attacher.parseDevice(device);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        try {
            Attacher.detach(index);
        } catch (IOException e) {
            spec.commandLine().getErr().println("detach: " + e.getMessage());
            return 1;
        }
        System.out.println("rbridge detach: /dev/nbd" + index + " disconnected");
        return 0;
    }
}
