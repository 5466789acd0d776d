package dev.rbridge.ops.metrics;

import dev.rbridge.bridge.Bridge;
import dev.rbridge.bridge.BridgeMetrics;
import dev.rbridge.bridge.memservers.MemserverLink;
import dev.rbridge.bridge.memservers.RemoteOpMetrics;
import dev.rbridge.bridge.volume.Rebuilder;
import dev.rbridge.bridge.volume.SlabState;
import dev.rbridge.bridge.volume.Volume;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;

import java.util.concurrent.TimeUnit;
import java.util.function.ToDoubleFunction;

/**
 * The bridge's metrics on a Micrometer registry: remote operations are recorded as they complete (through
 * {@link BridgeMetrics}); volume, memserver and rebuild state is read from the {@link Bridge} when scraped.
 *
 * <pre>
 * rbridge_remote_ops_total{memserver,op}              data-path operations completed (read, write, zero)
 * rbridge_remote_bytes_total{memserver,op}            bytes read, written or zeroed
 * rbridge_remote_errors_total{memserver,op}           operations that failed (timeout, lost connection, refused)
 * rbridge_remote_op_duration_seconds{memserver,op}    histogram, issue to completion
 * rbridge_remote_ops_in_flight{memserver}             issued and not complete
 * rbridge_memserver_reachable{memserver}              1 when connected and usable, else 0
 * rbridge_memserver_evacuating{memserver}             1 while its replicas are moved off (a drain), and after
 *                                                     the bridge let go of a memserver that drained itself
 * rbridge_memserver_free_reported_bytes{memserver}    free capacity it last reported, less this bridge's grants since
 * rbridge_volume_size_bytes{export}                   the volume's size
 * rbridge_volume_replicas{export}                     configured replicas per slab
 * rbridge_volume_slabs{export,state}                  slabs by state: unallocated, healthy, degraded, rebuilding, lost
 * rbridge_volume_fenced{export}                       1 when the volume's lease was lost and it fails with EIO
 * rbridge_volume_enospc_total{export}                 requests failed with ENOSPC: no memserver had room for a slab
 * rbridge_bridge_provisioned_bytes                    what the volumes need when full: sizes x replicas, summed
 * rbridge_bridge_capacity_live_bytes                  what the memservers up lend: their capacities, summed
 * rbridge_rebuild_queue_slabs                         slabs waiting for a rebuild or resync
 * rbridge_rebuild_remaining_bytes                     bytes still to copy (current slab's rest + queued slabs)
 * rbridge_rebuild_active                              1 while a slab is being copied
 * rbridge_rebuild_copied_bytes_total                  bytes copied into new or resynchronized replicas
 * rbridge_rebuild_completed_total{kind}               rebuilds and resyncs finished (kind: rebuild, resync)
 * rbridge_rebuild_failed_total                        rebuilds and resyncs given up
 * </pre>
 */
public final class BridgeMeters implements BridgeMetrics {
    private final MeterRegistry registry;

    public BridgeMeters(MeterRegistry registry) {
        this.registry = registry;
    }

    @Override
    public RemoteOpMetrics memserver(String label) {
        return new LinkMeters(label);
    }

    /** A memserver's gauges, from when the bridge uses it. */
    private void memserverGauges(MemserverLink l) {
        Gauge.builder("rbridge.memserver.reachable", l, x -> x.connection() != null ? 1 : 0)
                .tag("memserver", l.label()).description("1 when the memserver is connected and usable")
                .strongReference(true).register(registry);
        Gauge.builder("rbridge.memserver.evacuating", l, x -> x.draining() ? 1 : 0)
                .tag("memserver", l.label())
                .description("1 while its replicas are moved off, and after a memserver that drained itself was let go")
                .strongReference(true).register(registry);
        Gauge.builder("rbridge.memserver.free.reported", l, MemserverLink::freeBytes).baseUnit("bytes")
                .tag("memserver", l.label())
                .description("Free capacity the memserver last reported, less this bridge's grants since")
                .strongReference(true).register(registry);
        Gauge.builder("rbridge.remote.ops.in.flight", l, x -> x.inFlight.get()).tag("memserver", l.label())
                .description("Remote operations issued and not complete").strongReference(true)
                .register(registry);
    }

    /** A memserver the bridge stopped using: its series go, so no alert watches a memserver nobody uses. */
    private void forgetMemserver(MemserverLink l) {
        for (io.micrometer.core.instrument.Meter m : java.util.List.copyOf(registry.getMeters())) {
            String n = m.getId().getName();
            boolean ours = n.equals("rbridge.memserver.reachable") || n.equals("rbridge.memserver.free.reported")
                    || n.equals("rbridge.memserver.evacuating")
                    || n.startsWith("rbridge.remote."); // not an embedded memserver's own series (demo)
            if (ours && l.label().equals(m.getId().getTag("memserver"))) {
                registry.remove(m);
            }
        }
    }

