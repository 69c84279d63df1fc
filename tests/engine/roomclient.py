"""A client for the tests of writes needing room in a log full of dirty
data the origin refuses (origin-full-fs.test, origin-eio-room.test).

  roomclient.py write SOCK FIRST COUNT GEN [STRIDE]
      64 KiB blocks FIRST, FIRST+STRIDE, ... (COUNT of them) of generation
      GEN, a flush after every 16, until a write fails.  Each write is
      given 60 s, far beyond any wait a working cache makes: a write with
      no reply by then exits 2.  A failed write is noted in failed.txt; the
      writes acknowledged and flushed before it are appended to acked.txt.
      Prints "N OUTCOME SECONDS": N blocks acknowledged, "ok" or the
      failed write's error (ENOSPC, EIO), and how long it waited.
  roomclient.py bigwrite SOCK FIRST COUNT GEN
      one write request of COUNT blocks; prints "ok" or its error.
  roomclient.py verify SOCK
      every block in acked.txt reads back as its last generation; every
      block of failed.txt never acknowledged reads as zeroes (nothing of
      a failed write is stored).
  roomclient.py origin FILE
      the origin file holds every block in acked.txt.
"""
import sys
import time

import nbd

B = 65536


def pat(i, g):
    if g == 0:
        return bytes(B)
    return bytes([g, i & 255, (i >> 8) & 255, 0xA5]) * (B // 4)


def errname(e):
    return {5: "EIO", 28: "ENOSPC"}.get(e.errno, str(e.errno))


def model():
    last = {}
    try:
        for line in open("acked.txt"):
            i, g = map(int, line.split())
            last[i] = g
    except FileNotFoundError:
        pass
    failed = set()
    try:
        failed = {int(line) for line in open("failed.txt")}
    except FileNotFoundError:
        pass
    return last, failed


def connect(sock):
    h = nbd.NBD()
    h.connect_unix(sock)
    return h


def wait(h, c, what):
    end = time.monotonic() + 60
    while not h.aio_command_completed(c):
        if time.monotonic() > end:
            print(f"{what}: no reply in 60 s")
            sys.exit(2)
        h.poll(1000)


def write(sock, first, count, gen, stride=1):
    h = connect(sock)
    acked, pending, outcome, waited = [], [], "ok", 0.0
    for k in range(count):
        i = first + k * stride
        t0 = time.monotonic()
        try:
            wait(h, h.aio_pwrite(pat(i, gen), i * B), f"block {i}")
        except nbd.Error as e:
            outcome, waited = errname(e), time.monotonic() - t0
            with open("failed.txt", "a") as f:
                f.write(f"{i}\n")
            break
        pending.append(i)
        if len(pending) == 16:
            h.flush()
            acked += pending
            pending = []
    try:
        wait(h, h.aio_flush(), "the flush")
        acked += pending
    except nbd.Error:
        pass
    with open("acked.txt", "a") as f:
        for i in acked:
            f.write(f"{i} {gen}\n")
    print(len(acked), outcome, "%.1f" % waited)


def bigwrite(sock, first, count, gen):
    h = connect(sock)
    data = b"".join(pat(first + k, gen) for k in range(count))
    try:
        wait(h, h.aio_pwrite(data, first * B), "the write")
        wait(h, h.aio_flush(), "the flush")
    except nbd.Error as e:
        print(errname(e))
        return
    with open("acked.txt", "a") as f:
        for k in range(count):
            f.write(f"{first + k} {gen}\n")
    print("ok")


def verify(sock):
    h = connect(sock)
    last, failed = model()
    bad = 0
    for i in sorted(set(last) | failed):
        g = last.get(i, 0)
        if h.pread(B, i * B) != pat(i, g):
            bad += 1
            print(f"block {i}: not generation {g}")
    print(f"verified {len(last)} acknowledged, {len(failed)} failed: {bad} wrong")
    sys.exit(1 if bad else 0)


def origin(path):
    last, _ = model()
    with open(path, "rb") as f:
        for i, g in sorted(last.items()):
            f.seek(i * B)
            if f.read(B) != pat(i, g):
                sys.exit(f"origin block {i}: not generation {g}")


if __name__ == "__main__":
    act, args = sys.argv[1], sys.argv[2:]
    if act == "write":
        write(args[0], *map(int, args[1:]))
    elif act == "bigwrite":
        bigwrite(args[0], *map(int, args[1:]))
    elif act == "verify":
        verify(args[0])
    elif act == "origin":
        origin(args[0])
    else:
        sys.exit(f"unknown action {act}")
