#!/usr/bin/python3
"""A LOST record outlives the chunk that holds it when the cache cannot
read that chunk, or loses the device it is on.

A block (the victim) is written in writeback mode and the daemon stops,
leaving it dirty; its data in the cache is then damaged (every sector's
checksum fails).  The daemon serves again and reads of the rest of the
volume fill the cache until the cleaner drops the victim as lost: a LOST
record in the log says so, and the daemon stops cleanly.  The newest chunk
holding that record is found in the cache images (chunk headers parsed
here).  Then (--case):

  chunk   one cache device.  The daemon serves again with reads of exactly
          that chunk failing (testdev eio_range; the chunk holds no dirty
          data, so the cleaner's walk does not wait for it) and fills the
          cache again until the cleaner has reclaimed the group holding it.
          (Before the fix the cleaner carried LOST records forward only
          from the chunks it read: the record went with the group.)
  device  two cache devices.  The daemon serves again and the device
          holding the chunk fails (every request on it fails with EIO
          until the daemon declares it failed); the other serves on.
          (Before the fix the lost set was recorded only where it had
          been: the record went with the device.)

After a restart every sector of the victim must still fail with EIO --
never read the origin's older data.

usage: lostcarry.py --bin TIERCACHE --dir DIR --case chunk|device
"""
import argparse
import json
import os
import random
import re
import struct
import subprocess
import sys

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import Serve, tagged_gen, tagged_sector  # noqa: E402

SECTOR = 4096
BLOCK = 64 << 10
SPB = BLOCK // SECTOR
SEGMENT = 1 << 20
DATA_OFFSET = 1 << 20           # where segment 0 starts on the cache device
CACHE_MIB = 10
SEGS_PER_DEV = (CACHE_MIB << 20) // SEGMENT - 1     # the first MiB: superblocks
MAGIC = b"TCLSTCR1"
VICTIM = 5

