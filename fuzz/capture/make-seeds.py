#!/usr/bin/env python3
"""Turns captures (capture.sh) into the fuzz targets' seed inputs, in the regression-input folders Jazzer replays:
fuzz/src/test/resources/<package>/<Test>Inputs/<method>/seed-*. Data payloads are cut to DATA bytes (their headers
say so) and every seed to MAX bytes, so seeds stay small and fast; the framing around them is as captured. Each seed
ends with the parameter bytes the target reads from the end of its input (4 per parameter, see
dev.rbridge.fuzz.Feeds), in two variants. Netlink and command-line seeds are built here from what the code sends
and what its documentation shows. Usage: make-seeds.py CAPTURE-DIR"""
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "test", "resources", "dev", "rbridge")
DATA = 256
MAX = 16 << 10
VARIANTS = (b"\x7f", b"\x10")  # each byte repeated 4 per parameter


def write(folder, name, data, params=0):
    path = os.path.join(ROOT, folder)
    os.makedirs(path, exist_ok=True)
    for i, v in enumerate(VARIANTS if params else (b"",)):
        with open(os.path.join(path, "seed-%s%s" % (name, "-%d" % i if params else "")), "wb") as f:
            f.write(data[:MAX] + v * (4 * params))


def nbd_split(c2s):
    """The handshake bytes (client flags and options up to GO or EXPORT_NAME) and the requests after it."""
    at = 4
    while at + 16 <= len(c2s):
        option, length = struct.unpack(">II", c2s[at + 8:at + 16])
        at += 16 + length
        if option in (1, 7):  # EXPORT_NAME, GO
            break
    return c2s[:at], c2s[at:]


def nbd_requests(stream):
    out = bytearray()
    at = 0
    while at + 28 <= len(stream):
        magic, flags, kind, handle, offset, length = struct.unpack(">IHHQQI", stream[at:at + 28])
        data = b""
        if kind == 1:  # WRITE
            data = stream[at + 28:at + 28 + length][:DATA]
            length = len(data)
            at += 28 + struct.unpack(">I", stream[at + 24:at + 28])[0]
        else:
            at += 28
        out += struct.pack(">IHHQQI", magic, flags, kind, handle, offset, length) + data
    return bytes(out + stream[at:])


def control(stream, data_code, data_after):
    """Messages as captured, the data of WRITE requests or READ replies cut to DATA bytes."""
    out = bytearray()
    at = 0
    while at + 24 <= len(stream):
        magic, version, code, mid, status, length = struct.unpack("<IHHQiI", stream[at:at + 24])
        body = stream[at + 24:at + 24 + length]
        if code == data_code and status == 0 and length > data_after + DATA:
            body = body[:data_after + DATA]
        out += struct.pack("<IHHQiI", magic, version, code, mid, status, len(body)) + body
        at += 24 + length
    return bytes(out + stream[at:])


def nla(kind, payload):
    n = 4 + len(payload)
    return struct.pack("<HH", n, kind) + payload + b"\0" * ((-n) % 4)


