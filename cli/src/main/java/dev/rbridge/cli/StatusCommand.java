package dev.rbridge.cli;

import dev.rbridge.kmod.attach.Attacher;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.Callable;

@Command(name = "status", mixinStandardHelpOptions = true,
        description = "Show the kernel's nbd devices: connected or not, size, and what they are attached to.")
public final class StatusCommand implements Callable<Integer> {
    @picocli.CommandLine.Option(names = "--json", description = "Print the devices as a JSON array.")
    boolean json;

    @Parameters(index = "0", arity = "0..1", paramLabel = "DEVICE", description = "/dev/nbdN or N (default: all)")
    String device;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        List<Attacher.DeviceStatus> devices;
        try {
            devices = Attacher.status(device == null ? -1 : Attacher.parseDevice(device));
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        } catch (IOException e) {
            spec.commandLine().getErr().println("status: " + e.getMessage());
            return 1;
        }
        if (json) {
            List<java.util.Map<String, Object>> out = new java.util.ArrayList<>();
            for (Attacher.DeviceStatus d : devices) {
                java.util.Map<String, Object> m = new java.util.LinkedHashMap<>();
                m.put("device", d.device());
                m.put("connected", d.connected());
                m.put("size_bytes", d.connected() ? d.sizeBytes() : 0);
                m.put("attached_to", d.backend());
                out.add(m);
            }
            System.out.println(dev.rbridge.ops.json.Json.write(out));
            return 0;
        }
        System.out.printf("%-12s %-12s %10s  %s%n", "DEVICE", "STATE", "SIZE", "ATTACHED TO");
        for (Attacher.DeviceStatus d : devices) {
            System.out.printf("%-12s %-12s %10s  %s%n", d.device(), d.connected() ? "connected" : "free",
                    d.connected() ? Sizes.format(d.sizeBytes()) : "-", d.backend().isEmpty() ? "-" : d.backend());
        }
        return 0;
    }
}
