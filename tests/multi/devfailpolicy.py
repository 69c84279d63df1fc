#!/usr/bin/python3
"""The default policy's sizing after a device failure: two cache devices,
one of 11 segments of 1 MiB (a, whose writes fail from the moment the
test says) and a survivor of 3 (b), writeback.

The policy's read window is counted in quanta of a sixteenth of the
cache's blocks (policy/default.c).  Before, they stayed a sixteenth of
the whole cache after the failure: the survivor of 48 blocks was given a
window of 16 quanta of 14 blocks (224 blocks, more than four times what
it holds) and up to 22.  Now the policy follows the devices in service
(status policy_figures.cache_blocks): the window keeps its length in
quanta of the survivor, and every block still reads its last data.

usage: devfailpolicy.py --bin TIERCACHE --dir DIR
"""
import argparse
import os
import sys

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import DevFail, block_pattern  # noqa: E402

BLOCK = 64 << 10
ORIGIN_BLOCKS = 64
PER_SEGMENT = 16        # blocks of 64 KiB in a segment of 1 MiB
WINDOW_MAX = 22         # quanta (policy/default.c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    s = DevFail(a.bin, a.dir, ORIGIN_BLOCKS * BLOCK, 12 << 20, 4 << 20)
    h = s.h
    gens = {}
    for b in range(ORIGIN_BLOCKS):
        gens[b] = 1
        h.pwrite(block_pattern(b, 1), b * BLOCK)
    h.flush()
    st = s.status()
    pf = st["policy_figures"]
    segs = [d["segments"] for d in st["devices"]]
    print(f"before: segments {segs}, policy cache_blocks {pf.get('cache_blocks')}, "
          f"window {pf['window_reads']} reads")
    if pf.get("cache_blocks") != sum(segs) * PER_SEGMENT:
        sys.exit(f"the policy is sized for {pf.get('cache_blocks')} blocks, not the cache's "
                 f"{sum(segs) * PER_SEGMENT}")
    quanta = pf["window_reads"] / (sum(segs) * PER_SEGMENT // 16)
    s.fail()
    for b in range(8):
        try:
            h.pwrite(block_pattern(b, 2), b * BLOCK)
            gens[b] = 2
        except nbd.Error as e:      # the write in the failure may fail
            print(f"write of block {b} in the failure: {e}")
            gens[b] = (1, 2)
    s.wait_failed(0)
    st = s.wait_for("the failure's rescues", lambda x: x["rescues_pending"] == 0)
    pf = st["policy_figures"]
    want = segs[1] * PER_SEGMENT
    quantum = want // 16
    print(f"after: policy cache_blocks {pf.get('cache_blocks')} (the survivor's {want}), "
          f"window {pf['window_reads']} reads ({pf['window_reads'] / quantum:g} quanta of "
          f"{quantum} blocks; before {quanta:g})")
    if pf.get("cache_blocks") != want:
        sys.exit(f"after the failure the policy is sized for {pf.get('cache_blocks')} blocks, "
                 f"not the survivor's {want}")
    if pf["window_reads"] > WINDOW_MAX * quantum:
        sys.exit(f"the window ({pf['window_reads']} reads) exceeds the survivor's longest "
                 f"({WINDOW_MAX} quanta of {quantum})")
    if pf["window_reads"] != round(quanta * quantum):
        sys.exit(f"the window is {pf['window_reads']} reads, not its {quanta:g} quanta")
    for b in range(ORIGIN_BLOCKS):
        got = h.pread(BLOCK, b * BLOCK)
        ok = [block_pattern(b, g) for g in (gens[b] if isinstance(gens[b], tuple) else (gens[b],))]
        if got not in ok:
            sys.exit(f"block {b} read other data than its last")
    s.stop()
    print("every block reads its last data")


if __name__ == "__main__":
    main()
