#!/usr/bin/env python3
"""An NBD proxy (Unix sockets) in front of a server backed by FILE that
acts as a server with a volatile write cache: on command it "crashes",
losing every write it acknowledged since the last flush it forwarded.

    volatileproxy.py LISTEN TARGET FILE DIR

Requests and replies are forwarded as they are.  Before forwarding a
write, trim or write-zeroes without FUA, the proxy saves the bytes of FILE
it is about to change (an undo record); a flush forgets the records of the
requests before it.  Controlled by files in DIR:

  holdflush  while it exists, flushes are not forwarded (they wait, and
             die with their connection if it crashes meanwhile);
  parkflush  the same, but the requests after a flush held so on its
             connection are forwarded meanwhile (it covers only those
             before it when it is forwarded);
  crash      every connection is closed (the client's side at once; the
             server's once it has answered what it was sent), the undo
             records are applied to FILE newest first, held flushes are
             dropped, and the file is replaced by DIR/crashed.

DIR/conns holds the number of connections accepted.
"""
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proxyctl import ControlDir  # noqa: E402

listen, target, path, d = sys.argv[1:5]
REQ_MAGIC = 0x25609513
OPT_MAGIC = b"IHAVEOPT"
CMD_WRITE, CMD_FLUSH, CMD_TRIM, CMD_ZEROES = 1, 3, 4, 6
FLAG_FUA = 1

lock = threading.Lock()
undo = []           # (sequence, offset, old bytes), oldest first
seq = [0]           # the next undo record's sequence
conns = []


ctl = ControlDir(d)
exists, put = ctl.exists, ctl.put


def save(off, n):
    with open(path, "rb") as f:
        f.seek(off)
        undo.append((seq[0], off, f.read(n)))
        seq[0] += 1


class Conn:
    def __init__(self, c, u):
        self.c, self.u = c, u
        self.dead = False
        self.server_done = threading.Event()


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        x = s.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return bytes(b)


def park(k, hdr, mark):
    """A flush held aside (parkflush): forwarded once parkflush is gone,
    forgetting the undo records from before it."""
    while exists("parkflush") and not k.dead:
        time.sleep(0.02)
    with lock:
        if k.dead:
            return
        undo[:] = [x for x in undo if x[0] >= mark]
        try:
            k.u.sendall(hdr)
        except OSError:
            pass


def up(k):
    c, u = k.c, k.u
    try:
        u.sendall(recv_exact(c, 4))                 # client flags
        while True:
            head = recv_exact(c, 8)
            if head == OPT_MAGIC:                   # handshake option
                rest = recv_exact(c, 8)
                _, n = struct.unpack(">II", rest)
                u.sendall(head + rest + recv_exact(c, n))
                continue
            hdr = head + recv_exact(c, 20)
            magic, flags, typ, _cookie, off, n = struct.unpack(">IHHQQI", hdr)
            if magic != REQ_MAGIC:
                raise EOFError
            data = recv_exact(c, n) if typ == CMD_WRITE else b""
            if typ == CMD_FLUSH and exists("parkflush"):
                with lock:
                    mark = seq[0]
                threading.Thread(target=park, args=(k, hdr, mark), daemon=True).start()
                continue
            if typ == CMD_FLUSH:
                while exists("holdflush") and not k.dead:
                    time.sleep(0.02)
            with lock:
                if k.dead:
                    break
                if typ in (CMD_WRITE, CMD_TRIM, CMD_ZEROES) and not flags & FLAG_FUA:
                    save(off, n)
                elif typ == CMD_FLUSH:
                    undo.clear()
                u.sendall(hdr + data)
    except (OSError, EOFError):
        pass
    try:
        u.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def down(k):
    c, u = k.c, k.u
    try:
        while True:
            data = u.recv(1 << 16)
            if not data:
                break
            if not k.dead:
                try:
                    c.sendall(data)
                except OSError:
                    pass
    except OSError:
        pass
    k.server_done.set()
    for s in (c, u):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def crasher():
    while True:
        time.sleep(0.05)
        if not exists("crash"):
            continue
        # One hold of the lock throughout: a client reconnecting at once
        # must not have a request forwarded before the lost writes are
        # undone (the undo would then also take back that request's write,
        # or put older data over it), as a server is not back before its
        # crash is over.  (The servers' answers need no lock.)
        with lock:
            victims = [k for k in conns if not k.dead]
            for k in victims:
                k.dead = True
                for how, s in ((socket.SHUT_RDWR, k.c), (socket.SHUT_WR, k.u)):
                    try:
                        s.shutdown(how)
                    except OSError:
                        pass
            for k in victims:
                k.server_done.wait(60)
            with open(path, "r+b") as f:
                for _, off, old in reversed(undo):
                    f.seek(off)
                    f.write(old)
            n = len(undo)
            undo.clear()
        os.unlink(os.path.join(d, "crash"))
        put("crashed", f"{n}\n")


threading.Thread(target=crasher, daemon=True).start()
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(listen)
srv.listen(16)
n = 0
while True:
    c, _ = srv.accept()
    n += 1
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(target)
    k = Conn(c, u)
    with lock:
        conns.append(k)
    threading.Thread(target=up, args=(k,), daemon=True).start()
    threading.Thread(target=down, args=(k,), daemon=True).start()
    put("conns", f"{n}\n")