    /** Registers the gauges read from a started bridge. */
    public void bind(Bridge bridge) {
        bridge.memservers().forEach(this::memserverGauges);
        bridge.onMembership(this::memserverGauges, this::forgetMemserver);
        for (Volume v : bridge.volumes()) {
            String name = v.spec().name();
            Gauge.builder("rbridge.volume.size", v, x -> x.spec().size()).baseUnit("bytes").tag("export", name)
                    .description("Volume size").strongReference(true).register(registry);
            Gauge.builder("rbridge.volume.replicas", v, x -> x.spec().replicas()).tag("export", name)
                    .description("Configured replicas per slab").strongReference(true).register(registry);
            Gauge.builder("rbridge.volume.fenced", v, x -> x.fenced() != null ? 1 : 0).tag("export", name)
                    .description("1 when this bridge lost the volume's lease to another client and fails every "
                            + "request on it with EIO")
                    .strongReference(true).register(registry);
            FunctionCounter.builder("rbridge.volume.enospc", v, Volume::outOfSpaceFailures).tag("export", name)
                    .description("Requests failed with ENOSPC because no memserver had room for a slab they needed")
                    .register(registry);
            FunctionCounter.builder("rbridge.volume.read.hedges", v, Volume::readHedges).tag("export", name)
                    .description("Reads sent to a second replica because the first had not answered within the hedge"
                            + " delay")
                    .register(registry);
            FunctionCounter.builder("rbridge.volume.read.hedges.won", v, Volume::readHedgesWon).tag("export", name)
                    .description("Hedged reads the second replica answered first").register(registry);
            Gauge.builder("rbridge.volume.read.hedge.delay", v, x -> x.hedgeDelayNanos() / 1e9).baseUnit("seconds")
                    .tag("export", name).description("How long a small read may take before it is hedged: the 95th "
                            + "percentile of recent reads")
                    .strongReference(true).register(registry);
            CachedStatus status = new CachedStatus(v);
            for (SlabState state : SlabState.values()) {
                Gauge.builder("rbridge.volume.slabs", status, s -> s.count(state)).tag("export", name)
                        .tag("state", state.label()).description("Slabs of the volume by replica state")
                        .strongReference(true).register(registry);
            }
        }
        Gauge.builder("rbridge.bridge.provisioned", bridge, b -> b.commitment().provisionedBytes()).baseUnit("bytes")
                .description("What the volumes need when every byte is written: sizes times replicas, summed")
                .strongReference(true).register(registry);
        Gauge.builder("rbridge.bridge.capacity.live", bridge, b -> b.commitment().liveCapacityBytes())
                .baseUnit("bytes").description("What the memservers up lend: their capacities, summed")
                .strongReference(true).register(registry);
        Rebuilder r = bridge.rebuilder();
        Gauge.builder("rbridge.rebuild.queue.slabs", r, Rebuilder::queued)
                .description("Slabs waiting for a rebuild or resync").strongReference(true).register(registry);
        Gauge.builder("rbridge.rebuild.remaining", r, Rebuilder::remainingBytes).baseUnit("bytes")
                .description("Bytes still to copy: the rest of the slab being copied and every queued slab")
                .strongReference(true).register(registry);
        Gauge.builder("rbridge.rebuild.active", r, x -> x.current() != null ? 1 : 0)
                .description("1 while a slab is being copied").strongReference(true).register(registry);
        counter("rbridge.rebuild.copied", r, Rebuilder::copiedBytes, "bytes",
                "Bytes copied into new or resynchronized replicas");
        counter("rbridge.rebuild.zeroed", r, Rebuilder::zeroedBytes, "bytes",
                "Of the bytes copied, those that held only zeroes and were sent as ZERO (no memory used for them)");
        FunctionCounter.builder("rbridge.rebuild.completed", r, Rebuilder::rebuildsDone).tag("kind", "rebuild")
                .description("Rebuilds and resyncs finished").register(registry);
        FunctionCounter.builder("rbridge.rebuild.completed", r, Rebuilder::resyncsDone).tag("kind", "resync")
                .description("Rebuilds and resyncs finished").register(registry);
        counter("rbridge.rebuild.failed", r, Rebuilder::copiesFailed, null, "Rebuilds and resyncs given up");
    }

    private <T> void counter(String name, T obj, ToDoubleFunction<T> f, String unit, String description) {
        FunctionCounter.builder(name, obj, f).baseUnit(unit).description(description).register(registry);
    }

    /** One pass over the slabs per scrape, not one per gauge. */
    private static final class CachedStatus {
        private final Volume volume;
        private Volume.VolumeStatus last;
        private long readAtNanos;

        CachedStatus(Volume volume) {
            this.volume = volume;
        }

        synchronized double count(SlabState state) {
            long now = System.nanoTime();
            if (last == null || now - readAtNanos > TimeUnit.MILLISECONDS.toNanos(200)) {
                last = volume.status();
                readAtNanos = now;
            }
            return last.count(state);
        }
    }

    private final class LinkMeters implements RemoteOpMetrics {
        private final Counter[] ops = new Counter[Op.values().length];
        private final Counter[] bytes = new Counter[Op.values().length];
        private final Counter[] errors = new Counter[Op.values().length];
        private final Timer[] durations = new Timer[Op.values().length];

        LinkMeters(String memserver) {
            for (Op op : Op.values()) {
                int i = op.ordinal();
                ops[i] = Counter.builder("rbridge.remote.ops").tag("memserver", memserver).tag("op", op.label())
                        .description("Remote data-path operations completed").register(registry);
                bytes[i] = Counter.builder("rbridge.remote.bytes").baseUnit("bytes").tag("memserver", memserver)
                        .tag("op", op.label()).description("Bytes read, written or zeroed remotely").register(registry);
                errors[i] = Counter.builder("rbridge.remote.errors").tag("memserver", memserver).tag("op", op.label())
                        .description("Remote operations that failed").register(registry);
                durations[i] = Timer.builder("rbridge.remote.op.duration").tag("memserver", memserver)
                        .tag("op", op.label()).description("Remote operation time from issue to completion")
                        .serviceLevelObjectives(Buckets.LATENCY).publishPercentileHistogram(false)
                        .register(registry);
            }
        }

        @Override
        public void completed(Op op, long n, long nanos, boolean failed) {
            int i = op.ordinal();
            ops[i].increment();
            durations[i].record(nanos, TimeUnit.NANOSECONDS);
            if (failed) {
                errors[i].increment();
            } else {
                bytes[i].increment(n);
            }
        }
    }
}