def main():
    cap = sys.argv[1]
    for f in sorted(os.listdir(os.path.join(cap, "nbd"))):
        if not f.endswith(".c2s"):
            continue
        data = open(os.path.join(cap, "nbd", f), "rb").read()
        if not data:
            continue
        name = f[:-4]
        handshake, requests = nbd_split(data)
        write("nbd/protocol/HandshakeDecoderFuzzTestInputs/decode", name, handshake, 3)
        if requests:
            write("nbd/protocol/RequestDecoderFuzzTestInputs/decode", name, nbd_requests(requests), 2)
    for f in sorted(os.listdir(os.path.join(cap, "control"))):
        data = open(os.path.join(cap, "control", f), "rb").read()
        if not data:
            continue
        if f.endswith(".c2s"):
            write("rdma/wire/MessageDecoderFuzzTestInputs/memserverSide", f[:-4], control(data, 17, 24), 2)
        else:
            write("rdma/wire/MessageDecoderFuzzTestInputs/clientSide", f[:-4], control(data, 16, 0), 2)
    for f in sorted(os.listdir(os.path.join(cap, "http"))):
        data = open(os.path.join(cap, "http", f), "rb").read()
        if f.endswith(".c2s"):
            write("ops/http/HttpRequestDecoderFuzzTestInputs/decode", f[:-4], data, 5)
            write("ops/http/HttpRequestDecoderFuzzTestInputs/decode", f[:-4] + "-pipelined", data * 3, 5)
        body = data.split(b"\r\n\r\n", 1)[-1]
        if body.strip():
            write("ops/json/JsonFuzzTestInputs/parse", f.replace(".", "-"), body)
    # Netlink: what attach sends (NBD_CMD_CONNECT's attributes, sockets nested) and what the kernel answers (a family
    # lookup with its multicast groups, a device list, a device index).
    u32 = lambda v: struct.pack("<I", v)
    u64 = lambda v: struct.pack("<Q", v)
    connect = (nla(1, u32(0)) + nla(2, u64(16 << 20)) + nla(3, u64(4096)) + nla(4, u64(30)) + nla(5, u64(0))
               + nla(7, nla(1, nla(1, u32(5))) + nla(1, nla(1, u32(6)))) + nla(10, b"nbd://127.0.0.1:10809/disk\0"))
    family = (nla(1, struct.pack("<H", 0x1b) + b"\0\0") + nla(2, b"nbd\0") + nla(3, u32(1)) + nla(4, u32(0))
              + nla(5, u32(8)) + nla(7, nla(1, nla(2, u32(0x17)) + nla(1, b"nbd_mc_group\0"))))
    devices = nla(8, nla(1, nla(1, u32(0)) + nla(2, b"\1")) + nla(1, nla(1, u32(1)) + nla(2, b"\0")))
    for name, data in (("connect", connect), ("family", family), ("device-list", devices), ("index", nla(1, u32(3))),
                       ("nested-flag", struct.pack("<HH", 12, 0x8007) + nla(1, u32(5)))):
        write("kmod/attach/NetlinkAttributesFuzzTestInputs/parse", name, data)
    # Whole datagrams as the socket receives them (GenericNetlinkFuzzTest): a reply to request 77 carrying the
    # attributes above, then the acknowledgement; an error (ENOENT, the family unknown); an event of the nbd family.
    def nlmsg(kind, seq, body):
        return struct.pack("<IHHII", 16 + len(body), kind, 0, seq, 0) + body + b"\0" * ((-len(body)) % 4)
    ack = lambda code: nlmsg(2, 77, struct.pack("<i", code) + nlmsg(0x10, 77, b"")[:16])
    for name, data in (("family", family), ("device-list", devices), ("index", nla(1, u32(3)))):
        write("kmod/attach/GenericNetlinkFuzzTestInputs/datagram", name + "-and-ack",
              nlmsg(0x1b, 77, b"\3\1\0\0" + data) + ack(0))
    write("kmod/attach/GenericNetlinkFuzzTestInputs/datagram", "error-enoent", ack(-2))
    write("kmod/attach/GenericNetlinkFuzzTestInputs/datagram", "event", nlmsg(0x1b, 0, b"\5\1\0\0" + nla(1, u32(0))))
    # The command line: examples from the documentation and deploy/.
    cli = "cli/CliParsersFuzzTestInputs/"
    for i, s in enumerate(["4096", "64K", "512M", "1G", "2GiB", "16T", "1P", "0", "8 MB", "3g"]):
        write(cli + "sizes", "%02d" % i, s.encode())
    for i, s in enumerate(["disk", "disk,size=64G,replicas=2", "name=vm1,size=1G,ro", "d,size=4G,slab=128M,min-block=4K",
                           "scratch,size=1G,replicas=1,description=for tests", "x,r=3,read-only"]):
        write(cli + "volumeSpec", "%02d" % i, s.encode())
    for i, s in enumerate(["127.0.0.1:7471", "10.0.0.5:7471", "[::1]:7471", "localhost", ":7471", "[fe80::1]"]):
        write(cli + "endpoints", "%02d" % i, s.encode())
    conf = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "config", "serve.conf")
    write(cli + "configFile", "serve-conf", open(conf, "rb").read())
    write(cli + "configFile", "memserver", b"listen = 0.0.0.0:7471\ncapacity = 8G\n# comment\ntransport = tcp\n")


if __name__ == "__main__":
    main()
