#!/usr/bin/python3
"""A device failure that leaves a small survivor: two cache devices, one
of 11 segments of 1 MiB and one of SMALL (2 or 3), writeback.  The large
one fails (its writes fail: testdev eio_when) with dirty data on it.

The reserve is a segment per device in service (space.c,
space_drop_free()).  Before, it stayed at two segments after the failure,
all of it the survivor's share: a survivor of 3 segments kept 2 free and
every client write waited for room for good after some 200; one of 2
kept both, and the cleaner retired groups in a loop (thousands a second)
while every write waited.  Now: the reserve is one segment, every write
completes, the cleaner's tail records find room, and every block reads
its last data.

usage: devfailsmall.py --bin TIERCACHE --dir DIR --small SEGMENTS
"""
import argparse
import json
import os
import sys

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import DevFail, block_pattern as pattern  # noqa: E402

BLOCK = 64 << 10
ORIGIN_BLOCKS = 256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--small", type=int, required=True)
    a = ap.parse_args()
    s = DevFail(a.bin, a.dir, ORIGIN_BLOCKS * BLOCK, 12 << 20, (a.small + 1) << 20)
    s.WAIT = 60
    h = s.h
    status, wait = s.status, s.aio_wait
    gens = {}
    gen = 1

    def write(b):
        nonlocal gen
        gen += 1
        gens[b] = gen
        wait(f"write of block {b}", h.aio_pwrite(pattern(b, gen), b * BLOCK))

    for i in range(60):
        write(i)
    wait("flush", h.aio_flush())
    s.fail()
    for i in range(20):
        write(i)
    # The failure: the flush may report lost data (none here: the
    # dirty data is rescued or written back).
    wait("flush", h.aio_flush(), may_fail=True)
    s.wait_failed(0)
    for i in range(300):
        write((i * 7) % ORIGIN_BLOCKS)
    wait("flush", h.aio_flush(), may_fail=True)
    st = status()
    res = [x["segments_reserve"] for x in st["devices"]]
    print(f"survivor of {a.small} segments: reserve {st['segments_reserve']}, shares {res}")
    if st["segments_reserve"] != 1 or res[0] != 0:
        sys.exit(f"the reserve after the failure is {st['segments_reserve']} (shares {res}), "
                 f"not one segment, the survivor's\n{json.dumps(st)}")
    k = st["cleaner"]
    print(f"300 writes after the failure: {k['groups_retired']} groups retired, "
          f"tail records without room {k['tail_no_room']}, lost {st['lost_dirty_bytes']}")
    if k["tail_no_room"] != 0:
        sys.exit(f"tail records found no room {k['tail_no_room']} times")
    for b in range(ORIGIN_BLOCKS):
        buf = nbd.Buffer(BLOCK)
        wait(f"read of block {b}", h.aio_pread(buf, b * BLOCK))
        got = bytes(buf.to_bytearray())
        want = pattern(b, gens[b]) if b in gens else bytes(BLOCK)
        if got != want:
            sys.exit(f"block {b} read other data than its last ({gens.get(b)})")
    s.stop()
    print("every block reads its last data")


if __name__ == "__main__":
    main()
