#!/usr/bin/python3
"""Dirty data the cache can no longer read is lost, never replaced by the
origin's older data.

A block is written in writeback mode (generation 2 over the origin's
generation 1) and the daemon stops cleanly, leaving it dirty.  Every
sector of the block's data in the cache is then flipped.  The daemon
serves again; random reads of the rest of the volume fill the cache until
the cleaner reaches the group holding the block: neither writeback nor the
cleaner can read it (proven damage), so it is recorded lost and dropped
(by the cleaner, or by the write-back the cleaner asks for when it meets
the damage first).  From then on every sector
of the block must fail with EIO (never read generation 1 from the origin),
also after a restart, until a client writes it again.  Reads of it before
the cleaner drops it fail too, and count nothing lost: the block is still
dirty in the cache then (write-back passes are held off for it), and its
loss is counted once, when it is recorded lost (lost_dirty_bytes is one block at the end, however often it was
read).  The daemon's error names the cache device and the byte offset of
the damage on it.

usage: lostdirty.py --bin TIERCACHE --dir DIR
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import Serve, tagged_gen, tagged_sector  # noqa: E402

SECTOR = 4096
BLOCK = 64 << 10
SEGMENT = 1 << 20
DATA_OFFSET = 1 << 20           # where segment 0 starts on the cache device
ORIGIN_MIB = 12
CACHE_MIB = 10
MAGIC = b"TCLOSTD1"
VICTIM = 5                      # the block whose dirty data is damaged


def pattern(off, gen):
    return tagged_sector(MAGIC, off, gen, SECTOR)


def gen_of(off, data):
    return tagged_gen(MAGIC, off, data)


class Daemon(Serve):
    def __init__(self, a, mode, env=None, cache=None):
        super().__init__(a.bin, a.dir, ["--origin", f"{a.dir}/origin.img",
                                        "--cache", cache or f"{a.dir}/cache.img", "--mode", mode],
                         env=dict(os.environ, **(env or {})) if env else None)


def victim_reads(d, what):
    """Every sector of the victim block must fail: none may be the origin's."""
    for s in range(VICTIM * BLOCK // SECTOR, (VICTIM + 1) * BLOCK // SECTOR):
        try:
            data = d.h.pread(SECTOR, s * SECTOR)
        except nbd.Error:
            continue
        sys.exit(f"{what}: sector {s} of the lost dirty block read generation "
                 f"{gen_of(s * SECTOR, data)} instead of failing with EIO")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    nsect = (ORIGIN_MIB << 20) // SECTOR
    with open(f"{a.dir}/origin.img", "wb") as f:
        for s in range(nsect):
            f.write(pattern(s * SECTOR, 1))
    with open(f"{a.dir}/cache.img", "wb") as f:
        f.truncate(CACHE_MIB << 20)
    subprocess.run([a.bin, "format", "--cache", f"{a.dir}/cache.img", "--origin",
                    f"{a.dir}/origin.img", "--segment-size", str(SEGMENT), "--block-size",
                    str(BLOCK)], check=True, stdout=subprocess.DEVNULL)

    # The victim, dirty: written, flushed and stopped at once (writeback
    # waits for a second of client idleness before it starts).
    d = Daemon(a, "writeback")
    off = VICTIM * BLOCK
    d.h.pwrite(b"".join(pattern(off + i * SECTOR, 2) for i in range(BLOCK // SECTOR)), off)
    d.h.flush()
    d.stop()

    dump = subprocess.run([a.bin, "dump", "--cache", f"{a.dir}/cache.img", "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    m = re.search(rf"^block {VICTIM} valid #+ dirty (#+) \| (\d+):(\d+) x16$", dump, re.M)
    if m is None or len(m.group(1)) != BLOCK // SECTOR:
        sys.exit(f"block {VICTIM} is not one dirty fragment after the stop:\n{dump}")
    seg, at = int(m.group(2)), int(m.group(3))
    with open(f"{a.dir}/cache.img", "r+b") as f:
        for i in range(BLOCK // SECTOR):
            p = DATA_OFFSET + seg * SEGMENT + (at + i) * SECTOR + 100
            f.seek(p)
            b = f.read(1)[0]
            f.seek(p)
            f.write(bytes([b ^ 0x5A]))

    # Unreadable but still dirty in the cache: reads fail, nothing is lost
    # yet.  (No write-back pass: one would meet the damage and record the
    # loss itself, as the cleaner does, once clients are idle a second.)
    d = Daemon(a, "writeback", {"TIERCACHE_TEST_NO_WRITEBACK_PASSES": "1"})
    victim_reads(d, "before the cleaner reached it")
    # The error names the device and the byte offset of the damage on it.
    p0 = DATA_OFFSET + seg * SEGMENT + at * SECTOR
    want = f"{a.dir}/cache.img: checksum mismatch at bytes {p0}..{p0 + SECTOR - 1} "
    if want not in open(d.log).read():
        sys.exit(f"no '{want}' in the daemon log:\n{open(d.log).read()[-3000:]}")
    st = json.loads(subprocess.run([a.bin, "status", "--socket", d.sock, "--json"],
                                   capture_output=True, text=True, check=True).stdout)
    if st["volume"]["cache"]["lost_dirty_bytes"] != 0:
        sys.exit(f"lost_dirty_bytes {st['volume']['cache']['lost_dirty_bytes']} after failed "
                 "reads of a block still dirty in the cache, expected 0")

    # Fill the cache until the cleaner has dealt with the victim's group.
    rng = random.Random(7)
    others = [b for b in range(nsect * SECTOR // BLOCK) if b != VICTIM]
    dropped = False
    for _ in range(12):
        rng.shuffle(others)
        for b in others:
            if d.h.pread(BLOCK, b * BLOCK)[:8] != MAGIC:
                sys.exit(f"block {b} reads wrong data")
        # Dropped by the cleaner, or recorded lost by the write-back the
        # cleaner asked for before it reads the group: either way lost.
        log = open(d.log).read()
        if "could not be kept" in log or "are damaged in the cache" in log:
            dropped = True
            break
    if not dropped:
        st = subprocess.run([a.bin, "status", "--socket", d.sock, "--json"],
                            capture_output=True, text=True).stdout
        sys.exit(f"the cleaner never reached the damaged block; status:\n{st}")
    st = json.loads(subprocess.run([a.bin, "status", "--socket", d.sock, "--json"],
                                   capture_output=True, text=True, check=True).stdout)
    if st["volume"]["cache"]["lost_dirty_bytes"] != BLOCK:
        sys.exit(f"lost_dirty_bytes {st['volume']['cache']['lost_dirty_bytes']}, "
                 f"expected {BLOCK}")
    victim_reads(d, "after the cleaner dropped it")
    d.stop()

    # The loss is recorded in the log: still EIO after a restart.
    undo = f"{a.dir}/cache.undo"
    d = Daemon(a, "writearound", cache=f"testdev:{a.dir}/cache.img?undo={undo}")
    victim_reads(d, "after a restart")
    # Written again (around the cache: the log holds no version of it that
    # would clear the loss at the next start by itself): readable again,
    # also after a kill -9 and a power loss of the cache device right after
    # a FLUSH -- the record that it is no longer lost is durable before the
    # FLUSH is answered.
    d.h.pwrite(b"".join(pattern(off + i * SECTOR, 3) for i in range(BLOCK // SECTOR)), off)
    d.h.flush()
    d.proc.kill()
    d.proc.wait()
    subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "undo"),
                    undo, f"{a.dir}/cache.img"], check=True, stdout=subprocess.DEVNULL)
    d = Daemon(a, "writeback")
    why = "after a kill -9 and a power loss that followed a FLUSH of its rewrite"
    for i in range(BLOCK // SECTOR):
        try:
            g = gen_of(off + i * SECTOR, d.h.pread(SECTOR, off + i * SECTOR))
        except nbd.Error:
            sys.exit(f"sector {off // SECTOR + i}: EIO {why}")
        if g != 3:
            sys.exit(f"sector {off // SECTOR + i} reads generation {g} {why}")
    d.stop()
    print("lost dirty data: EIO after the cleaner dropped it and after a restart; "
          "readable once rewritten, also after a power loss right after a FLUSH")


if __name__ == "__main__":
    main()
