#!/usr/bin/python3
"""Corruption of a cache device: flipped bytes are found, never served.

Two pristine cache images are prepared once, with a tagged pattern whose
every 4 KiB sector names its offset and generation (as in crashloop.py):

  clean  written in writethrough mode (some blocks several times, so older
         versions lie superseded in the log) and cleanly stopped: all the
         cached data is also on the origin;
  dirty  the clean image, then more writes in writeback mode, a completed
         FLUSH and a SIGKILL: part of the cached data exists nowhere else.

Each seed copies one of them (and its origin), flips 1 to 3 bytes at random
positions of one kind of place -- a superblock copy, a chunk header (the
summary) of a live segment, the data of a live chunk, space no live
structure uses, or a mix -- and then asserts:

  - tiercache check exits 1 and names the damage whenever the flips touched
    a superblock or a live chunk header: both images were stopped cleanly,
    so their superblocks hold the clean-stop record, which says every live
    chunk was durable whatever damaged headers say (without it a header no
    intact chunk records durable could be a write torn by a crash); when
    check exits 0, serve must find nothing wrong either;
  - tiercache serve either refuses to start with a message (allowed only
    when a chunk header is damaged: the blocks it described are unknown, so
    lost dirty data could not be told apart from good data) or serves the
    whole volume where every sector reads back as its newest generation, or
    fails with EIO -- and EIO only where the sector was dirty in the cache
    and check listed its origin range as lost;
  - the daemon stays up through all of it and exits 0 on SIGTERM.

serve runs with TIERCACHE_TEST_FORCE_SCAN: what is asserted is the scan of
the log and the damage it finds.  A start from the checkpoint the clean stop
wrote reads no chunk summary; a damaged one then makes reads of its chunk's
data fail (its checksums cannot be loaded) instead of refusing the cache
(tests/crash/checkpoint*.test).  Flips in space no live structure uses may
hit that checkpoint: check then reports it, and the scan is used anyway.

usage: corrupt.py --bin TIERCACHE --dir DIR --seeds N [--first S]
"""
import argparse
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import connect_when_up  # noqa: E402

SECTOR = 4096
# What an image is: the origin, the cache, and the cache's sequence record
# (beside its state file), copied together so that a run starts from a
# consistent whole rather than from an older copy of the cache, which
# serve refuses.
IMAGE_FILES = ("origin.img", "cache.img", "cache.img.tcseq")
MAGIC = b"TCCORRP1"
CHUNK_MAGIC = 0x014B4E5548434354
CLEAN_STOP = 1 << 1     # TC_CHUNK_CLEAN_STOP
DATA_OFFSET = 1 << 20
BLOCK = 64 << 10
SEGMENT = 1 << 20
ORIGIN_MIB = 12
CACHE_MIB = 10
NSECT = (ORIGIN_MIB << 20) // SECTOR


def pattern(off, gen):
    head = MAGIC + struct.pack("<QQ", off, gen)
    body = hashlib.blake2b(head, digest_size=64).digest() * 64
    return head + body[:SECTOR - len(head)]


def parse(off, data):
    """The generation a sector holds, or None if it is not its own tag."""
    if data[:8] != MAGIC:
        return None
    o, g = struct.unpack("<QQ", data[8:24])
    if o != off or data != pattern(off, g):
        return None
    return g


def start(a, d, mode, log):
    sock = f"{d}/s.sock"
    if os.path.exists(sock):
        os.unlink(sock)
    proc = subprocess.Popen([a.bin, "serve", "--origin", f"{d}/origin.img", "--cache",
                             f"{d}/cache.img", "--mode", mode, "--socket", sock,
                             "--foreground"] +
                            # keep the dirty data: no write-back while busy
                            (["--dirty-target", "90", "--dirty-high", "95"]
                             if mode == "writeback" else []),
                            stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TIERCACHE_TEST_FORCE_SCAN="1"))
    return proc, connect_when_up(f"nbd+unix:///?socket={sock}", proc)


def stop(proc, what):
    proc.send_signal(signal.SIGTERM)
    if proc.wait() != 0:
        sys.exit(f"{what}: daemon exit status {proc.returncode} after SIGTERM")


def write_run(h, gens, start_s, count, gen):
    buf = b"".join(pattern((start_s + i) * SECTOR, gen) for i in range(count))
    h.pwrite(buf, start_s * SECTOR)
    for i in range(count):
        gens[start_s + i] = gen


def forget_stops():
    """The set's stop record (kept with the origin records) names the chunk
    of its last clean stop, which an image taken before it lacks: a run
    that puts an image back is a restore on purpose, as if the stop
    record had been put back with it."""
    rec = os.environ.get("TIERCACHE_ORIGIN_RECORDS")
    if rec:
        for f in glob.glob(f"{rec}/set-*.tcstop"):
            os.unlink(f)


