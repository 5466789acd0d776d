package dev.rbridge.memserver;

import dev.rbridge.common.Printable;
import dev.rbridge.rdma.RegionTag;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * The drained takeover: before a grant in a new epoch of a volume is answered, every operation on the volume's regions
 * under an older epoch must have ended. The keys have rotated already, so no operation can start with an old key; the
 * ones in flight (a WRITE whose data is still arriving from a paused or cut-off holder, a READ being sent) belong to
 * connections that are fenced from now on, which are cut off so that what they still send never reaches region
 * memory, and waited for until they released the memory they pinned.
 */
final class TakeoverDrain {
    private static final Logger log = LoggerFactory.getLogger(TakeoverDrain.class);

    private TakeoverDrain() {}

    /** The operations in flight on {@code volume}'s regions from connections other than {@code grantee}. */
    static List<RegionPin> inFlight(Collection<ClientSession> clients, String volume, ClientSession grantee) {
        List<RegionPin> out = new ArrayList<>();
        for (ClientSession other : clients) {
            if (other != grantee) {
                other.pins.addOn(volume, out);
            }
        }
        return out;
    }

    /**
     * Cuts off the connections that hold {@code pins} and waits, up to {@code timeoutMillis}, for the pins to close: a
     * transfer blocked on its socket ends when the socket closes. Whether they all closed.
     */
    static boolean drained(String volume, long epoch, List<RegionPin> pins, long timeoutMillis) {
        Set<ClientSession> holders = new LinkedHashSet<>();
        for (RegionPin p : pins) {
            holders.add(p.client);
        }
        String v = Printable.cut(volume, RegionTag.MAX_VOLUME_NAME);
        for (ClientSession h : holders) {
            log.info("volume '{}': epoch {} granted; client {} '{}' at {} still has operations in flight on it under "
                    + "an older epoch: disconnecting it (fenced)", v, epoch, h.id, h.name, h.peer);
            Runnable cut = h.disconnect;
            if (cut != null) {
                cut.run();
            }
        }
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
        for (RegionPin p : pins) {
            if (!p.awaitClosed(deadline)) {
                log.warn("volume '{}': an operation of client {} under an older epoch did not end within {} ms of its "
                        + "connection being cut; epoch {} not granted", v, p.client.id, timeoutMillis, epoch);
                return false;
            }
        }
        return true;
    }
}
