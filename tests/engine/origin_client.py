#!/usr/bin/python3
"""A client for the origin fault tests that tracks every request.

    origin_client.py run SOCK MODEL --lo B --hi B --seed N
                     [--threads N] [--ops N | --seconds S | --until FILE]
                     [--write-pct P] [--flush-pct P] [--max-len B]
                     [--result JSON] [--started FILE]
    origin_client.py fixup SOCK MODEL     rewrite the sectors left unknown
    origin_client.py probe SOCK --off B --len B [--write]   one request

MODEL is a file holding the expected content of the whole export; MODEL.unknown
has one byte per 4 KiB sector, 1 where a write failed (NBD leaves such a
range's contents unspecified: old data, new data or a mix).  Each thread
works on its own slice of [lo, hi), so the model is exact: a successful
read must match it byte for byte (unknown sectors excepted).

"run" writes a JSON summary: requests ok/failed by kind, reads that did not
match (must be 0), errors seen (errno names) and the longest request.
"probe" prints one line: "ok SECONDS" or "error ENAME SECONDS" (e.g. EIO).
"""
import argparse
import errno
import json
import mmap
import os
import random
import sys
import threading
import time

import nbd

SECT = 4096


def connect(sock):
    h = nbd.NBD()
    h.connect_unix(sock)
    return h


def errname(e):
    n = e.errnum if isinstance(e, nbd.Error) else None
    return os.strerror(n) if n else str(e)


def cmd_run(a):
    # Mapped: only the pages touched are read, changes go straight to the file.
    mf = open(a.model, "r+b")
    model = mmap.mmap(mf.fileno(), 0)
    nsect = len(model) // SECT
    unknown_path = a.model + ".unknown"
    unknown = bytearray(open(unknown_path, "rb").read()) if os.path.exists(unknown_path) \
        else bytearray(nsect)
    lock = threading.Lock()
    res = {"reads_ok": 0, "reads_failed": 0, "writes_ok": 0, "writes_failed": 0,
           "flushes_ok": 0, "flushes_failed": 0, "bad_reads": 0, "errors": {},
           "max_seconds": 0.0, "bad": []}
    stop_at = time.time() + a.seconds if a.seconds else None
    nthreads = a.threads
    span = (a.hi - a.lo) // nthreads // SECT * SECT

    def worker(t):
        rnd = random.Random(a.seed * 1000 + t)
        lo = a.lo + t * span
        h = connect(a.sock)
        n = 0
        while True:
            if n == 1 and a.started:
                open(a.started, "w").close()
            if a.ops and n >= a.ops:
                break
            if stop_at and time.time() >= stop_at:
                break
            if a.until and os.path.exists(a.until):
                break
            n += 1
            nl = rnd.randint(1, a.max_len // SECT)
            off = lo + rnd.randrange(0, span // SECT - nl + 1) * SECT
            ln = nl * SECT
            s0 = off // SECT
            t0 = time.time()
            kind = rnd.random() * 100
            try:
                if kind < a.write_pct:
                    data = rnd.randbytes(ln)
                    try:
                        h.pwrite(data, off)
                        ok = True
                    except nbd.Error as e:
                        ok = False
                        err = errname(e)
                    with lock:
                        if ok:
                            model[off:off + ln] = data
                            unknown[s0:s0 + nl] = bytes(nl)
                            res["writes_ok"] += 1
                        else:
                            unknown[s0:s0 + nl] = b"\1" * nl
                            res["writes_failed"] += 1
                            res["errors"][err] = res["errors"].get(err, 0) + 1
                elif kind < a.write_pct + a.flush_pct:
                    try:
                        h.flush()
                        with lock:
                            res["flushes_ok"] += 1
                    except nbd.Error as e:
                        with lock:
                            res["flushes_failed"] += 1
                            err = errname(e)
                            res["errors"][err] = res["errors"].get(err, 0) + 1
                else:
                    try:
                        got = h.pread(ln, off)
                    except nbd.Error as e:
                        with lock:
                            res["reads_failed"] += 1
                            err = errname(e)
                            res["errors"][err] = res["errors"].get(err, 0) + 1
                        continue
                    with lock:
                        res["reads_ok"] += 1
                        for s in range(nl):
                            if unknown[s0 + s]:
                                continue
                            b = (s0 + s) * SECT
                            if got[s * SECT:(s + 1) * SECT] != model[b:b + SECT]:
                                res["bad_reads"] += 1
                                if len(res["bad"]) < 10:
                                    res["bad"].append(b)
                                break
            finally:
                dt = time.time() - t0
                with lock:
                    res["max_seconds"] = max(res["max_seconds"], dt)
        h.shutdown()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    model.close()
    mf.close()
    with open(unknown_path, "wb") as f:
        f.write(unknown)
    res["unknown_sectors"] = sum(1 for x in unknown if x)
    out = json.dumps(res, sort_keys=True)
    if a.result:
        with open(a.result, "w") as f:
            f.write(out + "\n")
    print(out)
    return 0


def cmd_fixup(a):
    """Write the model's data over every unknown sector: afterwards the
    export must hold exactly the model."""
    with open(a.model, "rb") as f:
        model = f.read()
    unknown_path = a.model + ".unknown"
    if not os.path.exists(unknown_path):
        return 0
    unknown = bytearray(open(unknown_path, "rb").read())
    h = connect(a.sock)
    n = 0
    for s, u in enumerate(unknown):
        if u:
            h.pwrite(model[s * SECT:(s + 1) * SECT], s * SECT)
            unknown[s] = 0
            n += 1
    h.flush()
    h.shutdown()
    with open(unknown_path, "wb") as f:
        f.write(unknown)
    print("rewrote %d unknown sectors" % n)
    return 0


def cmd_probe(a):
    h = connect(a.sock)
    t0 = time.time()
    try:
        if a.write:
            h.pwrite(bytes(a.len), a.off)
        else:
            h.pread(a.len, a.off)
        print("ok %.3f" % (time.time() - t0))
    except nbd.Error as e:
        name = errno.errorcode.get(e.errnum, str(e.errnum)) if e.errnum else "?"
        print("error %s %.3f" % (name, time.time() - t0))
    try:
        h.shutdown()
    except nbd.Error:
        pass
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("sock")
    r.add_argument("model")
    r.add_argument("--lo", type=int, required=True)
    r.add_argument("--hi", type=int, required=True)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--threads", type=int, default=4)
    r.add_argument("--ops", type=int, default=0)
    r.add_argument("--seconds", type=float, default=0)
    r.add_argument("--until")
    r.add_argument("--write-pct", type=float, default=40)
    r.add_argument("--flush-pct", type=float, default=0)
    r.add_argument("--max-len", type=int, default=64 << 10)
    r.add_argument("--result")
    r.add_argument("--started", help="created once requests are flowing")
    f = sub.add_parser("fixup")
    f.add_argument("sock")
    f.add_argument("model")
    pr = sub.add_parser("probe")
    pr.add_argument("sock")
    pr.add_argument("--off", type=int, required=True)
    pr.add_argument("--len", type=int, required=True)
    pr.add_argument("--write", action="store_true")
    a = p.parse_args()
    return {"run": cmd_run, "fixup": cmd_fixup, "probe": cmd_probe}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
