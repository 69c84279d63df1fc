#!/usr/bin/python3
"""Client records -- tombstones of trimmed or overwritten blocks, and the
clean records of blocks written back -- take at most a small budget of
the cleaner's reserve (cleaner.c, cleaner_client_record_fits()): beyond
it a tombstone waits for room as client data does, a clean record is
deferred.  Before, they took the reserve without a bound, and a flood of
them left the cleaner's record of the log's end no room.

The cache: one device of 9 MiB, 8 segments of 1 MiB (the reserve: one of
them), 16 KiB blocks (some 60 a segment), writeback, policy lru, no
background writeback pass.  Block 0 is written (dirty, the first chunk of
segment 0); the cleaner's read of that chunk, when it comes to reclaim
segment 0's group, is held (testdev hold_when): reads fill the cache
meanwhile until only the reserve is free.  Then:

  trim   cached blocks are trimmed one by one, each followed by a FLUSH
         (so each tombstone is a chunk of its own, a header sector), until
         one waits for room.  Before the bound, the tombstones took the
         whole reserve and that took hundreds; now a few dozen.  The held
         read goes on: the cleaner writes block 0 back, reclaims segment 0,
         and the record of the log's new end must find room
         (cleaner.tail_no_room 0); the trim that waited completes.
  around the same with the daemon in writearound mode: writes over the
         cached blocks (each with FUA), whose tombstone must be durable
         before the origin write.  A write that waits for room has not
         reached the origin: its block still reads its old data from the
         cache until the write completes.

Checked after both: every block reads its last data (trimmed ones: their
data or zeroes), also after a restart.

  clean  the trim case with 40 more blocks written dirty after some 5
         segments of fills, and written back (tiercache flush) once
         a trim waits: their clean records find no room.  They are
         deferred, not given up, and appended once the cleaner freed
         room: after a crash (SIGKILL) none of the blocks comes back
         dirty.  Before, each was given up and the blocks came back dirty
         (written back again: harmless only as long as the log holds no
         older version of a block dropped without a tombstone).

usage: recordbound.py --bin TIERCACHE --dir DIR --case trim|around|clean
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import BOUND_WAIT, BoundDaemon, magic_block_pattern, make_bound_set  # noqa: E402

SECTOR = 4096
BLOCK = 16 << 10
SEGMENT = 1 << 20
DATA_OFFSET = 1 << 20
CACHE_MIB = 9                   # 8 segments: the fewest for one device
ORIGIN_BLOCKS = 1024            # 16 MiB
WAIT = BOUND_WAIT               # seconds a request may take (a loaded machine)
MAGIC = b"TCRECBD1"
DIRTY0, NDIRTY = 700, 40        # the clean case's dirty blocks,
DIRTY_AFTER = 300               # written after this many reads


def pattern(b, gen):
    return magic_block_pattern(MAGIC, b, gen, BLOCK)


class Daemon(BoundDaemon):
    def __init__(self, a, mode, cache, env=None):
        super().__init__(a.bin, a.dir, cache, mode=mode, env=env)

    def done(self, cookie):
        """True once the request completed (an error fails the test)."""
        try:
            return self.h.aio_command_completed(cookie)
        except nbd.Error as e:
            sys.exit(f"a request failed: {e}\n{self.logtext()[-3000:]}")

    def wait(self, what, cookie):
        if not self.wait_request(what, cookie):
            sys.exit(f"{what} failed\n{self.logtext()[-3000:]}")

    def done_or_waiting(self, what, cookie):
        """Wait until the request completes (True) or some append waits
        for room in the log (False: the request may be the one)."""
        deadline = time.monotonic() + WAIT
        while True:
            for _ in range(20):
                if self.done(cookie):
                    return True
                self.h.poll(5)
            if self.status()["cleaner"]["appends_waiting_for_room"] > 0:
                return self.done(cookie)
            if time.monotonic() > deadline:
                self.wedged(what)

    def read(self, b):
        buf = nbd.Buffer(BLOCK)
        self.wait(f"read of block {b}", self.h.aio_pread(buf, b * BLOCK))
        return bytes(buf.to_bytearray())

    def write(self, b, gen):
        self.wait(f"write of block {b}", self.h.aio_pwrite(
            nbd.Buffer.from_bytearray(bytearray(pattern(b, gen))), b * BLOCK))

    def flush(self):
        self.wait("flush", self.h.aio_flush())


def check(d, gens, trimmed, b):
    data = d.read(b)
    if data == pattern(b, gens[b]):
        return
    if b in trimmed and data == bytes(BLOCK):
        return
    got = struct.unpack_from("<QQ", data, 8) if data[:8] == MAGIC else None
    sys.exit(f"block {b} read {got}, not generation {gens[b]}"
             f"{' (or zeroes: trimmed)' if b in trimmed else ''}")


def run(a):
    gens = make_bound_set(a.bin, a.dir, pattern, ORIGIN_BLOCKS, BLOCK, [("cache.img", CACHE_MIB)],
                          SEGMENT)
    hold = f"{a.dir}/hold"
    # Running checkpoints off: the segments they hold would leave this
    # eight-segment log full before the clean case's dirty blocks are
    # written, and the cleaner reads segment 0 too early.
    env = {"TIERCACHE_TEST_NO_WRITEBACK_PASSES": "1", "TIERCACHE_TEST_CKPT_BYTES": "0"}
    # The cleaner's read of segment 0's first chunk (block 0 after a
    # header: longer than a block, which is what a client's read of one,
    # or writeback's, takes).
    dev = (f"testdev:{a.dir}/cache.img?hold_when={hold}&hold_ops=read&hold_reply"
           f"&hold_range={DATA_OFFSET}+{SECTOR + BLOCK}&hold_minlen={BLOCK + SECTOR}")
    mode = "writearound" if a.case == "around" else "writeback"
    # Block 0 is written dirty in writeback mode; then the daemon serves
    # in the case's mode (a restart keeps the dirty block: no drain).
    d = Daemon(a, "writeback", dev, env)
    gens[0] = 2
    d.write(0, 2)
    d.flush()
    if mode != "writeback":
        d.stop()
        d = Daemon(a, mode, dev, env)
    trimmed = set()
    open(hold, "w").close()
    # Reads fill the cache until the cleaner's read of segment 0 is held,
    # then until fills found no more room (the free segments down to the
    # reserve, the open group full).
    b = 1
    while not os.path.exists(hold + ".held"):
        check(d, gens, trimmed, b)
        b += 1
        if a.case == "clean" and b == DIRTY_AFTER:
            # In a group the cleaner does not reach before the end.
            for x in range(DIRTY0, DIRTY0 + NDIRTY):
                gens[x] = 2
                d.write(x, 2)
            d.flush()
        if b == ORIGIN_BLOCKS:
            sys.exit(f"the cleaner never read the first group:\n{json.dumps(d.status())}")
    if a.case == "clean" and b <= DIRTY_AFTER:
        sys.exit("the cleaner read segment 0 before the dirty blocks were written")
    for _ in range(80):
        check(d, gens, trimmed, b)
        b += 1
    st = d.status()
    print(f"{a.case}: {st['blocks_cached']} blocks cached, {st['segments_free']} segments free "
          f"(reserve {st['segments_reserve']}), the cleaner's read held")
    if st["segments_free"] > st["segments_reserve"]:
        sys.exit(f"more than the reserve is free:\n{json.dumps(st)}")
    # The flood: one cached block after another, each with its own chunk,
    # until one waits for room.
    n = 0
    cookie = None
    victim = None
    for x in range(1, b):
        if d.status()["blocks_cached"] == 0:
            break
        if a.case in ("trim", "clean"):
            cookie = d.h.aio_trim(BLOCK, x * BLOCK)
            trimmed.add(x)
        else:
            gens[x] = 3
            cookie = d.h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(pattern(x, 3))),
                                    x * BLOCK, flags=nbd.CMD_FLAG_FUA)
        n += 1
        if not d.done_or_waiting(f"{a.case} of block {x}", cookie):
            victim = x
            break
        cookie = d.h.aio_flush()
        if not d.done_or_waiting("flush", cookie):
            break
    else:
        sys.exit(f"{n} {a.case}s, none waited for room:\n{json.dumps(d.status())}")
    st = d.status()
    k = st["cleaner"]
    print(f"{a.case}: {n} requests until one waited for room; tail records without room "
          f"{k['tail_no_room']}, client records refused {k.get('client_records_refused')}")
    if victim is not None and a.case == "around":
        # Its tombstone waits, so the origin write has not been sent: a
        # read sees the cached (old) data -- never anything half-done.
        if d.read(victim) != pattern(victim, 1):
            sys.exit(f"block {victim}, its write waiting for room, read other data than "
                     f"its old")
    # The blocks read, written or trimmed (the others are as formatted).
    touched = list(range(b)) + (list(range(DIRTY0, DIRTY0 + NDIRTY)) if a.case == "clean" else [])
    drain = None
    if a.case == "clean":
        # Every dirty block written back while only the reserve's budget
        # was left, and used: their clean records find no room.
        drain = subprocess.Popen([a.bin, "flush", "--socket", d.sock],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + WAIT
        while d.status()["dirty_blocks"] > 0 and drain.poll() is None:
            if time.monotonic() > deadline:
                d.wedged("the drain")
            time.sleep(0.02)
    os.unlink(hold)
    d.wait("the request waiting for room", cookie)
    d.flush()
    if drain is not None:
        out = drain.communicate(timeout=WAIT)[0]
        if drain.returncode != 0:
            sys.exit(f"tiercache flush: exit {drain.returncode}: {out}")
        # The records deferred are appended once the cleaner freed room.
        deadline = time.monotonic() + WAIT
        while d.status()["writeback"].get("clean_records_waiting", 0) > 0:
            if time.monotonic() > deadline:
                d.wedged("the deferred clean records")
            time.sleep(0.02)
        d.flush()
    st = d.status()
    k, wb = st["cleaner"], st["writeback"]
    print(f"{a.case}: {k['groups_retired']} groups retired, least room at a tail record "
          f"{k.get('tail_room_min')} sectors (record room {k['record_room']}), tail records "
          f"without room {k['tail_no_room']}, client records refused "
          f"{k.get('client_records_refused')} (budget {k.get('client_record_budget')} "
          f"sectors), clean records deferred {wb.get('clean_records_deferred')}, appended "
          f"later {wb.get('clean_records_replayed')}")
    if k["tail_no_room"] != 0:
        sys.exit(f"tail records found no room {k['tail_no_room']} times:\n{json.dumps(st)}")
    if k["groups_retired"] == 0:
        sys.exit(f"the cleaner retired no group:\n{json.dumps(st)}")
    if a.case == "clean" and wb["clean_records_deferred"] == 0:
        sys.exit(f"no clean record was deferred: the case tests nothing:\n{json.dumps(st)}")
    # In the clean case the trimmed blocks are read only after the crash:
    # a fill read after a trim no origin flush covers yet is a write-through
    # version (originwin.c), which recovery counts dirty and writes back --
    # not the clean records this case is about.
    for x in touched:
        if a.case != "clean" or x not in trimmed:
            check(d, gens, trimmed, x)
    if a.case == "clean":
        # A crash now: every dirty block was written back and its clean
        # record (deferred or not) is durable, so none comes back dirty.
        d.proc.kill()
        d.proc.wait()
    else:
        d.stop()
    d = Daemon(a, mode, f"{a.dir}/cache.img")
    st = d.status()
    if a.case == "clean":
        print(f"clean: after a crash {st['recovered_dirty_blocks']} blocks recovered dirty")
        if st["recovered_dirty_blocks"] != 0:
            sys.exit(f"{st['recovered_dirty_blocks']} blocks written back before the crash "
                     f"came back dirty (their clean records were given up)")
    for x in touched:
        check(d, gens, trimmed, x)
    d.stop()
    print(f"{a.case}: every block reads its last data, also after a restart")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--case", choices=("trim", "around", "clean"), required=True)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
