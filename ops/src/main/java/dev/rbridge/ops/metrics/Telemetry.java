package dev.rbridge.ops.metrics;

import com.sun.management.OperatingSystemMXBean;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.binder.jvm.ClassLoaderMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmGcMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics;
import io.micrometer.core.instrument.binder.system.FileDescriptorMetrics;
import io.micrometer.core.instrument.binder.system.ProcessorMetrics;
import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.core.instrument.config.MeterFilter;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Supplier;

/**
 * One process's metrics: a Prometheus registry with the JVM and process meters bound, the readiness checks of the
 * roles running in this process (the rules are in {@link Readiness}), and how to render both. The core modules report
 * through their own small metrics interfaces ({@link NbdMeters}, {@link BridgeMeters}, {@link MemserverMeters} bind
 * them here); nothing outside this package imports Micrometer.
 */
public final class Telemetry implements AutoCloseable {
    private final PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    private final JvmGcMetrics gc = new JvmGcMetrics();
    private final List<Supplier<List<Problem>>> checks = new CopyOnWriteArrayList<>();

    public Telemetry() {
        // Micrometer's names for these two break Prometheus's naming rules (promtool flags a unit abbreviation and a
        // gauge ending in _count): CPU time becomes the conventional process_cpu_seconds_total, the CPU count a gauge.
        registry.config().meterFilter(MeterFilter.deny(id -> id.getName().equals("process.cpu.time")));
        registry.config().meterFilter(new MeterFilter() {
            @Override
            public Meter.Id map(Meter.Id id) {
                return id.getName().equals("system.cpu.count") ? id.withName("system.cpus") : id;
            }
        });
        if (ManagementFactory.getOperatingSystemMXBean() instanceof OperatingSystemMXBean os) {
            FunctionCounter.builder("process.cpu", os, x -> x.getProcessCpuTime() / 1e9).baseUnit("seconds")
                    .description("CPU time used by this process").register(registry);
        }
        new ClassLoaderMetrics().bindTo(registry);
        new JvmMemoryMetrics().bindTo(registry);
        gc.bindTo(registry);
        new JvmThreadMetrics().bindTo(registry);
        new ProcessorMetrics().bindTo(registry);
        new UptimeMetrics().bindTo(registry);
        new FileDescriptorMetrics().bindTo(registry);
    }

    public MeterRegistry registry() {
        return registry;
    }

    /** The Prometheus text exposition (format 0.0.4) of every meter. */
    public String scrape() {
        return registry.scrape();
    }

    /**
     * A readiness problem. {@code fatal} ones make the process not ready (HTTP 503 on /readyz); the others are
     * reported while it still serves (a degraded volume, one memserver of several unreachable).
     */
    public record Problem(boolean fatal, String text) {
        public static Problem fatal(String text) {
            return new Problem(true, text);
        }

        public static Problem warning(String text) {
            return new Problem(false, text);
        }
    }

    /** Adds a check run on every /readyz request; it returns the problems it sees now (none: ready). */
    public void readinessCheck(Supplier<List<Problem>> check) {
        checks.add(check);
    }

    public List<Problem> readiness() {
        List<Problem> out = new ArrayList<>();
        for (Supplier<List<Problem>> c : checks) {
            try {
                out.addAll(c.get());
            } catch (RuntimeException e) {
                out.add(Problem.fatal("readiness check failed: " + e));
            }
        }
        return out;
    }

    @Override
    public void close() {
        gc.close();
        registry.close();
    }
}
