#!/usr/bin/python3
"""The model of engine/sparse-full-fs.test: every 4 KiB sector written
carries its number and a generation; the model keeps, per sector, the
newest acknowledged generation and whether a FLUSH answered since covers
it.

    sparsefull.py write SOCK MODEL --ops K --seed S [--sectors N]
        K writes of 1..16 whole sectors at random over [0, N), a FLUSH
        every 8 writes and at the end; a write or FLUSH that fails is
        counted (a failed write leaves its sectors unspecified: the old
        or the new generation).
    sparsefull.py verify SOCK MODEL
        reads every sector: each must hold its newest acknowledged
        generation; EIO is allowed only for a sector whose newest write
        no FLUSH acknowledged (a write acknowledged and then lost with
        the cache); anything else -- an older generation, another
        error -- fails.
"""
import argparse, json, random, struct, sys
import nbd

SECTOR = 4096


def pattern(s, g):
    return bytes(SECTOR) if g == 0 else struct.pack("<QQ", s, g) * (SECTOR // 16)


def decode(s, buf):
    if buf == bytes(SECTOR):
        return 0
    s2, g = struct.unpack_from("<QQ", buf)
    return g if s2 == s and buf == pattern(s, g) else None


def load(path):
    try:
        with open(path) as f:
            m = json.load(f)
    except FileNotFoundError:
        return {"gen": 0, "sectors": 0, "ok": {}, "flushed": {}}
    m["ok"] = {int(k): v for k, v in m["ok"].items()}
    m["flushed"] = {int(k): v for k, v in m["flushed"].items()}
    return m


def cmd_write(a):
    m = load(a.model)
    m["sectors"] = max(m["sectors"], a.sectors)
    h = nbd.NBD()
    h.connect_unix(a.sock)
    rnd = random.Random(a.seed)
    st = {"writes": 0, "write_errors": 0, "flushes": 0, "flush_errors": 0}

    def flush():
        try:
            h.flush()
            st["flushes"] += 1
            for s in m["ok"]:
                m["flushed"][s] = True
        except nbd.Error as e:
            st["flush_errors"] += 1
            print("FLUSH failed:", e, file=sys.stderr)

    for i in range(a.ops):
        n = rnd.randint(1, 16)
        s0 = rnd.randrange(0, a.sectors - n + 1)
        m["gen"] += 1
        g = m["gen"]
        try:
            h.pwrite(b"".join(pattern(s, g) for s in range(s0, s0 + n)), s0 * SECTOR)
            st["writes"] += 1
            for s in range(s0, s0 + n):
                m["ok"][s] = [g]
                m["flushed"][s] = False
        except nbd.Error as e:
            st["write_errors"] += 1
            print(f"write of sectors {s0}+{n} failed:", e, file=sys.stderr)
            for s in range(s0, s0 + n):
                m["ok"][s] = sorted(set(m["ok"].get(s, [0])) | {g})
                m["flushed"][s] = False
        if i % 8 == 7:
            flush()
    flush()
    with open(a.model, "w") as f:
        json.dump(m, f)
    print("write:", json.dumps(st))


def cmd_verify(a):
    m = load(a.model)
    h = nbd.NBD()
    h.connect_unix(a.sock)
    good, eio, bad = 0, 0, []
    for s in range(m["sectors"]):
        want = m["ok"].get(s, [0])
        try:
            buf = h.pread(SECTOR, s * SECTOR)
        except nbd.Error as e:
            if getattr(e, "errnum", None) == 5 and not m["flushed"].get(s, True):
                eio += 1
                continue
            bad.append(f"sector {s}: {e}; expected generation {want}"
                       f"{' (FLUSH-acknowledged)' if m['flushed'].get(s, True) else ''}")
            continue
        g = decode(s, buf)
        if g in want:
            good += 1
        else:
            bad.append(f"sector {s}: read generation {g}, expected {want}")
    print(f"verify: {good} good, {eio} EIO (unflushed), {len(bad)} wrong")
    for b in bad[:10]:
        print("  " + b)
    if bad:
        sys.exit(f"verify: {len(bad)} sectors wrong")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("sock"); w.add_argument("model")
    w.add_argument("--ops", type=int, required=True)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--sectors", type=int, default=8192)
    v = sub.add_parser("verify")
    v.add_argument("sock"); v.add_argument("model")
    a = p.parse_args()
    {"write": cmd_write, "verify": cmd_verify}[a.cmd](a)


main()
