#!/usr/bin/python3
"""What is sized by the cache's capacity, after a device failure: two
cache devices, one of 11 segments of 1 MiB (a, whose writes fail from the
moment the test says) and a survivor of 3 (b), writeback, 64 KiB blocks.

Sized by the whole cache (224 blocks) before; after the failure by the
devices in service (the survivor's 48, status blocks_in_service):
  - the policy (policy_figures.cache_blocks; s3fifo's ghost_blocks, half
    of them and 64);
  - the ghost of group fills (group_fill_ghost_blocks: an eighth, 28 ->
    6 blocks);
  - the index's hash table (memory.hash_buckets_bytes, 4 bytes a bucket):
    grown with the 200-odd blocks cached, it stayed at 128 buckets for a
    survivor that holds 48; now at most 64 (it halves while it has two
    buckets per entry, down to the 32 that 48 blocks need);
  - memory_per_block_bytes: per block in service;
  - writeback's dirty ratio (writeback.dirty_ratio, what its pace and the
    throttle go by): the dirty bytes' share of the survivor's room.
    Writeback passes are off (TIERCACHE_TEST_NO_WRITEBACK_PASSES), so
    the dirty data stays until the cleaner needs its room.
Every block reads the data of its last acknowledged write, after the
failure (its reads miss and fill the survivor, group fills among them)
and after a restart, which puts the failed device (readable again) back
in service: the figures are the whole cache's again.

usage: devfailsizing.py --bin TIERCACHE --dir DIR [--policy NAME]
"""
import argparse
import os
import sys

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import DevFail, Serve, block_pattern  # noqa: E402

BLOCK = 64 << 10
ORIGIN_BLOCKS = 256
PER_SEGMENT = 16        # blocks of 64 KiB in a segment of 1 MiB


def figures(st):
    """The figures that follow the capacity, from status volume.cache."""
    pf = st.get("policy_figures", {})
    return {"blocks_in_service": st.get("blocks_in_service"),
            "policy_cache_blocks": pf.get("cache_blocks"),
            "policy_ghost_blocks": pf.get("ghost_blocks"),
            "group_fill_ghost_blocks": st.get("group_fill_ghost_blocks"),
            "hash_buckets": st["memory"]["hash_buckets_bytes"] // 4,
            "blocks_cached": st["blocks_cached"],
            "memory_per_block_bytes": round(st["memory_per_block_bytes"], 1),
            "dirty_bytes": st["dirty_bytes"],
            "dirty_ratio": st["writeback"]["dirty_ratio"]}


