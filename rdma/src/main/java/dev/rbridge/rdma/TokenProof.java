package dev.rbridge.rdma;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;

/**
 * Proving the token without sending it (AUTH, AUTH_PROOF). The client sends its name and a random nonce; the memserver
 * answers with a random nonce of its own; the client sends HMAC-SHA256(token, "rbridge client" || transcript), the
 * memserver checks it in constant time and answers with HMAC-SHA256(token, "rbridge server" || transcript), which the
 * client checks in turn. The transcript binds the client's name and both nonces. So a peer that listens, or a fake
 * memserver a client was pointed at, sees only MACs of nonces it cannot make a memserver repeat: nothing to replay, and
 * the client learns that whoever answered knows the token. What it does not stop: a man in the middle relaying a live
 * greeting, and guessing a weak token offline from a MAC; TLS on the control connection and a random token
 * ({@code openssl rand -hex 32}) do.
 */
public final class TokenProof {
    /** Bytes of each nonce. */
    public static final int NONCE = 32;
    /** Bytes of a proof (HMAC-SHA256). */
    public static final int PROOF = 32;
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final byte[] CLIENT = "rbridge client v1".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] SERVER = "rbridge server v1".getBytes(StandardCharsets.US_ASCII);

    private TokenProof() {}

    public static byte[] nonce() {
        byte[] n = new byte[NONCE];
        RANDOM.nextBytes(n);
        return n;
    }

    /** What both proofs are over: the client's name and both nonces, each with its length. */
    public static byte[] transcript(String clientName, byte[] clientNonce, byte[] serverNonce) {
        byte[] name = clientName.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(12 + name.length + clientNonce.length + serverNonce.length)
                .putInt(name.length).put(name).putInt(clientNonce.length).put(clientNonce)
                .putInt(serverNonce.length).put(serverNonce).array();
    }

    /** The client's proof over {@code transcript}. */
    public static byte[] client(String token, byte[] transcript) {
        return mac(token, CLIENT, transcript);
    }

    /** The memserver's proof over {@code transcript}. */
    public static byte[] server(String token, byte[] transcript) {
        return mac(token, SERVER, transcript);
    }

    /** Compares in time that does not depend on where they differ. */
    public static boolean matches(byte[] expected, byte[] presented) {
        return presented != null && MessageDigest.isEqual(expected, presented);
    }

    private static byte[] mac(String token, byte[] label, byte[] transcript) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(token.isEmpty() ? new byte[1] : token.getBytes(StandardCharsets.UTF_8),
                    "HmacSHA256"));
            m.update(label);
            return m.doFinal(transcript);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is missing from this JDK", e);
        }
    }
}
