#!/usr/bin/python3
"""A model of a volume's 4 KiB sectors for the cache fault tests: every
sector written carries its number and a generation, so a read tells
exactly which version it got.

    cachefaults.py write SOCK MODEL --sectors N --ops K --seed S
        random writes of 1..16 sectors over sectors [0, N), a flush every
        --flush-every writes and at the end (not with --no-flush); the model keeps, per sector,
        the versions a read may return (the newest acknowledged one, and
        the new one of a write that failed, whose contents NBD leaves
        unspecified).  A failed flush is reported once and retried.
    cachefaults.py verify SOCK MODEL [--expect-no-eio] [--min-good F]
        reads every sector: each must be a version the model allows, or
        fail with EIO (data lost with the cache); never an older version
        or anything else.  The EIO sectors are remembered in the model.
    cachefaults.py rewrite SOCK MODEL --count K
        writes K of the EIO sectors again and reads them back: a write
        clears a lost sector.
    cachefaults.py verify-file FILE MODEL
        the origin file after a flush: every sector that did not read as
        EIO holds its newest version.
    cachefaults.py merge OUT BASE A B
        two writers that ran at once, each from a copy of BASE (one with
        write --gen-skip, so that their generations differ): a sector
        either changed takes its versions, one both changed may hold the
        last of either.
"""
import argparse
import json
import random
import struct
import sys

import nbd

SECTOR = 4096