def check_sized(what, f, blocks, policy, errors):
    """f is sized for a cache of blocks blocks."""
    want = {"blocks_in_service": blocks, "policy_cache_blocks": blocks,
            "group_fill_ghost_blocks": max(1, min(blocks // 8, 1024))}
    if policy == "s3fifo":
        want["policy_ghost_blocks"] = blocks // 2 + 64
    for k, v in want.items():
        if f[k] != v:
            errors.append(f"{what}: {k} is {f[k]}, not {v} (sized for {blocks} blocks)")
    share = f["dirty_bytes"] / (blocks * BLOCK)
    if abs(f["dirty_ratio"] - share) > 1e-4 * max(share, 1e-3):
        errors.append(f"{what}: dirty ratio {f['dirty_ratio']}, not the {f['dirty_bytes']} dirty "
                      f"bytes' share of {blocks} blocks ({share:.6g})")


def verify(h, gens, what):
    bad = []
    for b in range(ORIGIN_BLOCKS):
        try:
            got = h.pread(BLOCK, b * BLOCK)
        except nbd.Error as e:
            bad.append(f"block {b}: {e}")
            continue
        ok = [block_pattern(b, g) for g in gens[b]]
        if got not in ok:
            bad.append(f"block {b}: other data than its last (generation {gens[b]})")
    if bad:
        sys.exit(f"{what}: {len(bad)} blocks read wrong: {bad[:5]}")
    print(f"{what}: every block reads its last data")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--policy", default="default")
    a = ap.parse_args()
    s = DevFail(a.bin, a.dir, ORIGIN_BLOCKS * BLOCK, 12 << 20, 4 << 20,
                args=["--policy", a.policy],
                env=dict(os.environ, TIERCACHE_TEST_NO_WRITEBACK_PASSES="1"))
    h = s.h
    gens = {}
    for b in range(ORIGIN_BLOCKS):
        h.pwrite(block_pattern(b, 1), b * BLOCK)
        gens[b] = (1,)
    h.flush()
    for b in range(ORIGIN_BLOCKS):          # hits and misses, group fills
        h.pread(BLOCK, b * BLOCK)
    st = s.status()
    segs = [d["segments"] for d in st["devices"]]
    whole, survivor = sum(segs) * PER_SEGMENT, segs[1] * PER_SEGMENT
    before = figures(st)
    print(f"policy {a.policy}, segments {segs}: whole cache {whole} blocks, survivor {survivor}")
    print(f"before:  {before}")
    errors = []
    check_sized("before the failure", before, whole, a.policy, errors)
    if before["hash_buckets"] < 64:
        errors.append(f"before the failure: {before['hash_buckets']} hash buckets for "
                      f"{before['blocks_cached']} blocks cached (the test wants more than 64 "
                      f"cached, to see the table shrink)")
    if errors:
        sys.exit("\n".join(errors))

    s.fail()
    for b in range(8):
        try:
            h.pwrite(block_pattern(b, 2), b * BLOCK)
            gens[b] = (2,)
        except nbd.Error as e:      # the write in the failure may fail
            print(f"write of block {b} in the failure: {e}")
            gens[b] = (1, 2)
    s.wait_failed(0)
    s.wait_for("the failure's rescues", lambda x: x["rescues_pending"] == 0)
    # Dirty data on the survivor, for its ratio: a write, then the figures,
    # until they show some (the cleaner of so small a survivor may have
    # it written back at once to free room).
    for b in range(8, 40):
        h.pwrite(block_pattern(b, 2), b * BLOCK)
        gens[b] = (2,)
        st = s.status()
        after = figures(st)
        if after["dirty_bytes"]:
            break
    print(f"after:   {after} (blocks 8-{b} written again)")
    if after["dirty_bytes"] == 0:
        errors.append("after the failure: no dirty data (the test wants some, to see its ratio)")
    verify(h, gens, "after the failure")
    st = s.status()
    read = figures(st)
    print(f"read:    {read} (group fills {st['group_fills']}, read {st['group_fills_read']})")
    for what, f in (("after the failure", after), ("after its reads", read)):
        check_sized(what, f, survivor, a.policy, errors)
        # Halved while at least two buckets per entry, down to what the
        # survivor's blocks need: fewer than twice the entries, or that.
        fit = 16
        while fit * 2 < survivor:
            fit *= 2
        if f["hash_buckets"] > max(fit, 2 * f["blocks_cached"]) or \
                f["hash_buckets"] >= before["hash_buckets"]:
            errors.append(f"{what}: {f['hash_buckets']} hash buckets for {f['blocks_cached']} "
                          f"blocks cached and {survivor} in service (before "
                          f"{before['hash_buckets']}; {fit} fit the survivor)")
        if f["memory_per_block_bytes"] <= before["memory_per_block_bytes"]:
            errors.append(f"{what}: memory per block {f['memory_per_block_bytes']} B, not more "
                          f"than the whole cache's {before['memory_per_block_bytes']} B: not "
                          f"per block in service")
    if errors:
        sys.exit("\n".join(errors))
    s.stop()

    # The restart: the failed device reads again and is back in service.
    r = Serve(a.bin, a.dir, ["--origin", f"{a.dir}/origin.img", "--cache",
                             f"{a.dir}/a.img,{a.dir}/b.img", "--mode", "writeback",
                             "--sequential-cutoff", "0", "--policy", a.policy])
    st = r.status()
    states = [d["state"] for d in st["devices"]]
    again = figures(st)
    print(f"restart: {again}, devices {states}")
    if states != ["ok", "ok"]:
        sys.exit(f"after the restart the devices are {states}")
    check_sized("after the restart", again, whole, a.policy, errors)
    if errors:
        sys.exit("\n".join(errors))
    verify(r.h, gens, "after the restart")
    r.stop()


if __name__ == "__main__":
    main()
