#!/usr/bin/python3
"""The cleaner's free-space marks after a device failure: two cache
devices, one of 1 GiB (1023 segments of 1 MiB) that fails (its writes
fail: testdev eio_when, eio_ops=write) and a survivor of 8 MiB (7
segments), writeback.

The marks count the devices in service only (space.c, space_low_water()).
Before, they counted the failed device's segments too: the survivor was
to keep 19 segments free (reserve 1 + a group of 2 + 1030/64) and has 7,
so the cleaner never reached its high mark and, the volume idle, retired
group after group (some 100 a second), copying the blocks the policy kept
until they lapsed and the survivor held nothing.  Now the marks are the
survivor's (1 + 1 + 7/64 = 2): once the failure is dealt with and the
blocks read again are cached, the idle volume's cleaner retires nothing
over a fixed number of status polls (a generous bound), the blocks read
again stay cached (read hits), the reserve holds the cleaner's record
room, and every block reads its last acknowledged data (no dirty data is
lost: the failed device's reads still work, what it held is rescued).

usage: devfailmarks.py --bin TIERCACHE --dir DIR
"""
import argparse
import os
import sys
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import DevFail, block_pattern as pattern  # noqa: E402

BLOCK = 64 << 10
ORIGIN_BLOCKS = 512
HOT = 16                # blocks read again: 1 MiB, a segment of the survivor
POLLS = 40              # status polls of the idle volume
RETIRED_BOUND = 4       # groups its cleaner may retire meanwhile (before: hundreds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    s = DevFail(a.bin, a.dir, ORIGIN_BLOCKS * BLOCK, 1 << 30, 8 << 20)
    h = s.h
    status, wait_for = s.status, s.wait_for

    gens = {}
    maybe = {}          # block -> the generation of a write that failed
    gen = 0

    def write(b):
        nonlocal gen
        gen += 1
        try:
            h.pwrite(pattern(b, gen), b * BLOCK)
            gens[b] = gen
            maybe.pop(b, None)
        except nbd.Error:
            maybe[b] = gen

    def read_hot(times):
        for _ in range(times):
            for b in range(HOT):
                h.pread(BLOCK, b * BLOCK)

    for b in range(ORIGIN_BLOCKS):
        write(b)
    h.flush()
    read_hot(3)
    s.fail()
    for i in range(20):
        write((i * 13) % ORIGIN_BLOCKS)
    try:
        h.flush()
    except nbd.Error as e:
        print(f"the flush after the failure: {e}")
    wait_for("the first device's failure", lambda s: s["devices"][0]["state"] != "ok")
    # The failure dealt with: what it held rescued, its records synced.
    wait_for("the failure's rescues", lambda s: s["rescues_pending"] == 0 and
             s["cleaner"]["appends_waiting_for_room"] == 0)
    # The blocks read again, after the failure: cached on the survivor
    # (their fills land after the replies: wait for them).
    read_hot(2)
    wait_for("the hot blocks' fills", lambda s: s["fills_under_way"] == 0)
    read_hot(1)
    # Idle: a fixed number of polls, the groups retired meanwhile.
    st0 = status()
    for _ in range(POLLS):
        st = status()
        time.sleep(0.05)
    retired = st["cleaner"]["groups_retired"] - st0["cleaner"]["groups_retired"]
    print(f"idle over {POLLS} status polls: {retired} groups retired "
          f"({st0['cleaner']['groups_retired']} since the start), survivor "
          f"{st['devices'][1]['segments_free']} segments free")
    if retired > RETIRED_BOUND:
        sys.exit(f"the idle volume's cleaner retired {retired} groups over {POLLS} polls "
                 f"(bound {RETIRED_BOUND}): marks {st.get('segments_low_water')}/"
                 f"{st.get('segments_high_water')}, {st['segments_free']} segments free")
    hits0 = status()["read_hits"]
    read_hot(1)
    hits = status()["read_hits"] - hits0
    print(f"the hot blocks read again: {hits} of {HOT} hits")
    if hits < HOT * 3 // 4:
        sys.exit(f"only {hits} of the {HOT} blocks read again were still cached")
    st = status()
    surv = st["devices"][1]
    want_low = st["segments_reserve"] + 1 + surv["segments"] // 64
    print(f"marks {st['segments_low_water']}/{st['segments_high_water']} "
          f"(the survivor's: {want_low}), reserve {st['segments_reserve']}, survivor "
          f"{surv['segments']} segments, {surv['segments_free']} free, record room "
          f"{st['cleaner']['record_room']} sectors")
    if st["segments_low_water"] != want_low:
        sys.exit(f"the low mark is {st['segments_low_water']}, not the survivor's {want_low}")
    if st["cleaner"]["record_room"] * 512 > st["segments_reserve"] * st["segment_size"]:
        sys.exit(f"the reserve ({st['segments_reserve']} segments) does not hold the "
                 f"cleaner's record room ({st['cleaner']['record_room']} sectors)")
    # No acknowledged data lost: every block reads its last data (or,
    # written when the write failed, that data or the one before).
    lost = st["lost_dirty_bytes"]
    if lost != 0:
        sys.exit(f"{lost} dirty bytes lost (the failed device's reads work)")
    for b in range(ORIGIN_BLOCKS):
        try:
            got = h.pread(BLOCK, b * BLOCK)
        except nbd.Error as e:
            sys.exit(f"read of block {b}: {e}")
        ok = [pattern(b, gens[b])] + ([pattern(b, maybe[b])] if b in maybe else [])
        if got not in ok:
            sys.exit(f"block {b} read other data than its last ({gens.get(b)})")
    s.stop()
    print(f"every block reads its last data ({len(maybe)} writes failed in the failure)")


if __name__ == "__main__":
    main()