def workload(h, gens, rng, nwrites, next_gen):
    for _ in range(nwrites):
        start_s = rng.randrange(0, NSECT - 32)
        count = rng.choice([1, 2, 5, 16, 32])
        write_run(h, gens, start_s, count, next_gen)
        next_gen += 1
    return next_gen


def prepare(a):
    """The two pristine images and what every sector must read back as."""
    # The origin's identity is its inode: every seed restores the images
    # into these same files, in place, with their modification times
    # (copy2): a start refuses a file origin whose time is not the one the
    # clean stop recorded (written while the cache was stopped).
    d = f"{a.dir}/run"
    os.makedirs(d, exist_ok=True)
    gens = [1] * NSECT
    with open(f"{d}/origin.img", "wb") as f:
        for s in range(NSECT):
            f.write(pattern(s * SECTOR, 1))
    with open(f"{d}/cache.img", "wb") as f:
        f.truncate(CACHE_MIB << 20)
    subprocess.run([a.bin, "format", "--cache", f"{d}/cache.img", "--origin",
                    f"{d}/origin.img", "--segment-size", str(SEGMENT), "--block-size",
                    str(BLOCK)], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(12345)
    log = open(f"{a.dir}/prepare.log", "a")

    # Clean: writethrough writes and rewrites, reads to admit origin data.
    proc, h = start(a, d, "writethrough", log)
    if h is None:
        sys.exit("prepare: daemon exited at start")
    gen = workload(h, gens, rng, 150, 2)
    for _ in range(3):
        for base in range(0, NSECT // 3, 64):
            h.pread(64 * SECTOR, base * SECTOR)
    gen = workload(h, gens, rng, 60, gen)
    h.shutdown()
    del h
    stop(proc, "prepare clean")
    images = {"clean": (f"{a.dir}/img-clean", list(gens), "writethrough")}
    os.makedirs(images["clean"][0], exist_ok=True)
    for n in IMAGE_FILES:
        shutil.copy2(f"{d}/{n}", f"{images['clean'][0]}/{n}")

    # Dirty: then writeback writes, a FLUSH, and a crash.
    proc, h = start(a, d, "writeback", log)
    if h is None:
        sys.exit("prepare: daemon exited at start")
    gen = workload(h, gens, rng, 250, gen)
    h.flush()
    h.shutdown()
    del h
    stop(proc, "prepare dirty")
    images["dirty"] = (f"{a.dir}/img-dirty", list(gens), "writeback")
    os.makedirs(images["dirty"][0], exist_ok=True)
    for n in IMAGE_FILES:
        shutil.copy2(f"{d}/{n}", f"{images['dirty'][0]}/{n}")

    forget_stops()
    for name, (idir, _, _) in images.items():
        chk = subprocess.run([a.bin, "check", "--cache", f"{idir}/cache.img", "--json"],
                             capture_output=True, text=True)
        if chk.returncode != 0:
            sys.exit(f"pristine {name} image is not clean:\n{chk.stdout}{chk.stderr}")
        if not json.loads(chk.stdout).get("clean_stop_recorded"):
            sys.exit(f"pristine {name} image: no clean-stop record in its superblocks")
    return images


def layout(a, cache):
    """Live structures of an image: chunk header and data sector ranges
    (byte offsets), dirty sectors by origin sector number."""
    out = subprocess.run([a.bin, "dump", "--cache", cache, "--blocks"], capture_output=True,
                         text=True, check=True).stdout
    live = {}
    dirty = set()
    for line in out.splitlines():
        if line.startswith("group seq"):
            for seg, fill in re.findall(r"\[segment (\d+): fill (\d+),", line):
                live[int(seg)] = int(fill)
        m = re.match(r"block (\d+) valid \S+ dirty (\S+)", line)
        if m:
            b = int(m.group(1))
            for i, ch in enumerate(m.group(2)):
                if ch == "#":
                    dirty.add(b * (BLOCK // SECTOR) + i)
    headers, data = [], []
    with open(cache, "rb") as f:
        img = f.read()
    for seg, fill in live.items():
        base = DATA_OFFSET + seg * SEGMENT
        at = 0
        while at < fill:
            p = base + at * SECTOR
            magic, = struct.unpack_from("<Q", img, p)
            hs, = struct.unpack_from("<H", img, p + 72)
            ds, = struct.unpack_from("<I", img, p + 76)
            if magic != CHUNK_MAGIC or struct.unpack_from("<I", img, p + 64)[0] != seg:
                sys.exit(f"layout: no chunk header at segment {seg} sector {at}")
            flags, = struct.unpack_from("<H", img, p + 74)
            entries, = struct.unpack_from("<I", img, p + 80)
            headers.append((p, p + hs * SECTOR, struct.unpack_from("<Q", img, p + 40)[0],
                            struct.unpack_from("<Q", img, p + 96)[0], flags, entries))
            if ds:
                data.append((p + hs * SECTOR, p + (hs + ds) * SECTOR))
            at += hs + ds
    # The newest chunk is the empty one a clean stop writes last, to record
    # the others as flushed; the superblocks' clean-stop record, written
    # after the stop's last sync, records it in turn.  The stop waits for
    # write-back in flight before that sync, so every other chunk is
    # recorded durable by the log too.
    durable = max(h[3] for h in headers)
    for lo, hi, seq, _, flags, entries in headers:
        if seq <= durable:
            continue
        if not flags & CLEAN_STOP or entries:
            sys.exit(f"layout: chunk {seq} at byte {lo} (flags {flags:#x}, {entries} entries) "
                     f"is recorded durable by no later chunk, and is not the stop's empty mark")
    marks = [(lo, hi, seq, flushed) for lo, hi, seq, flushed, _, _ in headers]
    headers = [h[:2] for h in headers]
    used = [(0, 2 * SECTOR)] + [(DATA_OFFSET + s * SEGMENT, DATA_OFFSET + s * SEGMENT +
                                 f * SECTOR) for s, f in live.items()]
    return headers, data, used, dirty, marks


def pick(rng, ranges):
    lo, hi = rng.choice(ranges)
    return rng.randrange(lo, hi)


def unused_pick(rng, used, size):
    while True:
        p = rng.randrange(2 * SECTOR, size)
        if not any(lo <= p < hi for lo, hi in used):
            return p


def run_seed(a, seed, images, layouts, stats):
    rng = random.Random(seed)
    name = "dirty" if seed % 2 else "clean"
    idir, gens, mode = images[name]
    headers, data, used, dirty, marks = layouts[name]
    d = f"{a.dir}/run"
    forget_stops()
    for n in IMAGE_FILES:
        shutil.copy2(f"{idir}/{n}", f"{d}/{n}")
    kind = ["superblock", "header", "data", "data", "unused", "mixed"][(seed // 2) % 6]
    size = os.path.getsize(f"{d}/cache.img")
    flips = []
    for i in range(rng.randint(1, 3)):
        k = kind if kind != "mixed" else rng.choice(["superblock", "header", "data", "unused"])
        if k == "superblock":
            p = rng.randrange(0, 2 * SECTOR)
        elif k == "header":
            p = pick(rng, headers)
        elif k == "data":
            p = pick(rng, data)
        else:
            p = unused_pick(rng, used, size)
        flips.append((k, p, rng.randrange(1, 256)))
    with open(f"{d}/cache.img", "r+b") as f:
        for k, p, x in flips:
            f.seek(p)
            b = f.read(1)[0]
            f.seek(p)
            f.write(bytes([b ^ x]))
    desc = f"seed {seed} ({name}, {', '.join(f'{k}@{p}^{x:#x}' for k, p, x in flips)})"
    kinds = {k for k, _, _ in flips}
    # Every live chunk header is known durable: the superblocks' clean-stop
    # record says so, even when the flips also hit the headers that record
    # it in the log (the clean stop's empty chunk, the sync before it),
    # which after a crash would leave a damaged header indistinguishable
    # from a torn write.  Flips to one superblock copy leave the other's
    # record; flips to both make the device unusable (below).
    must_detect = any(k == "superblock" or
                      (k == "header" and any(lo <= p < hi for lo, hi, _, _ in marks))
                      for k, p, _ in flips)

    chk = subprocess.run([a.bin, "check", "--cache", f"{d}/cache.img", "--json"],
                         capture_output=True, text=True)
    copies = {p // SECTOR for k, p, _ in flips if k == "superblock"}
    if chk.returncode == 2 and len(copies) == 2 and "superblock unusable" in chk.stderr:
        # Both copies damaged: nothing says what the device is.  serve
        # must refuse it as well.
        with open(f"{a.dir}/daemon.log", "a") as log:
            proc, h = start(a, d, mode, log)
        if h is not None or proc.returncode != 1:
            sys.exit(f"{desc}: serve did not refuse a device without a superblock")
        stats["refused"] += 1
        return
    if chk.returncode not in (0, 1):
        sys.exit(f"{desc}: check exit status {chk.returncode}:\n{chk.stdout}{chk.stderr}")
    if chk.returncode == 0 and must_detect:
        sys.exit(f"{desc}: check found the cache clean:\n{chk.stdout}")
    report = json.loads(chk.stdout) if chk.stdout.strip() else {"problems": []}
    if chk.returncode == 1 and not report["problems"]:
        sys.exit(f"{desc}: check exit 1 without naming a problem")
    lost = []
    for p in report["problems"]:
        if "lost" in p.lower():
            for lo, hi in re.findall(r"origin bytes (\d+)\.\.(\d+)", p):
                lost.append((int(lo), int(hi)))

    with open(f"{a.dir}/daemon.log", "a") as log:
        log.write(f"--- {desc}\n")
        log.flush()
        proc, h = start(a, d, mode, log)
    if h is None:
        text = open(f"{a.dir}/daemon.log").read().split(f"--- {desc}\n")[-1]
        if proc.returncode < 0 or proc.returncode > 2:
            sys.exit(f"{desc}: serve died with status {proc.returncode}:\n{text[-3000:]}")
        if "header" not in kinds and "superblock" not in kinds:
            sys.exit(f"{desc}: serve refused to start for damage it should survive:\n"
                     f"{text[-3000:]}")
        if "header" not in kinds and len(copies) < 2:
            sys.exit(f"{desc}: serve refused to start with a good superblock copy:\n"
                     f"{text[-3000:]}")
        if chk.returncode != 1:
            sys.exit(f"{desc}: serve refused to start but check found the cache clean")
        stats["refused"] += 1
        return
    eio = 0
    step = 64
    for base in range(0, NSECT, step):
        try:
            buf = h.pread(step * SECTOR, base * SECTOR)
            sectors = [buf[i * SECTOR:(i + 1) * SECTOR] for i in range(step)]
        except nbd.Error:
            sectors = []
            for s in range(base, base + step):
                try:
                    sectors.append(h.pread(SECTOR, s * SECTOR))
                except nbd.Error as e:
                    if proc.poll() is not None:
                        sys.exit(f"{desc}: the daemon died (status {proc.returncode})")
                    sectors.append(e)
        for i, data_ in enumerate(sectors):
            s = base + i
            off = s * SECTOR
            if isinstance(data_, Exception):
                eio += 1
                if s not in dirty and "header" not in kinds:
                    sys.exit(f"{desc}: sector {s} (clean: the origin has it) failed: {data_}")
                if not any(lo <= off and off + SECTOR - 1 <= hi for lo, hi in lost):
                    sys.exit(f"{desc}: sector {s} failed, but check did not list origin bytes "
                             f"{off}..{off + SECTOR - 1} as lost: {report['problems']}")
                continue
            g = parse(off, data_)
            if g != gens[s]:
                sys.exit(f"{desc}: WRONG DATA: sector {s} reads generation {g}, expected "
                         f"{gens[s]}")
    status = subprocess.run([a.bin, "status", "--socket", f"{d}/s.sock", "--json"],
                            capture_output=True, text=True)
    if status.returncode != 0:
        sys.exit(f"{desc}: status failed: {status.stderr}")
    cache_st = json.loads(status.stdout)["volume"]["cache"]
    if chk.returncode == 0 and (eio or cache_st["checksum_errors"]):
        sys.exit(f"{desc}: check found the cache clean, but serve met {eio} failed sectors and "
                 f"{cache_st['checksum_errors']} checksum errors")
    h.shutdown()
    del h
    if proc.poll() is not None:
        sys.exit(f"{desc}: the daemon died (status {proc.returncode})")
    stop(proc, desc)
    stats["eio_sectors"] += eio
    stats["detected"] += chk.returncode
    stats["served"] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--first", type=int, default=1)
    a = ap.parse_args()
    t0 = time.time()
    images = prepare(a)
    layouts = {n: layout(a, f"{v[0]}/cache.img") for n, v in images.items()}
    for n, (hd, dt, _, dirty, _) in layouts.items():
        print(f"{n} image: {len(hd)} live chunk headers, {len(dt)} data runs, "
              f"{len(dirty)} dirty sectors", flush=True)
    if not layouts["dirty"][3]:
        sys.exit("the dirty image holds no dirty data: the test would prove nothing")
    print(f"prepared in {time.time() - t0:.1f} s", flush=True)
    stats = {"refused": 0, "eio_sectors": 0, "detected": 0, "served": 0}
    for seed in range(a.first, a.first + a.seeds):
        run_seed(a, seed, images, layouts, stats)
    print(f"{a.seeds} seeds passed in {time.time() - t0:.1f} s: check reported damage in "
          f"{stats['detected']}, serve served {stats['served']} (EIO on {stats['eio_sectors']} "
          f"lost dirty sectors) and refused {stats['refused']}")


if __name__ == "__main__":
    main()
