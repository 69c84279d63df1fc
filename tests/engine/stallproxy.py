#!/usr/bin/env python3
"""An NBD proxy (Unix sockets) that can make one connection stop answering.

    stallproxy.py LISTEN TARGET DIR

Connections are numbered from 1 in the order accepted; DIR/conns holds
the count.  Controlled by files in DIR:

  stallN     while it exists, connection N's replies are held back (its
             requests still reach the server);
  arm        holds an origin offset: the first connection that carries a
             write (NBD_CMD_WRITE) at that offset stops there -- that
             request and everything after it are held back from the server,
             and its replies from the client -- as a server stuck with the
             write would.  The file is removed and DIR/stalled holds the
             connection's number;
  release    the stopped connection goes on: the held requests reach the
             server (late: also when the client has closed the connection
             since, as a server that still executes what it had read), its
             replies flow, and once the server has answered the held write,
             DIR/released holds the number of request bytes sent late.
             A connection still open then carries on as before (a server
             that was only slow): DIR/released is written as the held
             requests are sent.

A connection the client closes is half-closed towards the server, whose
last replies are read and dropped (nbdkit 1.32 aborts when a reply meets a
closed socket); when the server closes it, so does the proxy.
"""
import os
import re
import select
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proxyctl import ControlDir  # noqa: E402

listen, target, d = sys.argv[1:4]
# A request header: magic, flags, type 1 (write), cookie, offset.
MAGIC = struct.pack(">I", 0x25609513)
HDR = 28


ctl = ControlDir(d)
exists, put = ctl.exists, ctl.put


class Conn:
    def __init__(self, n, c, u):
        self.n, self.c, self.u = n, c, u
        self.stopped = False        # by "arm": both directions held
        self.client_gone = False   # the client sent its last request
        self.released = False
        self.cookie = None          # of the held write, once sent late
        self.answered = threading.Event()   # ... and the server answered it
        self.lock = threading.Lock()


armed_lock = threading.Lock()


def armed_pattern():
    if not exists("arm"):
        return None
    try:
        off = int(open(os.path.join(d, "arm")).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return re.compile(re.escape(MAGIC) + b"..\x00\x01" + b"." * 8 + re.escape(struct.pack(">Q", off)),
                      re.DOTALL)


def wait_release():
    while not exists("release"):
        time.sleep(0.02)


def up(k):
    c, u = k.c, k.u
    pending = b""           # armed: the last bytes, not forwarded until more come
    held = bytearray()
    try:
        while True:
            if k.stopped and exists("release"):
                # Released while the client is still connected: a slow
                # server, not a stuck one.
                k.cookie = bytes(held[8:16])
                u.sendall(bytes(held))
                put("released", f"{len(held)}\n")
                held = bytearray()
                k.stopped = False
                k.released = True
                continue
            if k.stopped and not select.select([c], [], [], 0.05)[0]:
                continue
            if pending and not select.select([c], [], [], 0.05)[0]:
                if not k.stopped:
                    u.sendall(pending)
                pending = b""
                continue
            data = c.recv(1 << 16)
            if not data:
                break
            if k.stopped:
                held += data
                continue
            pat = armed_pattern()
            if pat is None:
                if pending:
                    u.sendall(pending)
                    pending = b""
                u.sendall(data)
                continue
            buf = pending + data
            m = pat.search(buf)
            if m:
                with armed_lock:
                    if exists("arm"):
                        os.unlink(os.path.join(d, "arm"))
                        k.stopped = True
                if k.stopped:
                    u.sendall(buf[:m.start()])
                    held += buf[m.start():]
                    pending = b""
                    put("stalled", f"{k.n}\n")
                    continue
            keep = min(len(buf), HDR - 1)
            u.sendall(buf[:len(buf) - keep])
            pending = buf[len(buf) - keep:]
    except OSError:
        pass
    k.client_gone = True
    try:
        if pending:
            u.sendall(pending)
        if k.stopped:
            wait_release()
            # The end of file only once the server has answered the write:
            # nbdkit refuses (ESHUTDOWN) a request it read but had not
            # started when another of its threads saw the end of file.
            k.cookie = bytes(held[8:16])
            u.sendall(bytes(held))
            k.answered.wait(60)
            k.released = True
            put("released", f"{len(held)}\n")
    except OSError:
        pass
    try:
        u.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def down(k):
    c, u = k.c, k.u
    tail = b""
    try:
        while True:
            data = u.recv(1 << 16)
            if not data:
                break
            if k.cookie and k.cookie in tail + data:
                k.answered.set()
            tail = data[-8:]
            while (exists(f"stall{k.n}") or
                   (k.stopped and not k.released and not exists("release"))) \
                    and not k.client_gone:
                time.sleep(0.02)
            try:
                c.sendall(data)
            except OSError:
                k.client_gone = True
    except OSError:
        pass
    for s in (c, u):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(listen)
srv.listen(16)
n = 0
while True:
    c, _ = srv.accept()
    n += 1
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(target)
    k = Conn(n, c, u)
    threading.Thread(target=up, args=(k,), daemon=True).start()
    threading.Thread(target=down, args=(k,), daemon=True).start()
    put("conns", f"{n}\n")
