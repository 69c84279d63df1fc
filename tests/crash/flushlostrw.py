#!/usr/bin/python3
"""A dirty block whose data is lost while `tiercache flush` runs, then
written again by a client before the flush ends: the flush must write the
new data back.  Its promise at exit 0 is that the origin holds every
write acknowledged before it began, or newer data; the lost version can
no longer get there, so the newer one must.

As wbdamage.py, one sector of a dirty block V is damaged in the cache
while the daemon is stopped.  The daemon serves again over a test origin
that holds the writes of the last dirty block H.  The flush writes the
dirty blocks back in two jobs, H's the second, held; the first one's
write-back of V finds the damage and loses that sector (V is clean then,
and the flush counts it done).  A client
then writes the sector again, and the hold goes.  The flush must end
with the new data on the origin, nothing left dirty.  (It ended once H
was written, with the sector dirty in the cache and the origin holding
data older than what was acknowledged before the flush.)

usage: flushlostrw.py --bin TIERCACHE --dir DIR
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tclib import Serve, tagged_gen  # noqa: E402
from cleanpartial import (BLOCK, DAMAGED, MAGIC, SECTOR, SPB,  # noqa: E402
                          cache_status, damage_dirty_block, make_volume, pattern, write_blocks)

DIRTY_BLOCKS = 80              # two write-back jobs (of 64 blocks at most)
JOB_BLOCKS = 64


def wait_for(what, cond, d, limit=60):
    end = time.time() + limit
    while time.time() < end:
        st = d.status()
        if cond(st):
            return st
        time.sleep(0.05)
    sys.exit(f"{what}: not within {limit} s; status {d.status()}\n"
             f"{d.logtext()[-3000:]}")


def main():
    a, gens = make_volume()
    blocks = list(range(0, 2 * DIRTY_BLOCKS, 2))     # scattered: no sequential stream
    args = ["--origin", f"{a.dir}/origin.img", "--cache", f"{a.dir}/cache.img", "--mode",
            "writeback"]
    d = Serve(a.bin, a.dir, args, env=dict(os.environ, TIERCACHE_TEST_NO_WRITEBACK_PASSES="1"))
    write_blocks(d, gens, blocks)
    if cache_status(a, d)["dirty_bytes"] != DIRTY_BLOCKS * BLOCK:
        sys.exit("write-back ran before the stop: the test proves nothing")
    d.stop()

    # V among the first job's blocks, H the last block: in the second job.
    victim = damage_dirty_block(a, lambda b: b < blocks[JOB_BLOCKS - 1])
    held = blocks[-1]
    hold = os.path.join(a.dir, "hold")
    open(hold, "w").close()
    origin = (f"testdev:{a.dir}/origin.img?hold_when={hold}&hold_ops=write"
              f"&hold_range={held * BLOCK}+{BLOCK}")
    args[1] = origin
    d = Serve(a.bin, a.dir, args, env=dict(os.environ, TIERCACHE_TEST_NO_WRITEBACK_PASSES="1"))
    fl = subprocess.Popen([a.bin, "flush", "--socket", d.sock], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    # The first job's blocks written back, V's damaged sector lost, and V
    # out of the flush's set: the second job's blocks are left (held).
    second = DIRTY_BLOCKS - JOB_BLOCKS
    wait_for("the flush's progress", lambda st: st["lost_dirty_bytes"] == SECTOR and
             st["writeback"]["flush_blocks_left"] == second, d)
    bad = victim * SPB + DAMAGED
    d.h.pwrite(pattern(bad * SECTOR, 3), bad * SECTOR)
    gens[bad] = 3
    os.unlink(hold)
    out, _ = fl.communicate(timeout=120)
    if fl.returncode != 0:
        sys.exit(f"tiercache flush exited {fl.returncode}, expected 0:\n{out}\n"
                 f"{d.logtext()[-3000:]}")
    st = cache_status(a, d)
    with open(f"{a.dir}/origin.img", "rb") as f:
        f.seek(bad * SECTOR)
        g = tagged_gen(MAGIC, bad * SECTOR, f.read(SECTOR))
    if g != 3:
        sys.exit(f"the origin holds generation {g} of the lost sector after the flush, expected "
                 f"3 (written again while the flush ran); dirty bytes {st['dirty_bytes']}:\n"
                 f"{out}")
    d.stop()
    with open(f"{a.dir}/origin.img", "rb") as f:
        for s in range(len(gens)):
            f.seek(s * SECTOR)
            g = tagged_gen(MAGIC, s * SECTOR, f.read(SECTOR))
            if g != gens[s]:
                sys.exit(f"origin file: sector {s} holds generation {g}, expected {gens[s]}")
    print("a sector lost during the flush and written again before its end: the flush wrote "
          "the new data back")


if __name__ == "__main__":
    main()
