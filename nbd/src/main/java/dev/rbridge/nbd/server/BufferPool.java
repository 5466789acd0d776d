package dev.rbridge.nbd.server;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Direct buffers for request payloads and read data, in power-of-two size classes from 4 KiB to the largest payload,
 * carved from a few large blocks of {@link PayloadMemory}: buffers under {@link #BLOCK_BYTES} from blocks of that
 * size, larger ones from a block each. Few long-lived blocks are what a NIC wants (each is registered once, when it
 * is made, never per request), and allocating a buffer per request would zero it and take a global lock.
 *
 * <p>Each class keeps its idle buffers as a stack, so the most recently released (cache-warm) buffer is reused first
 * and blocks nobody needed lately end up wholly idle. Memory held is bounded by what was in use at once (a class gets
 * a new block only when it has no idle buffer) plus one block per class. {@link #trim} gives whole idle blocks back
 * while more than {@code retainBytes} are idle; the NBD server's housekeeper calls it, never a request's thread.
 *
 * <p>Every buffer starts {@link #PAGE_OFFSET} bytes into a page, not at its start. The kernel copies a reply's data
 * into socket memory right behind the reply's header, a few bytes into a page; copying from a source at almost the
 * same offset within its page, each load waits for the store just before it to the same low address bits (4K
 * aliasing), and large reads lost a third of their speed (bench/README.md has the measurements). Half a page is as
 * far as a source can be from any header's end.
 */
public final class BufferPool {
    private static final int MIN_SHIFT = 12;
    /** The block size for buffers smaller than it (2 MiB: one huge page where the memory has them). */
    public static final int BLOCK_BYTES = 2 << 20;
    /** Where in its page every buffer starts (see above). */
    public static final int PAGE_OFFSET = 2048;
    private static final int PAGE = 4096;

    private final PayloadMemory memory;
    private final ConcurrentLinkedDeque<ByteBuffer>[] idle;
    /** Per class: held while a block is carved or the class is trimmed, so neither races the other. */
    private final Object[] carving;
    private final long retainBytes;
    private final AtomicLong idleBytes = new AtomicLong();
    private final AtomicLong heldBytes = new AtomicLong();
    private final ConcurrentSkipListMap<Long, Block> blocks = new ConcurrentSkipListMap<>();

    /** {@code bytes} allocated at {@code address}, carved into {@code buffers} buffers of {@code size}. */
    private record Block(ByteBuffer memory, long address, int bytes, int buffers, int size) {
        boolean holds(long at) {
            return at >= address && at < address + bytes;
        }
    }

    public BufferPool(int maxBufferSize, long retainBytes) {
        this(maxBufferSize, retainBytes, PayloadMemory.DIRECT);
    }

    @SuppressWarnings({"unchecked", "rawtypes"}) // an array of a generic type is made raw
    public BufferPool(int maxBufferSize, long retainBytes, PayloadMemory memory) {
        int maxShift = 32 - Integer.numberOfLeadingZeros(Math.max(maxBufferSize, 1 << MIN_SHIFT) - 1);
        this.idle = new ConcurrentLinkedDeque[maxShift - MIN_SHIFT + 1];
        this.carving = new Object[idle.length];
        for (int i = 0; i < idle.length; i++) {
            idle[i] = new ConcurrentLinkedDeque<>();
            carving[i] = new Object();
        }
        this.retainBytes = retainBytes;
        this.memory = memory;
    }

    /** A direct buffer with position 0 and limit {@code length}. */
    public ByteBuffer acquire(int length) {
        int index = classIndex(length);
        if (index >= idle.length) {
            return ByteBuffer.allocateDirect(length); // larger than any class: not kept after release
        }
        ByteBuffer b = idle[index].pollFirst();
        if (b == null) {
            b = carve(index);
        } else {
            idleBytes.addAndGet(-b.capacity());
        }
        return b.clear().limit(length);
    }

    /** A buffer of class {@code index} from a new block; the block's other buffers become idle. */
    private ByteBuffer carve(int index) {
        synchronized (carving[index]) {
            ByteBuffer b = idle[index].pollFirst(); // carved or trimmed back meanwhile
            if (b != null) {
                idleBytes.addAndGet(-b.capacity());
                return b;
            }
            int size = 1 << (index + MIN_SHIFT);
            int carved = Math.max(size, BLOCK_BYTES);
            int bytes = carved + PAGE; // room to start every buffer PAGE_OFFSET into its page
            ByteBuffer block = memory.allocate(bytes);
            long address = address(block);
            int buffers = carved / size;
            blocks.put(address, new Block(block, address, bytes, buffers, size));
            heldBytes.addAndGet((long) buffers * size);
            for (int i = 1; i < buffers; i++) {
                idle[index].offerLast(block.slice(PAGE_OFFSET + i * size, size));
            }
            idleBytes.addAndGet((long) (buffers - 1) * size);
            return block.slice(PAGE_OFFSET, size);
        }
    }

    /** The capacity of the buffer {@link #acquire} returns for {@code length}: what it holds in memory. */
    public int capacityFor(int length) {
        int index = classIndex(length);
        return index >= idle.length ? length : 1 << (index + MIN_SHIFT);
    }

    public void release(ByteBuffer b) {
        if (b == null || !b.isDirect()) {
            return;
        }
        int index = classIndex(b.capacity());
        if (index >= idle.length || b.capacity() != 1 << (index + MIN_SHIFT)) {
            return;
        }
        idle[index].offerFirst(b);
        idleBytes.addAndGet(b.capacity());
    }

    /**
     * Frees whole idle blocks, largest classes first, while more than {@code retainBytes} are idle; drops idle
     * buffers that are not from a block of this pool. Blocks with a buffer in use stay.
     */
    public void trim() {
        for (int index = idle.length - 1; index >= 0 && idleBytes.get() > retainBytes; index--) {
            trim(index);
        }
    }

    private void trim(int index) {
        // A look first, taking nothing: while a class is drained below, acquire() waits in carve(), and most of the
        // time no block is wholly idle.
        Map<Block, Integer> idlePerBlock = new IdentityHashMap<>();
        boolean foreign = false;
        for (ByteBuffer x : idle[index]) {
            Block block = blockOf(x);
            if (block == null) {
                foreign = true;
            } else {
                idlePerBlock.merge(block, 1, Integer::sum);
            }
        }
        if (!foreign && idlePerBlock.entrySet().stream().noneMatch(e -> e.getValue() == e.getKey().buffers())) {
            return;
        }
        synchronized (carving[index]) {
            List<ByteBuffer> taken = new ArrayList<>();
            List<Block> from = new ArrayList<>(); // each taken buffer's block, looked up once, before any is freed
            Map<Block, Integer> count = new IdentityHashMap<>();
            ByteBuffer b;
            while ((b = idle[index].pollFirst()) != null) {
                Block block = blockOf(b);
                if (block == null) {
                    idleBytes.addAndGet(-b.capacity());
                    continue;
                }
                taken.add(b);
                from.add(block);
                count.merge(block, 1, Integer::sum);
            }
            Map<Block, Boolean> freed = new IdentityHashMap<>();
            try {
                for (Map.Entry<Block, Integer> e : count.entrySet()) {
                    Block block = e.getKey();
                    if (e.getValue() == block.buffers() && idleBytes.get() > retainBytes) {
                        blocks.remove(block.address());
                        idleBytes.addAndGet(-(long) block.buffers() * block.size());
                        heldBytes.addAndGet(-(long) block.buffers() * block.size());
                        freed.put(block, true);
                        memory.free(block.memory());
                    }
                }
            } finally { // even when a free failed: the other buffers go back, in their order
                for (int i = 0; i < taken.size(); i++) {
                    if (!freed.containsKey(from.get(i))) {
                        idle[index].offerLast(taken.get(i));
                    }
                }
            }
        }
    }

    private Block blockOf(ByteBuffer b) {
        long at = address(b);
        Map.Entry<Long, Block> e = blocks.floorEntry(at);
        return e != null && e.getValue().holds(at) ? e.getValue() : null;
    }

    private static long address(ByteBuffer b) {
        return MemorySegment.ofBuffer(b).address();
    }

    /** Bytes of idle buffers. */
    public long idleBytes() {
        return idleBytes.get();
    }

    /**
     * Bytes of every buffer carved from a block held, in use and idle: with everything released it equals
     * {@link #idleBytes}. Each block also holds a page for the buffers' offset, not counted here.
     */
    public long heldBytes() {
        return heldBytes.get();
    }

    private static int classIndex(int length) {
        if (length <= 1 << MIN_SHIFT) {
            return 0;
        }
        return 32 - Integer.numberOfLeadingZeros(length - 1) - MIN_SHIFT;
    }
}
