package dev.rbridge.nbd.protocol;

/** The 32-bit client flags that open the fixed-newstyle handshake. */
public record ClientFlags(int flags) implements HandshakeMessage {
    public boolean fixedNewstyle() {
        return (flags & Nbd.FLAG_C_FIXED_NEWSTYLE) != 0;
    }

    public boolean noZeroes() {
        return (flags & Nbd.FLAG_C_NO_ZEROES) != 0;
    }
}
