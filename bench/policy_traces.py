#!/usr/bin/env python3
"""bench/policy_traces.py DIR SCALE: synthetic block traces for the policy
workload, written once into DIR as native tiercache traces (the format of
serve --trace, src/trace/trace.h).  4 KiB requests unless said.

  zipf        zipf(0.9) reads over 64K blocks (ranks scattered)
  hotscan     a hot set of 2K blocks read 2 times in 3, and one-pass
              sequential scans of new blocks in between
  loop        a loop over 12K blocks, plus zipf reads: LRU's worst case
  writeonce   issue 18's git checkout: a 9.5K-block pack written once then
              read again after each of 5 floods of 20K blocks written once
              and never read, with small zipf metadata reads throughout
  mixed       issue 17's write-heavy unaligned load: zipf(0.9) over 64K
              blocks, 35 % writes, offsets at any 512-byte boundary and
              lengths of 512 bytes to 32 KiB (most requests cover partial
              4 KiB sectors)

  writeheavy  issue 17's write-heavy stream: zipf(0.9) over 256K blocks
              (1 GiB), 70 % writes, 1 to 4 blocks a request; 2M requests
              at the default scale; made only when named

SCALE small makes 200K requests per trace, default 1M.  Names after SCALE
make those traces only.
"""
import os
import random
import struct
import sys

BS = 4096


def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xffffffff


def write(path, reqs):
    """reqs: (op, block, nblocks), or (op, block, nblocks, byte offset
    added, byte length) for requests not in whole blocks."""
    h = bytearray(b"TCTRACE\n" + struct.pack("<IIIIQQII", 1, 64, 24, 0, 0, 0, 0, 0) + bytes(16))
    struct.pack_into("<I", h, 44, crc32c(bytes(h)))
    rec = struct.Struct("<QQIBBH")
    buf = bytearray(rec.size * len(reqs))
    for i, r in enumerate(reqs):
        op, block, nblocks = r[:3]
        off, length = (r[3], r[4]) if len(r) > 3 else (0, nblocks * BS)
        rec.pack_into(buf, i * rec.size, i * 100000, block * BS + off, length, op, 0, 0)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(bytes(h))
        f.write(bytes(buf))
    os.rename(tmp, path)


class Zipf:
    def __init__(self, rnd, n, alpha, base=0):
        self.rnd, self.n, self.base = rnd, n, base
        cw, s = [], 0.0
        for i in range(n):
            s += 1 / (i + 1) ** alpha
            cw.append(s)
        self.cw = cw

    def take(self, k):
        return [self.base + r * 7919 % (4 * self.n)
                for r in self.rnd.choices(range(self.n), cum_weights=self.cw, k=k)]


def zipf(rnd, n):
    return [(0, b, 1) for b in Zipf(rnd, 65536, 0.9).take(n)]


def hotscan(rnd, n):
    out, nxt = [], 1 << 20
    while len(out) < n:
        for _ in range(2000):
            out.append((0, rnd.randrange(2048), 1))
        for _ in range(1000):
            out.append((0, nxt, 1))
            nxt += 1
    return out[:n]


def loop(rnd, n):
    z = Zipf(rnd, 16384, 0.9, base=1 << 20).take(n)
    return [(0, i % 12288, 1) if i % 2 else (0, z[i], 1) for i in range(n)]


def writeonce(rnd, n):
    out, meta = [], Zipf(rnd, 4096, 1.0, base=1 << 22)
    pack, fresh = 9728, 1 << 24
    out += [(1, b, 16) for b in range(0, pack, 16)]             # the clone writes the pack
    while len(out) < n:
        m = iter(meta.take(40000))
        for b in range(0, pack, 16):                            # a checkout reads it
            out.append((0, b, 16))
            out.append((0, next(m), 1))
        for _ in range(20480 // 16):                            # and writes new files
            out.append((1, fresh, 16))
            fresh += 16
            out.append((0, next(m), 1))
    return out[:n]


def mixed(rnd, n):
    blocks = Zipf(rnd, 65536, 0.9).take(n)
    return [(1 if rnd.random() < 0.35 else 0, b, 1, 512 * rnd.randrange(8),
             512 * rnd.randint(1, 64)) for b in blocks]


def writeheavy(rnd, n):
    blocks = [r * 7919 % 262144 for r in
              rnd.choices(range(262144), cum_weights=Zipf(rnd, 262144, 0.9).cw, k=n)]
    return [(1 if rnd.random() < 0.7 else 0, b, rnd.randint(1, 4)) for b in blocks]


def main():
    d, scale = sys.argv[1], sys.argv[2]
    n = 200000 if scale == "small" else 1000000
    os.makedirs(d, exist_ok=True)
    gens = (("zipf", zipf), ("hotscan", hotscan), ("loop", loop),
            ("writeonce", writeonce), ("mixed", mixed))
    if len(sys.argv) > 3:
        gens = [(g, globals()[g]) for g in sys.argv[3:]]
    for name, gen in gens:
        k = 2 * n if name == "writeheavy" else n
        path = os.path.join(d, f"{name}-{k}.trace")
        if not os.path.exists(path):
            write(path, gen(random.Random(name), k))
        print(path)


main()
