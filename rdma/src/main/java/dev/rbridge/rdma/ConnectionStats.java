package dev.rbridge.rdma;

import java.util.concurrent.atomic.LongAdder;

/**
 * Per-connection counters in the style of krping: control messages and bytes sent and received, one-sided reads and
 * writes with their bytes. Cheap enough for the data path; read them any time.
 */
public final class ConnectionStats {
    public final LongAdder sendMessages = new LongAdder();
    public final LongAdder sendBytes = new LongAdder();
    public final LongAdder recvMessages = new LongAdder();
    public final LongAdder recvBytes = new LongAdder();
    public final LongAdder readOps = new LongAdder();
    public final LongAdder readBytes = new LongAdder();
    public final LongAdder writeOps = new LongAdder();
    public final LongAdder writeBytes = new LongAdder();

    public Snapshot snapshot() {
        return new Snapshot(sendMessages.sum(), sendBytes.sum(), recvMessages.sum(), recvBytes.sum(), readOps.sum(),
                readBytes.sum(), writeOps.sum(), writeBytes.sum());
    }

    /** Adds a snapshot's figures to these counters (for example a departed connection's, into a running total). */
    public void add(Snapshot s) {
        sendMessages.add(s.sendMessages);
        sendBytes.add(s.sendBytes);
        recvMessages.add(s.recvMessages);
        recvBytes.add(s.recvBytes);
        readOps.add(s.readOps);
        readBytes.add(s.readBytes);
        writeOps.add(s.writeOps);
        writeBytes.add(s.writeBytes);
    }

    public record Snapshot(long sendMessages, long sendBytes, long recvMessages, long recvBytes, long readOps,
            long readBytes, long writeOps, long writeBytes) {
        public Snapshot plus(Snapshot o) {
            return new Snapshot(sendMessages + o.sendMessages, sendBytes + o.sendBytes, recvMessages + o.recvMessages,
                    recvBytes + o.recvBytes, readOps + o.readOps, readBytes + o.readBytes, writeOps + o.writeOps,
                    writeBytes + o.writeBytes);
        }
    }
}
