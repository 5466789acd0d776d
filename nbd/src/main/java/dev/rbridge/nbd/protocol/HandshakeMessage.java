package dev.rbridge.nbd.protocol;

/** What {@link HandshakeDecoder} emits: first the client flags, then one {@link OptionRequest} per option. */
public sealed interface HandshakeMessage permits ClientFlags, OptionRequest {}
