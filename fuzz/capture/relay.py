#!/usr/bin/env python3
"""A recording TCP relay: listens on a port, connects each client to the server, forwards both ways and writes what
each side sent to its own file (DIR/NNN.c2s and DIR/NNN.s2c, one pair per connection). The captures seed the fuzz
corpora (make-seeds.py). Usage: relay.py LISTEN_PORT SERVER_HOST SERVER_PORT DIR"""
import os
import socket
import sys
import threading


def pump(src, dst, out):
    with open(out, "wb") as f:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            f.write(data)
            try:
                dst.sendall(data)
            except OSError:
                break
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main():
    port, host, server_port, folder = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.makedirs(folder, exist_ok=True)
    listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
    n = 0
    while True:
        client, _ = listener.accept()
        server = socket.create_connection((host, server_port))
        base = os.path.join(folder, "%03d" % n)
        n += 1
        for a, b, suffix in ((client, server, ".c2s"), (server, client, ".s2c")):
            threading.Thread(target=pump, args=(a, b, base + suffix), daemon=True).start()


if __name__ == "__main__":
    main()
