package dev.rbridge.rdma;

import java.lang.foreign.MemorySegment;
import java.net.SocketAddress;
import java.util.List;

/**
 * The target side of a provider: what the memserver gives a listener so that the transport can serve one-sided
 * operations straight from region memory (as an RDMA NIC would) and pass control messages up.
 */
public interface RegionService {

    /**
     * Admits a client or refuses it ({@code AUTH_FAILED}, {@code SHUTTING_DOWN}); refusals are logged and counted by
     * the service.
     */
    Session open(Credential credential, String clientName, SocketAddress peer) throws RemoteMemoryException;

    /**
     * The memserver's proof that it knows the token ({@link dev.rbridge.rdma.TokenProof#server} over
     * {@code transcript}), for a client admitted by a {@link Credential.Proof}; null when the service has no token.
     */
    byte[] proveToken(byte[] transcript);

    /** What a client shows to be admitted. */
    sealed interface Credential {
        /** Whether it shows knowledge of {@code token}; compared in constant time. */
        boolean matches(String token);

        /** The token itself: the HELLO of clients that predate AUTH. */
        record Token(String token) implements Credential {
            @Override
            public boolean matches(String expected) {
                return java.security.MessageDigest.isEqual(expected.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                        token.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            }

            @Override
            public String toString() {
                return "Token[(withheld)]";
            }
        }

        /** A proof over the greeting's transcript ({@link dev.rbridge.rdma.TokenProof#client}): AUTH. */
        record Proof(byte[] transcript, byte[] proof) implements Credential {
            @Override
            public boolean matches(String token) {
                return dev.rbridge.rdma.TokenProof.matches(dev.rbridge.rdma.TokenProof.client(token,
                        transcript), proof);
            }
        }
    }

    /**
     * The transport turned a peer away before {@link #open} (it speaks another protocol version, or sent garbage
     * where its greeting belonged, or no greeting in time, or a connection limit was reached), or after it (no memory
     * for its buffers); the transport has logged why, rate-limited. For counting only.
     *
     * @param reason a short label: {@code version}, {@code malformed}, {@code hello_timeout}, {@code no_memory},
     *               {@code accept_failed}, or one of {@link ConnectionGate}'s
     */
    default void refused(String reason, SocketAddress peer) {}

    /** One admitted client. Methods may be called from the connection's thread only. */
    interface Session {
        ServerInfo serverInfo();

        /** What the memserver is doing, for STATE. */
        default ServerState state() {
            return ServerState.SERVING;
        }

        RegionDescriptor allocate(RegionTag tag, long length) throws RemoteMemoryException;

        RegionDescriptor open(long regionId) throws RemoteMemoryException;

        /**
         * Every region, keys withheld, for use within this process (the local transport, a provider's own checks):
         * built under one of the service's few listing places, given back when this returns.
         */
        List<RegionInfo> list();

        /**
         * Every region, keys withheld, for a reply to the client: the listing holds its listing place until closed,
         * so that at most a few listings are in memory at once, however many clients ask and however slowly they
         * read. Close it as soon as its entries are written out; a transport bounds how long that may take (a client
         * that does not read its reply within the hello timeout is disconnected), so no client holds a place for
         * long. Fails with {@code NO_CAPACITY} when no place frees up within a short wait.
         */
        Listing listing() throws RemoteMemoryException;

        void release(long regionId, long key) throws RemoteMemoryException;

        /** See {@link RemoteConnection#retag}: key-checked, same volume only, refused to non-holders of its lease. */
        RegionDescriptor retag(long regionId, long key, RegionTag tag) throws RemoteMemoryException;

        /** See {@link RemoteConnection#lease}; the lease belongs to this session until it ends or lapses. */
        Lease lease(String volume, String owner, long ttlMillis) throws RemoteMemoryException;

        /** As {@link #lease(String, String, long)}, with the lease id the client presents (see RemoteConnection). */
        default Lease lease(String volume, String owner, long ttlMillis, long leaseId) throws RemoteMemoryException {
            return lease(volume, owner, ttlMillis);
        }

        /** See {@link RemoteConnection#unlease}: a no-op unless {@code owner} holds the volume's lease. */
        void unlease(String volume, String owner) throws RemoteMemoryException;

        /** As {@link #unlease(String, String)}, with the grant's lease id, checked when given. */
        default void unlease(String volume, String owner, long leaseId) throws RemoteMemoryException {
            unlease(volume, owner);
        }

        /**
         * Pins {@code [offset, offset + length)} of a region for one data operation after checking the key and the
         * range. The memory stays mapped until the returned pin is closed, even if the region is released or
         * revoked meanwhile.
         */
        Pin pin(long regionId, long key, long offset, long length) throws RemoteMemoryException;

        /**
         * Zeroes a range: whole pages go back to the system, unless a device holds the region's memory ({@link
         * Pin#heldByDevice}), where it is filled with zeroes instead. The memserver decides, for every transport.
         */
        void zero(long regionId, long key, long offset, long length) throws RemoteMemoryException;

        /**
         * Called once the client is admitted: the transport's counters for it (for admin and metrics), and how to cut
         * its connection (an operator's disconnect).
         */
        void attach(ConnectionStats stats, Runnable disconnect);

        /** The connection ended (either side). */
        void closed();
    }

    /** See {@link Session#listing()}. */
    interface Listing extends AutoCloseable {
        List<RegionInfo> regions();

        /** Gives the listing place back. Idempotent. */
        @Override
        void close();
    }

    /**
     * Region memory held for one operation. Transports report what they write ({@link #wrote}) and serve reads run
     * by run ({@link #runs}): memory never written reads as zeroes and is best sent as zeroes without touching it,
     * since on some kernels reading an untouched page backs it with RAM.
     */
    interface Pin extends AutoCloseable {
        MemorySegment memory();

        /** The transport has put data into the whole pinned range: reads return it from now on. */
        default void wrote() {}

        /**
         * Covers the pinned range with consecutive runs, in order, each holding written data or never written (reads
         * as zeroes): {@code visitor} gets each run's offset within the pin, length, and which it is.
         */
        default void runs(RunVisitor visitor) {
            visitor.run(0, memory().byteSize(), true);
        }

        /**
         * The pinned memory is handed to something that writes it without reporting (one-sided RDMA from a NIC):
         * from now on the whole region counts as written.
         */
        default void exposed() {}

        /**
         * As {@link #exposed}, and the memory is registered with a device that holds its pages for as long as this
         * pin is open (an RDMA NIC: a registration pins the physical pages and the NIC reads and writes them on its
         * own). While it does, the memserver must not give the region's pages back to the system: the device would
         * go on using the old pages while the process got fresh ones. A registration that pins nothing (UCX's
         * emulated transports, tcp or shared memory, whose copies the memserver's own thread makes through the page
         * tables) is only {@link #exposed}.
         */
        default void heldByDevice() {
            exposed();
        }

        @Override
        void close();
    }

    /** See {@link Pin#runs}. */
    @FunctionalInterface
    interface RunVisitor {
        void run(long offset, long length, boolean written);
    }
}
