#!/usr/bin/python3
"""The cleaner loses only the damaged sectors of a dirty block, also when
it has no room to copy the intact ones.

A block is written in writeback mode (generation 2 over the origin's
generation 1), then enough other blocks to fill most of the cache with
dirty data (writeback held off by --dirty-target 90), a FLUSH and a clean
stop.  One sector of the first block's data in the cache is then flipped.
The daemon serves again: the cache is nearly full, so the cleaner reclaims
the oldest group, which holds that block, and the log has no room for a
copy of its intact sectors.  Writeback cannot read the block whole either,
and may meet the damage first (which of the two does depends on timing,
and on the room the first run left).  Only the damaged sector may be lost: it fails with EIO (lost_dirty_bytes is one
sector), and every other sector of the volume, the rest of the damaged
block included, reads back as its newest generation -- before the stop,
and after a restart.  (The cleaner used to drop the whole fragment then,
losing its intact dirty sectors with the damaged one.)

usage: cleanpartial.py --bin TIERCACHE --dir DIR
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
SEGMENT = 1 << 20
DATA_OFFSET = 1 << 20           # where segment 0 starts on the cache device
ORIGIN_MIB = 12
CACHE_MIB = 10
DIRTY_BLOCKS = 112
MAGIC = b"TCCLNPL1"
DAMAGED = 3                     # its sector whose copy in the cache is flipped
SPB = BLOCK // SECTOR


def pattern(off, gen):
    return tagged_sector(MAGIC, off, gen, SECTOR)


class Daemon(Serve):
    def __init__(self, a, env=None):
        super().__init__(a.bin, a.dir, ["--origin", f"{a.dir}/origin.img",
                                        "--cache", f"{a.dir}/cache.img", "--mode", "writeback",
                                        "--dirty-target", "90", "--dirty-high", "95"],
                         env=dict(os.environ, TIERCACHE_TEST_FORCE_SCAN="1", **(env or {})))


def cache_status(a, d):
    return json.loads(subprocess.run([a.bin, "status", "--socket", d.sock, "--json"],
                                     capture_output=True, text=True,
                                     check=True).stdout)["volume"]["cache"]


def read_all(d, gens, victim, what):
    """Every sector reads its newest generation, but the damaged one fails."""
    bad = victim * SPB + DAMAGED
    for s in range(len(gens)):
        try:
            data = d.h.pread(SECTOR, s * SECTOR)
        except nbd.Error as e:
            if s == bad:
                continue
            sys.exit(f"{what}: sector {s} (intact: only sector {bad} was damaged) failed: {e}")
        g = tagged_gen(MAGIC, s * SECTOR, data)
        if s == bad:
            sys.exit(f"{what}: the damaged dirty sector {s} read generation {g} instead of "
                     f"failing with EIO")
        if g != gens[s]:
            sys.exit(f"{what}: sector {s} reads generation {g}, expected {gens[s]}")


def write_blocks(d, gens, blocks, gen=2):
    """Write generation gen of whole blocks (and FLUSH), recording it."""
    for b in blocks:
        off = b * BLOCK
        d.h.pwrite(b"".join(pattern(off + i * SECTOR, gen) for i in range(SPB)), off)
        for i in range(SPB):
            gens[b * SPB + i] = gen
    d.h.flush()


def damage_dirty_block(a, pick=lambda block: True):
    """With the daemon stopped: flip a byte of sector DAMAGED of the first
    dirty block stored whole in the cache that pick() accepts, so that it
    no longer matches its checksum.  Returns the block."""
    dump = subprocess.run([a.bin, "dump", "--cache", f"{a.dir}/cache.img", "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    m = next((m for m in re.finditer(
        rf"^block (\d+) valid #{{{SPB}}} dirty #{{{SPB}}} \| (\d+):(\d+) x{SPB}$", dump, re.M)
        if pick(int(m.group(1)))), None)
    if m is None:
        sys.exit(f"no dirty block stored whole (of those wanted) after the stop:\n{dump}")
    victim, seg, at = int(m.group(1)), int(m.group(2)), int(m.group(3))
    flip_sector(a, seg, at)
    return victim


def flip_sector(a, seg, at):
    """Flip a byte of sector DAMAGED of the block stored at seg:at."""
    with open(f"{a.dir}/cache.img", "r+b") as f:
        p = DATA_OFFSET + seg * SEGMENT + (at + DAMAGED) * SECTOR + 100
        f.seek(p)
        byte = f.read(1)[0]
        f.seek(p)
        f.write(bytes([byte ^ 0x5A]))


def make_volume():
    """Arguments parsed; an origin of generation 1 everywhere and a
    formatted cache made: (args, generations by sector)."""
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
    return a, [1] * nsect


def main():
    a, gens = make_volume()
    d = Daemon(a)
    # In a scattered order (a sequential stream would bypass the cache).
    blocks = list(range(DIRTY_BLOCKS))
    random.Random(5).shuffle(blocks)
    for b in blocks:
        off = b * BLOCK
        d.h.pwrite(b"".join(pattern(off + i * SECTOR, 2) for i in range(SPB)), off)
        for i in range(SPB):
            gens[b * SPB + i] = 2
    d.h.flush()
    d.stop()

    # The victim: a block stored whole in the oldest live group, the one
    # the cleaner reclaims first.
    dump = subprocess.run([a.bin, "dump", "--cache", f"{a.dir}/cache.img", "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    oldest = re.search(r"^group seq \d+: \[segment (\d+):", dump, re.M)
    victims = re.findall(rf"^block (\d+) valid #{{{SPB}}} dirty #{{{SPB}}} \| "
                         rf"{oldest.group(1) if oldest else 'none'}:(\d+) x{SPB}$", dump, re.M)
    if not victims:
        sys.exit(f"no dirty block stored whole in the oldest group after the stop:\n{dump}")
    victim, at = int(victims[0][0]), int(victims[0][1])
    seg = int(oldest.group(1))
    flip_sector(a, seg, at)

    # The log's room is what decides whether the cleaner can copy the
    # intact sectors; TIERCACHE_TEST_NO_COPIES makes it refuse every copy,
    # as a log with no room would.
    d = Daemon(a, {"TIERCACHE_TEST_NO_COPIES": "1"})
    # The cleaner reaches the oldest group by itself (the cache is nearly
    # full), or writeback meets the damage first: wait until the damaged
    # sector is recorded lost.
    deadline = time.monotonic() + 10
    while cache_status(a, d)["lost_dirty_bytes"] == 0:
        if time.monotonic() > deadline:
            sys.exit(f"the cleaner never dealt with the damaged block; status:\n"
                     f"{json.dumps(cache_status(a, d), indent=1)}\n{d.logtext()[-3000:]}")
        time.sleep(0.05)
    st = cache_status(a, d)
    if st["lost_dirty_bytes"] != SECTOR:
        sys.exit(f"lost_dirty_bytes {st['lost_dirty_bytes']}, expected {SECTOR} (the one "
                 f"damaged sector):\n{d.logtext()[-3000:]}")
    read_all(d, gens, victim, "after the cleaner met the damage")
    d.stop()
    d = Daemon(a)
    read_all(d, gens, victim, "after a restart")
    d.stop()
    print(f"one damaged dirty sector of {DIRTY_BLOCKS} dirty blocks: it alone is lost "
          "(EIO); the rest reads back, also after a restart")


if __name__ == "__main__":
    main()