def pattern(sector, gen):
    if gen == 0:
        return bytes(SECTOR)
    return struct.pack("<QQ", sector, gen) * (SECTOR // 16)


def decode(sector, buf):
    """The generation a sector holds, or None if it is no version of it."""
    if buf == bytes(SECTOR):
        return 0
    s, g = struct.unpack_from("<QQ", buf)
    if s != sector or buf != pattern(sector, g):
        return None
    return g


def load(path):
    try:
        with open(path) as f:
            m = json.load(f)
        m["ok"] = {int(k): v for k, v in m["ok"].items()}
        return m
    except FileNotFoundError:
        return {"gen": 0, "ok": {}, "eio": []}


def save(path, m):
    with open(path, "w") as f:
        json.dump(m, f)


def allowed(m, s):
    return m["ok"].get(s, [0])


def connect(sock):
    h = nbd.NBD()
    h.connect_unix(sock)
    return h


def flush(h, stats):
    # A flush after data was lost with the cache fails once; a further
    # loss meanwhile may fail the next one too.
    for attempt in range(4):
        try:
            h.flush()
            return
        except nbd.Error as e:
            stats["flush_errors"] += 1
            print("flush failed (reported once per loss):", e)
    h.flush()


def cmd_write(a):
    m = load(a.model)
    m["gen"] += a.gen_skip
    h = connect(a.sock)
    rnd = random.Random(a.seed)
    stats = {"writes": 0, "write_errors": 0, "flush_errors": 0}
    for i in range(a.ops):
        n = rnd.randint(1, 16)
        s0 = rnd.randrange(0, a.sectors - n + 1)
        m["gen"] += 1
        g = m["gen"]
        buf = b"".join(pattern(s, g) for s in range(s0, s0 + n))
        try:
            h.pwrite(buf, s0 * SECTOR)
            for s in range(s0, s0 + n):
                m["ok"][s] = [g]
            stats["writes"] += 1
        except nbd.Error:
            # Unspecified contents: the old versions or the new one.
            for s in range(s0, s0 + n):
                m["ok"][s] = sorted(set(allowed(m, s)) | {g})
            stats["write_errors"] += 1
        if a.flush_every and (i + 1) % a.flush_every == 0:
            flush(h, stats)
    if not a.no_flush:
        flush(h, stats)
    save(a.model, m)
    print("write:", json.dumps(stats))


def check_sector(m, s, buf, bad):
    g = decode(s, buf)
    if g in allowed(m, s):
        return True
    bad.append("sector %d: read generation %s, expected one of %s" % (s, g, allowed(m, s)))
    return False


def cmd_verify(a):
    m = load(a.model)
    h = connect(a.sock)
    good, eio, bad = 0, [], []
    RUN = 16
    for s0 in range(0, a.sectors, RUN):
        n = min(RUN, a.sectors - s0)
        try:
            buf = h.pread(n * SECTOR, s0 * SECTOR)
            for i in range(n):
                good += check_sector(m, s0 + i, buf[i * SECTOR:(i + 1) * SECTOR], bad)
            continue
        except nbd.Error:
            pass
        for s in range(s0, s0 + n):         # which of them fail
            try:
                buf = h.pread(SECTOR, s * SECTOR)
            except nbd.Error as e:
                if e.errno not in ("EIO", 5):
                    bad.append("sector %d: error %s" % (s, e))
                eio.append(s)
                continue
            good += check_sector(m, s, buf, bad)
    m["eio"] = eio
    save(a.model, m)
    print("verify: %d good, %d EIO, %d wrong" % (good, len(eio), len(bad)))
    for b in bad[:10]:
        print("  " + b)
    if bad:
        sys.exit("verify: %d sectors returned data that is not the newest" % len(bad))
    if a.expect_no_eio and eio:
        sys.exit("verify: %d sectors failed with EIO, none expected (first %d)" % (len(eio), eio[0]))
    if good < a.min_good * a.sectors:
        sys.exit("verify: only %d of %d sectors readable" % (good, a.sectors))


def cmd_rewrite(a):
    m = load(a.model)
    h = connect(a.sock)
    targets = m["eio"][:a.count]
    for s in targets:
        m["gen"] += 1
        h.pwrite(pattern(s, m["gen"]), s * SECTOR)
        m["ok"][s] = [m["gen"]]
        if h.pread(SECTOR, s * SECTOR) != pattern(s, m["gen"]):
            sys.exit("rewrite: sector %d does not read back what was written" % s)
    m["eio"] = [s for s in m["eio"] if s not in set(targets)]
    save(a.model, m)
    print("rewrite: %d lost sectors written again and read back" % len(targets))


def cmd_verify_file(a):
    m = load(a.model)
    lost = set(m["eio"])
    bad = []
    with open(a.file, "rb") as f:
        for s in range(a.sectors):
            if s in lost:
                continue
            f.seek(s * SECTOR)
            g = decode(s, f.read(SECTOR))
            if g not in allowed(m, s):
                bad.append("sector %d: generation %s, expected %s" % (s, g, allowed(m, s)))
    print("verify-file: %d wrong" % len(bad))
    for b in bad[:10]:
        print("  " + b)
    if bad:
        sys.exit("verify-file: the origin lacks the newest data of %d sectors" % len(bad))


def cmd_merge(a):
    base, x, y = load(a.base), load(a.a), load(a.b)
    out = {"gen": max(x["gen"], y["gen"]), "ok": dict(base["ok"]),
           "eio": sorted(set(x["eio"]) | set(y["eio"]))}
    for s in set(x["ok"]) | set(y["ok"]):
        cx, cy = allowed(x, s) != allowed(base, s), allowed(y, s) != allowed(base, s)
        if cx and cy:
            out["ok"][s] = sorted(set(allowed(x, s)) | set(allowed(y, s)))
        elif cx or cy:
            out["ok"][s] = allowed(x if cx else y, s)
    save(a.out, out)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("sock"); w.add_argument("model")
    w.add_argument("--sectors", type=int, required=True)
    w.add_argument("--ops", type=int, required=True)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--flush-every", type=int, default=50)
    w.add_argument("--no-flush", action="store_true")
    w.add_argument("--gen-skip", type=int, default=0)
    v = sub.add_parser("verify")
    v.add_argument("sock"); v.add_argument("model")
    v.add_argument("--sectors", type=int, required=True)
    v.add_argument("--expect-no-eio", action="store_true")
    v.add_argument("--min-good", type=float, default=0.0)
    r = sub.add_parser("rewrite")
    r.add_argument("sock"); r.add_argument("model")
    r.add_argument("--count", type=int, default=8)
    f = sub.add_parser("verify-file")
    f.add_argument("file"); f.add_argument("model")
    f.add_argument("--sectors", type=int, required=True)
    g = sub.add_parser("merge")
    g.add_argument("out"); g.add_argument("base"); g.add_argument("a"); g.add_argument("b")
    a = p.parse_args()
    {"write": cmd_write, "verify": cmd_verify, "rewrite": cmd_rewrite,
     "verify-file": cmd_verify_file, "merge": cmd_merge}[a.cmd](a)


if __name__ == "__main__":
    main()
