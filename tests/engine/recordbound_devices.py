#!/usr/bin/python3
"""Tombstones and clean records go to every cache device in service (log.c,
extras_fit()): with three or four devices each record costs three or four
copies.  The room the cleaner keeps for records (cleaner.c, record_room(),
cleaner_record_fits(), cleaner_client_record_fits()) must still let every
pass end, and client writes must never be refused for lack of it.

The cache: N devices (3 or 4) of 7 MiB, 6 segments of 1 MiB each (the fewest format takes) (the
reserve: one a device), 16 KiB blocks, writeback, policy lru, an origin
of 1024 blocks (16 MiB: more than the cache).  A seeded mix of writes
(dirty), trims and overwrites, most followed by a FLUSH (so each record
is a chunk of its own, a header sector on every device), with write-backs
(tiercache flush) every few hundred requests: the log fills with records
many times over, and the cleaner reclaims it.  Checked:
  - every request completes within the bound and none fails;
  - every tail record found room (cleaner.tail_no_room 0);
  - after a kill (SIGKILL) following a FLUSH, a restart reads every
    block's last data (trimmed blocks: their data or zeroes), and again
    after a clean stop and start.

usage: recordbound_devices.py --bin TIERCACHE --dir DIR --devices N [--ops N] [--seed N]
"""
import argparse
import os
import random
import struct
import subprocess
import sys

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import BoundDaemon, magic_block_pattern, make_bound_set  # noqa: E402

BLOCK = 16 << 10
SEGMENT = 1 << 20
DEV_MIB = 7
ORIGIN_BLOCKS = 1024
MAGIC = b"TCRECDV1"


def pattern(b, gen):
    return magic_block_pattern(MAGIC, b, gen, BLOCK)


class Daemon(BoundDaemon):
    def wait(self, what, cookie):
        if not self.wait_request(what, cookie):
            sys.exit(f"{what} failed\n{self.logtext()[-3000:]}")

    def read(self, b):
        buf = nbd.Buffer(BLOCK)
        self.wait(f"read of block {b}", self.h.aio_pread(buf, b * BLOCK))
        return bytes(buf.to_bytearray())

    def write(self, b, gen):
        self.wait(f"write of block {b}", self.h.aio_pwrite(
            nbd.Buffer.from_bytearray(bytearray(pattern(b, gen))), b * BLOCK))

    def trim(self, b):
        self.wait(f"trim of block {b}", self.h.aio_trim(BLOCK, b * BLOCK))

    def flush(self):
        self.wait("flush", self.h.aio_flush())


def check_all(d, gens, trimmed, what):
    bad = []
    for b in range(ORIGIN_BLOCKS):
        data = d.read(b)
        if data == pattern(b, gens[b]) or (b in trimmed and data == bytes(BLOCK)):
            continue
        got = struct.unpack_from("<QQ", data, 8) if data[:8] == MAGIC else None
        bad.append(f"block {b} read {got}, not generation {gens[b]}")
    if bad:
        sys.exit(f"{what}: {len(bad)} blocks wrong: " + "; ".join(bad[:8]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    names = [(f"a{i}.img", DEV_MIB) for i in range(a.devices)]
    gens = make_bound_set(a.bin, a.dir, pattern, ORIGIN_BLOCKS, BLOCK, names, SEGMENT)
    cache = ",".join(f"{a.dir}/{n}" for n, _ in names)
    env = {"TIERCACHE_TEST_CKPT_BYTES": "0"}
    d = Daemon(a.bin, a.dir, cache, env=env)
    st = d.status()
    print(f"{a.devices} devices, {st['segments']} segments, reserve {st['segments_reserve']}")
    rnd = random.Random(a.seed)
    trimmed = set()
    hot = list(range(0, ORIGIN_BLOCKS, 3))
    for i in range(a.ops):
        b = rnd.choice(hot) if rnd.random() < 0.7 else rnd.randrange(ORIGIN_BLOCKS)
        if rnd.random() < 0.5:
            gens[b] += 1
            d.write(b, gens[b])
            trimmed.discard(b)
        else:
            d.trim(b)
            trimmed.add(b)
        if rnd.random() < 0.8:
            d.flush()
        if i % 400 == 399:
            subprocess.run([a.bin, "flush", "--socket", d.sock], check=True,
                           stdout=subprocess.DEVNULL, timeout=300)
    d.flush()
    st = d.status()
    k = st["cleaner"]
    print(f"tail records with no room {k['tail_no_room']}, least room at a tail record "
          f"{k.get('tail_room_min', 0)}, records deferred {k['records_deferred']}, "
          f"client records refused {k['client_records_refused']}, records waiting for a device "
          f"{st['log']['records_waiting_for_a_device']}")
    if k["tail_no_room"] != 0:
        sys.exit(f"{k['tail_no_room']} tail records found no room")
    d.proc.kill()
    d.proc.wait()
    d = Daemon(a.bin, a.dir, cache, env=env)
    check_all(d, gens, trimmed, "after the kill")
    d.stop()
    d = Daemon(a.bin, a.dir, cache, env=env)
    check_all(d, gens, trimmed, "after a clean stop")
    d.stop()
    print("ok")


main()