CHUNK_MAGIC = 0x014B4E5548434354
ENTRY_LOST = 4
ENTRY_SIZE = 32 + 2 * 8 * ((SPB + 63) // 64)


def pattern(off, gen):
    return tagged_sector(MAGIC, off, gen, SECTOR)


def gen_of(off, data):
    return tagged_gen(MAGIC, off, data)


class Daemon(Serve):
    def __init__(self, a, cache):
        super().__init__(a.bin, a.dir, ["--origin", f"{a.dir}/origin.img", "--cache", cache,
                                        "--mode", "writeback", "--policy", "fifo",
                                        "--sequential-cutoff", "0"])


def victim_reads(d, what):
    """Every sector of the victim block must fail: none may be the origin's."""
    for s in range(VICTIM * SPB, (VICTIM + 1) * SPB):
        try:
            data = d.h.pread(SECTOR, s * SECTOR)
        except nbd.Error:
            continue
        sys.exit(f"{what}: sector {s} of the lost dirty block read generation "
                 f"{gen_of(s * SECTOR, data)} instead of failing with EIO\n"
                 f"{d.logtext()[-3000:]}")


def lost_chunk(paths):
    """(device index, byte offset, length, chunk_seq) of the newest chunk
    holding a LOST record of the victim, or None."""
    best = None
    for dev, path in enumerate(paths):
        img = open(path, "rb").read()
        for p in range(DATA_OFFSET, len(img), SECTOR):
            if struct.unpack_from("<Q", img, p)[0] != CHUNK_MAGIC:
                continue
            chunk_seq, = struct.unpack_from("<Q", img, p + 40)
            hdr, _, data, n = struct.unpack_from("<HHII", img, p + 72)
            for i in range(n):
                e = p + 128 + i * ENTRY_SIZE
                oblock, = struct.unpack_from("<Q", img, e)
                if img[e + 16] == ENTRY_LOST and oblock == VICTIM and \
                        (best is None or chunk_seq > best[3]):
                    best = (dev, p, (hdr + data) * SECTOR, chunk_seq)
    return best


def fill(d, others, rng, until, what):
    """Read blocks of the volume not cached yet until until() holds."""
    for _ in range(12):
        rng.shuffle(others)
        for n, b in enumerate(others):
            if d.h.pread(BLOCK, b * BLOCK)[:8] != MAGIC:
                sys.exit(f"block {b} reads wrong data")
            if n % 8 == 7 and until():
                return
    sys.exit(f"{what}: never happened; status:\n{json.dumps(d.status())}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--case", choices=("chunk", "device"), required=True)
    a = ap.parse_args()
    ndevs = 1 if a.case == "chunk" else 2
    nblocks = (24 * ndevs << 20) // BLOCK     # the origin: more than the cache
    imgs = [f"{a.dir}/cache{i}.img" for i in range(ndevs)]
    cache = ",".join(imgs)
    with open(f"{a.dir}/origin.img", "wb") as f:
        for s in range(nblocks * SPB):
            f.write(pattern(s * SECTOR, 1))
    for img in imgs:
        with open(img, "wb") as f:
            f.truncate(CACHE_MIB << 20)
    subprocess.run([a.bin, "format", "--cache", cache, "--origin", f"{a.dir}/origin.img",
                    "--segment-size", str(SEGMENT), "--block-size", str(BLOCK)],
                   check=True, stdout=subprocess.DEVNULL)

    # The victim, dirty: written, flushed and stopped at once (writeback
    # waits for a second of client idleness before it starts).
    d = Daemon(a, cache)
    off = VICTIM * BLOCK
    d.h.pwrite(b"".join(pattern(off + i * SECTOR, 2) for i in range(SPB)), off)
    d.h.flush()
    d.stop()
    dump = subprocess.run([a.bin, "dump", "--cache", cache, "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    m = re.search(rf"^block {VICTIM} valid #+ dirty (#+) \| (\d+):(\d+) x16$", dump, re.M)
    if m is None or len(m.group(1)) != SPB:
        sys.exit(f"block {VICTIM} is not one dirty fragment after the stop:\n{dump}")
    seg, at = int(m.group(2)), int(m.group(3))
    with open(imgs[seg // SEGS_PER_DEV], "r+b") as f:
        for i in range(SPB):
            p = DATA_OFFSET + seg % SEGS_PER_DEV * SEGMENT + (at + i) * SECTOR + 100
            f.seek(p)
            b = f.read(1)[0]
            f.seek(p)
            f.write(bytes([b ^ 0x5A]))

    # The cleaner drops the victim as lost: a LOST record.
    rng = random.Random(5)
    others = [b for b in range(nblocks) if b != VICTIM]
    d = Daemon(a, cache)
    fill(d, others, rng, lambda: d.status()["lost_dirty_bytes"] == BLOCK,
         "the victim dropped as lost")
    victim_reads(d, "after the cleaner dropped it")
    d.stop()
    found = lost_chunk(imgs)
    if found is None:
        sys.exit("no LOST record of the victim in the cache images")
    dev, lat, llen, lseq = found
    print(f"LOST record of block {VICTIM}: chunk {lseq} on device {dev} at byte {lat}, "
          f"{llen} bytes")

    boom = f"{a.dir}/boom"
    if a.case == "chunk":
        # Reads of that chunk fail while the cleaner reclaims its group.
        d = Daemon(a, f"testdev:{cache}?eio_when={boom}&eio_ops=read&eio_range={lat}+{llen}")
        victim_reads(d, "after a clean restart")
        open(boom, "w").close()
        failed = re.compile(rf"read of \d+ bytes at offset {lat} failed")
        fill(d, others, rng, lambda: failed.search(d.logtext()) is not None,
             "the cleaner's read of the chunk holding the LOST record failing")
        os.unlink(boom)
        # The group reclaimed: the walk that failed was that of the group
        # being reclaimed, so two more reclaims are certainly past it.
        r = d.status()["cleaner"]["groups_retired"]
        fill(d, others, rng, lambda: d.status()["cleaner"]["groups_retired"] >= r + 2,
             "the group holding the LOST record reclaimed")
        st = d.status()
        if any(x["state"] != "ok" for x in st["devices"]) or st.get("abandoned"):
            sys.exit(f"the cache device failed:\n{json.dumps(st)}")
        what = "the group holding the LOST record reclaimed while that chunk could not be read"
    else:
        # The device holding that chunk fails; the other serves on.
        specs = list(imgs)
        specs[dev] = f"testdev:{imgs[dev]}?eio_when={boom}"
        d = Daemon(a, ",".join(specs))
        victim_reads(d, "after a clean restart")
        open(boom, "w").close()
        for i in range(2000):
            st = d.status()
            if st["devices"][dev]["state"] != "ok":
                break
            b = others[i % len(others)]
            try:
                d.h.pwrite(pattern(b * BLOCK, 1) * SPB, b * BLOCK)
                d.h.flush()
            except nbd.Error:
                pass
        else:
            sys.exit(f"device {dev} never failed:\n{json.dumps(st)}")
        os.unlink(boom)
        if st.get("abandoned") or st["devices"][1 - dev]["state"] != "ok":
            sys.exit(f"the other device failed too:\n{json.dumps(st)}")
        what = "the device holding the LOST record failed"
    victim_reads(d, f"after {what}")
    d.stop()

    d = Daemon(a, cache)
    victim_reads(d, f"after a restart, {what}")
    d.stop()
    print(f"the LOST record outlived its chunk: {what}")


if __name__ == "__main__":
    main()
