#!/usr/bin/python3
"""Sectors lost with a failed device stay lost when an older version of
their block, cached on a surviving device, is kept hot and copied forward
by the cleaner.

Two cache devices, writeback, lru.  Victim blocks get version 2 (all
sectors): written back, so clean in the cache, or with --dirty left dirty
(the origin refuses writes); then version 3 over their first half, left
dirty.  Victims whose version 2 is on device 0 and version 3 on device 1
are the interesting ones.  Device 1 then fails with every request on it
failing: version 3 cannot be rescued and is recorded lost.  After a
restart, reads of the victims' second halves keep them hot while reads of
the rest of the volume make the cleaner reclaim the group holding
version 2 and copy the victims forward.  After another restart the
victims' first halves must fail with EIO, never read version 2.

What keeps them lost is the failure's rewrite of each block that keeps
data (engine/failure.c): a tombstone linked to one version of exactly the
surviving sectors, so that no restart brings version 2's first half back
into the index -- from where a copy, newer than the LOST record, would
make the next restart take it for a write that ended the loss.  (Without
that tombstone this test reads version 2.)

usage: lostcopy.py --bin TIERCACHE --dir DIR [--dirty]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import Serve, tagged_gen, tagged_sector  # noqa: E402

SECTOR = 4096
BLOCK = 64 << 10
SPB = BLOCK // SECTOR
HALF = SPB // 2
SEGMENT = 1 << 20
CACHE_MIB = 10
SEGS_PER_DEV = (CACHE_MIB << 20) // SEGMENT - 1     # the first MiB: superblocks
MAGIC = b"TCLSTCP1"
VICTIMS = range(0, 32)


def pattern(off, gen):
    return tagged_sector(MAGIC, off, gen, SECTOR)


def gen_of(off, data):
    return tagged_gen(MAGIC, off, data)


def blockdata(b, gen, first, n):
    return b"".join(pattern(b * BLOCK + s * SECTOR, gen) for s in range(first, first + n))


class Daemon(Serve):
    def __init__(self, a, cache, origin):
        super().__init__(a.bin, a.dir, ["--origin", origin, "--cache", cache,
                                        "--mode", "writeback", "--policy", "lru",
                                        "--sequential-cutoff", "0"])

    def wait(self, pred, what, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.status()
            if pred(st):
                return st
            time.sleep(0.02)
        sys.exit(f"{what}: never happened; status:\n{json.dumps(self.status())}")


def fragments(a, cache):
    """{block: [(device, sectors), ...]} from the offline dump."""
    dump = subprocess.run([a.bin, "dump", "--cache", cache, "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    out = {}
    for m in re.finditer(r"^block (\d+) (.*)$", dump, re.M):
        out[int(m.group(1))] = [(int(s) // SEGS_PER_DEV, int(n))
                                for s, _, n in re.findall(r"(\d+):(\d+) x(\d+)", m.group(2))]
    return out, dump


def first_halves(d, victims, what):
    """No sector of a lost first half may read anything but EIO."""
    for b in victims:
        for s in range(HALF):
            off = b * BLOCK + s * SECTOR
            try:
                data = d.h.pread(SECTOR, off)
            except nbd.Error:
                continue
            sys.exit(f"{what}: sector {s} of block {b}, lost, read generation "
                     f"{gen_of(off, data)} instead of failing with EIO\n{d.logtext()[-3000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--dirty", action="store_true")
    a = ap.parse_args()
    nblocks = (48 << 20) // BLOCK
    imgs = [f"{a.dir}/cache{i}.img" for i in range(2)]
    cache = ",".join(imgs)
    origin = f"{a.dir}/origin.img"
    ohold = f"{a.dir}/ohold"
    held = f"testdev:{origin}?eio_when={ohold}&eio_ops=write"
    with open(origin, "wb") as f:
        for s in range(nblocks * SPB):
            f.write(pattern(s * SECTOR, 1))
    for img in imgs:
        with open(img, "wb") as f:
            f.truncate(CACHE_MIB << 20)
    subprocess.run([a.bin, "format", "--cache", cache, "--origin", origin,
                    "--segment-size", str(SEGMENT), "--block-size", str(BLOCK)],
                   check=True, stdout=subprocess.DEVNULL)

    # Version 2 of every victim: written back (clean in the cache), or not.
    if a.dirty:
        open(ohold, "w").close()
    d = Daemon(a, cache, held if a.dirty else origin)
    for b in VICTIMS:
        d.h.pwrite(blockdata(b, 2, 0, SPB), b * BLOCK)
    d.h.flush()
    if not a.dirty:
        d.wait(lambda st: st["dirty_bytes"] == 0, "version 2 written back")
    d.stop()

    # Version 3 of their first halves, dirty (the origin refuses writes).
    open(ohold, "w").close()
    d = Daemon(a, cache, held)
    for b in VICTIMS:
        d.h.pwrite(blockdata(b, 3, 0, HALF), b * BLOCK)
    d.h.flush()
    d.stop()
    frags, dump = fragments(a, cache)
    victims = [b for b in VICTIMS
               if frags.get(b) and len(frags[b]) == 2 and frags[b][0] == (1, HALF)
               and frags[b][1] == (0, SPB)]
    if not victims:
        sys.exit(f"no block has version 3 on device 1 over version 2 on device 0:\n{dump}")
    print(f"victims (version 2 on device 0, version 3 on device 1): {victims}")

    # Device 1 fails with every request on it failing: version 3 is lost.
    boom = f"{a.dir}/boom"
    d = Daemon(a, f"{imgs[0]},testdev:{imgs[1]}?eio_when={boom}", held)
    open(boom, "w").close()
    others = [b for b in range(nblocks) if b not in VICTIMS]
    for i in range(2000):
        st = d.status()
        if st["devices"][1]["state"] != "ok":
            break
        b = others[i % len(others)]
        try:
            d.h.pwrite(blockdata(b, 1, 0, SPB), b * BLOCK)
            d.h.flush()
        except nbd.Error:
            pass
    else:
        sys.exit(f"device 1 never failed:\n{json.dumps(st)}")
    d.wait(lambda st: st["rescues_pending"] == 0, "the rescue ended")
    first_halves(d, victims, "after device 1 failed")
    d.stop()
    os.unlink(boom)
    if not a.dirty:
        os.unlink(ohold)

    # The group holding version 2 reclaimed, the victims kept (hot) and
    # copied forward.
    d = Daemon(a, cache, held if a.dirty else origin)
    first_halves(d, victims, "after a restart")
    rng = random.Random(7)
    rest = [b for b in range(nblocks) if b not in VICTIMS]
    rng.shuffle(rest)

    def touch():
        for b in victims:
            if d.h.pread(HALF * SECTOR, b * BLOCK + HALF * SECTOR) != blockdata(b, 2, HALF, HALF):
                sys.exit(f"block {b}: its second half does not read version 2")
    touch()
    for n, b in enumerate(rest):
        d.h.pread(BLOCK, b * BLOCK)
        touch()
        st = d.status()
        if st["reinsertions"] >= len(victims):
            break
    else:
        sys.exit(f"the victims were never copied forward; status:\n{json.dumps(st)}")
    print(f"copied forward: {st['reinsertions']} blocks; LOST records carried: "
          f"{st['cleaner']['lost_records_carried']}")
    first_halves(d, victims, "after the cleaner's copies")
    d.stop()

    d = Daemon(a, cache, origin)
    first_halves(d, victims, "after a restart following the cleaner's copies")
    d.stop()
    print("lost sectors stayed lost")


if __name__ == "__main__":
    main()
