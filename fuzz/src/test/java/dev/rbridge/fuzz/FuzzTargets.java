package dev.rbridge.fuzz;

import java.util.List;

/** Every fuzz target: its short name (bench/fuzz.sh --target) and the @FuzzTest method it runs. */
public final class FuzzTargets {
    public record Target(String name, String testClass, String method) {
    }

    public static final List<Target> ALL = List.of(
            new Target("nbd-handshake", "dev.rbridge.nbd.protocol.HandshakeDecoderFuzzTest", "decode"),
            new Target("nbd-request", "dev.rbridge.nbd.protocol.RequestDecoderFuzzTest", "decode"),
            new Target("control-memserver", "dev.rbridge.rdma.wire.MessageDecoderFuzzTest", "memserverSide"),
            new Target("control-client", "dev.rbridge.rdma.wire.MessageDecoderFuzzTest", "clientSide"),
            new Target("netlink", "dev.rbridge.kmod.attach.NetlinkAttributesFuzzTest", "parse"),
            new Target("netlink-datagram", "dev.rbridge.kmod.attach.GenericNetlinkFuzzTest", "datagram"),
            new Target("http-request", "dev.rbridge.ops.http.HttpRequestDecoderFuzzTest", "decode"),
            new Target("json", "dev.rbridge.ops.json.JsonFuzzTest", "parse"),
            new Target("volume-spec", "dev.rbridge.cli.CliParsersFuzzTest", "volumeSpec"),
            new Target("sizes", "dev.rbridge.cli.CliParsersFuzzTest", "sizes"),
            new Target("endpoints", "dev.rbridge.cli.CliParsersFuzzTest", "endpoints"),
            new Target("config-file", "dev.rbridge.cli.CliParsersFuzzTest", "configFile"));

    private FuzzTargets() {}
}
