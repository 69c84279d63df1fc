#!/usr/bin/python3
"""Writeback loses only the damaged sectors of a dirty block, and writes
the intact ones back.

A few blocks are written in writeback mode (generation 2 over the
origin's generation 1), held dirty, and the daemon stops cleanly.  One
sector of one block's data in the cache is then flipped (its checksum no
longer matches).  The daemon serves again, with room to spare: the
cleaner has no reason to look at the block, so writeback meets the damage
first.  `tiercache flush` must finish and say that data was lost (exit
3): the damaged sector alone is lost (lost_dirty_bytes is one sector, it
reads EIO), no dirty data is left, the origin file holds generation 2 of
every other sector the clients wrote, and everything reads back the same
after a restart.  (Writeback used to fail the whole block for ever --
"unreadable in the cache" every few seconds -- leaving its intact dirty
sectors off the origin, the flush unfinished and writes that needed the
block written back failing with EIO.)

usage: wbdamage.py --bin TIERCACHE --dir DIR
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tclib import Serve, tagged_gen  # noqa: E402
from cleanpartial import (BLOCK, DAMAGED, MAGIC, SECTOR, SPB,  # noqa: E402
                          cache_status, damage_dirty_block, make_volume, read_all,
                          write_blocks)

DIRTY_BLOCKS = 16


class Daemon(Serve):
    def __init__(self, a, env=None):
        super().__init__(a.bin, a.dir, ["--origin", f"{a.dir}/origin.img",
                                        "--cache", f"{a.dir}/cache.img", "--mode", "writeback"],
                         env=dict(os.environ, **(env or {})))


def main():
    a, gens = make_volume()
    nsect = len(gens)
    # Held dirty: no write-back pass before the stop.
    d = Daemon(a, {"TIERCACHE_TEST_NO_WRITEBACK_PASSES": "1"})
    write_blocks(d, gens, range(0, 2 * DIRTY_BLOCKS, 2))     # scattered: no sequential stream
    if cache_status(a, d)["dirty_bytes"] != DIRTY_BLOCKS * BLOCK:
        sys.exit(f"dirty_bytes {cache_status(a, d)['dirty_bytes']} before the stop, expected "
                 f"{DIRTY_BLOCKS * BLOCK}: write-back ran, the test proves nothing")
    d.stop()

    victim = damage_dirty_block(a)

    d = Daemon(a)
    r = subprocess.run([a.bin, "flush", "--socket", d.sock], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 3:
        sys.exit(f"tiercache flush exited {r.returncode}, expected 3 (no dirty data left, one "
                 f"sector lost):\n{r.stdout}{r.stderr}\n{d.logtext()[-3000:]}")
    st = cache_status(a, d)
    if st["lost_dirty_bytes"] != SECTOR or st["dirty_bytes"] != 0:
        sys.exit(f"lost_dirty_bytes {st['lost_dirty_bytes']}, dirty_bytes {st['dirty_bytes']}; "
                 f"expected {SECTOR} and 0:\n{d.logtext()[-3000:]}")
    read_all(d, gens, victim, "after the flush")
    d.stop()
    # The origin alone holds every intact sector written (the damaged one
    # is the origin's older generation there, and the cache says it is lost).
    bad = victim * SPB + DAMAGED
    with open(f"{a.dir}/origin.img", "rb") as f:
        for s in range(nsect):
            f.seek(s * SECTOR)
            g = tagged_gen(MAGIC, s * SECTOR, f.read(SECTOR))
            if s != bad and g != gens[s]:
                sys.exit(f"origin file: sector {s} holds generation {g}, expected {gens[s]}")
    d = Daemon(a)
    read_all(d, gens, victim, "after a restart")
    d.stop()
    print(f"one damaged sector of {DIRTY_BLOCKS} dirty blocks met by writeback: it alone is "
          "lost (EIO); the rest is on the origin and reads back, also after a restart")


if __name__ == "__main__":
    main()
