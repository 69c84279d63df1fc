#!/usr/bin/python3
"""Record what NBD clients send: a proxy between a Unix socket that clients
connect to and the real server's socket.  Each connection's client bytes
go to OUTDIR/conn-N.bin (N counts from 1), byte for byte; the server's
bytes are passed on unrecorded.  Used by tests/fuzz/mkcorpus to make seeds
from real clients.

    capture.py LISTEN_SOCKET SERVER_SOCKET OUTDIR

Runs until killed.
"""
import os
import selectors
import socket
import sys
import threading


def pump(client, server, path):
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ, "c")
    sel.register(server, selectors.EVENT_READ, "s")
    with open(path, "wb") as rec:
        open_ends = 2
        while open_ends:
            for key, _ in sel.select():
                src = key.fileobj
                dst = server if key.data == "c" else client
                try:
                    data = src.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(src)
                    open_ends -= 1
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                if key.data == "c":
                    rec.write(data)
                    rec.flush()
                try:
                    dst.sendall(data)
                except OSError:
                    pass
    client.close()
    server.close()


def main():
    listen_path, server_path, outdir = sys.argv[1:4]
    os.makedirs(outdir, exist_ok=True)
    if os.path.exists(listen_path):
        os.unlink(listen_path)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(listen_path)
    ls.listen(16)
    n = 0
    while True:
        client, _ = ls.accept()
        n += 1
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.connect(server_path)
        path = os.path.join(outdir, "conn-%d.bin" % n)
        threading.Thread(target=pump, args=(client, server, path), daemon=True).start()


if __name__ == "__main__":
    main()
