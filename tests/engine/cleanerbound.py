#!/usr/bin/python3
"""The cleaner never wedges on the smallest cache format accepts, with a
reserve of one segment per device, whatever its groups hold: every pass
copies at most what leaves room for its tail record and the LOST records
it carries forward (cleaner.c, copy_fits()).

The cache: one device of 9 MiB, 8 segments of 1 MiB (the fewest format
accepts for one device), writeback, policy lru (a block read since it was
last written is kept: appended again when its group is reclaimed).

  1. LOST records: victim blocks are written (dirty) and the daemon
     stops; their data in the cache is damaged; the daemon serves again
     and reads fill the cache until the cleaner has dropped every victim
     as lost.  From then on each pass whose group holds a LOST record
     must append it again (the loss must outlive the group).
  2. The worst case for the bound: a hot set that fills the cache's
     working room (every block read again each round, so the cleaner
     keeps -- copies -- nearly all of each group it reclaims), spread
     over every segment, dirty blocks among them (writes of hot blocks,
     flushed), and the LOST records carried along.  Every request must
     complete within a bounded time; a request that does not means a
     wedged cleaner: the status is printed and the test fails.

Checked: the cleaner retired many groups, never lacked room for a tail
record (status cleaner.tail_no_room 0), every read returned the last
data written, and the victims read EIO -- also after a restart.  With the
bound removed (TIERCACHE_TEST_UNBOUNDED_COPIES=1 in the daemon's
environment) the copies take the whole reserve and the cases dip, mirror
and clientmirror fail.

usage: cleanerbound.py --bin TIERCACHE --dir DIR [--rounds N]
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
from tclib import BoundDaemon, magic_block_pattern, make_bound_set  # noqa: E402

SECTOR = 4096
BLOCK = 64 << 10
SPB = BLOCK // SECTOR
SEGMENT = 1 << 20
DATA_OFFSET = 1 << 20
# Segment 0 begins with the first start's restart chunk (a header of one
# sector, no data: ondisk.h, TC_SEQ_RESTART_GAP), then the first block
# written: its chunk's header, then its data.
FIRST_DATA = DATA_OFFSET + 2 * SECTOR
CACHE_MIB = 9                   # 8 segments: the fewest for one device
ORIGIN_BLOCKS = 256             # 16 MiB
VICTIMS = [3, 40, 77, 120, 161, 200]
HOT = 90                        # blocks read every round (of about 105 that fit)
MAGIC = b"TCBOUND1"
MAX_HDR_SECTORS = 8             # TC_MAX_HDR_SECTORS: the largest chunk header


def pattern(b, gen):
    return magic_block_pattern(MAGIC, b, gen, BLOCK)


class Daemon(BoundDaemon):
    def __init__(self, a, env=None, cache=None, extra=()):
        super().__init__(a.bin, a.dir, cache or f"{a.dir}/cache.img", extra=extra, env=env)

    def run(self, what, start):
        """Issue one request (start() returns its cookie) and wait for it.
        True if it succeeded, False on EIO."""
        return self.wait_request(what, start())

    def read(self, b):
        buf = nbd.Buffer(BLOCK)
        ok = self.run(f"read of block {b}", lambda: self.h.aio_pread(buf, b * BLOCK))
        return buf.to_bytearray() if ok else None

    def write(self, b, gen):
        if not self.run(f"write of block {b}",
                        lambda: self.h.aio_pwrite(nbd.Buffer.from_bytearray(
                            bytearray(pattern(b, gen))), b * BLOCK)):
            sys.exit(f"write of block {b} failed\n{self.logtext()[-3000:]}")

    def flush(self):
        if not self.run("flush", lambda: self.h.aio_flush()):
            sys.exit(f"flush failed\n{self.logtext()[-3000:]}")


LOST = set()                    # blocks whose reads must fail (progress: VICTIMS)


def check(d, gens, b):
    data = d.read(b)
    if b in LOST:
        if data is not None:
            sys.exit(f"victim block {b} (lost) read data instead of failing with EIO")
        return
    if data is None:
        sys.exit(f"block {b} failed to read\n{d.logtext()[-3000:]}")
    if bytes(data) != pattern(b, gens[b]):
        got = struct.unpack_from("<QQ", data, 8) if data[:8] == MAGIC else None
        sys.exit(f"block {b} read {got}, not generation {gens[b]}")


def setup(a, devices=("cache.img",)):
    return make_bound_set(a.bin, a.dir, pattern, ORIGIN_BLOCKS, BLOCK,
                          [(name, CACHE_MIB) for name in devices], SEGMENT)


def wait_status(d, what, cond):
    return d.wait_status(what, cond)


def write_waiting_for_room(d, gens, w, boom):
    """Write block w (generation 3) until it waits for room, end the read
    errors (remove boom) so that the cleaner frees room, and return the
    status once the write and a flush are done."""
    gens[w] = 3
    cookie = d.h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(pattern(w, 3))), w * BLOCK)
    wait_status(d, "a write waiting for room",
                lambda st: st["cleaner"]["appends_waiting_for_room"] > 0)
    os.unlink(boom)
    d.run(f"write of block {w} waiting for room", lambda: cookie)
    d.flush()
    return d.status()


def no_background_writeback(env):
    """The daemon's environment with no background writeback pass
    (TIERCACHE_TEST_NO_WRITEBACK_PASSES; the cleaner still writes back
    what it must): the dirty blocks of the first group stay dirty until
    the cleaner reaches them.  With the passes, a pause of a second in
    the requests (a loaded machine, the sanitizer build) let writeback
    clean them first, and the pass had nothing it could not read: the
    cleaner never gave the group up, or no write waited for room."""
    return dict(env or {}, TIERCACHE_TEST_NO_WRITEBACK_PASSES="1")


def dip(a, env):
    """A pass that takes the reserve, gives up, and comes back with no
    other room: the oldest group (segment 0) full of hot data and one dirty
    block whose chunk cannot be read for a while (testdev eio_when); while
    the cleaner backs off, fills take the open group's room and a client
    write waits for room.  The reads come back; the pass copies what it
    keeps into the reserve, which must leave room for its tail record."""
    gens = setup(a)
    # Running checkpoints off (TIERCACHE_TEST_CKPT_BYTES=0; off by default
    # on this 8-segment log anyway): the case counts on the log's free
    # segments running out just as the client write comes.  A checkpoint
    # holding one or two of the eight segments, and giving the older one's
    # back when the next is named, moves that moment: with one every
    # segment (auto here) the write found room, 1 run in 5, and the case
    # never reached its scenario (nothing waited for room; nothing wrong
    # read, nothing lost).
    env = dict(no_background_writeback(env), TIERCACHE_TEST_CKPT_BYTES="0")
    boom = f"{a.dir}/boom"
    # The victim's data: the first block written (FIRST_DATA).
    dev = (f"testdev:{a.dir}/cache.img?eio_when={boom}&eio_ops=read"
           f"&eio_range={FIRST_DATA}+{BLOCK}")
    d = Daemon(a, env, dev)
    gens[0] = 2
    d.write(0, 2)
    d.flush()
    first = list(range(1, 20))
    random.Random(1).shuffle(first)
    for b in first:                 # misses: admitted (lru), after block 0
        check(d, gens, b)
    for b in [0] + first:           # hits: every one of them hot
        check(d, gens, b)
    d.flush()
    st = d.status()
    if st["blocks_cached"] < 18:
        sys.exit(f"the first blocks were not all cached:\n{json.dumps(st)}")
    open(boom, "w").close()
    # Cold reads until the cleaner gave the group up for now (an unreadable
    # chunk with dirty data), then until a write waits for room.
    b = 40
    while d.status()["cleaner"]["read_retries"] == 0:
        check(d, gens, b)
        b += 1
        if b == ORIGIN_BLOCKS:
            sys.exit(f"the cleaner never tried the first group:\n{json.dumps(d.status())}")
    for _ in range(20):             # fills take the open group's room
        check(d, gens, b)
        b += 1
    w = b
    st = write_waiting_for_room(d, gens, w, boom)
    k = st["cleaner"]
    print(f"dip: {k['groups_retired']} groups retired, {k['read_retries']} attempts given up, "
          f"{st['reinsertions']} reinsertions, {k['copies_refused']} copies refused, "
          f"least room at a tail record {k.get('tail_room_min')} sectors "
          f"(record room {k['record_room']}), tail records without room {k['tail_no_room']}")
    if k["tail_no_room"] != 0:
        sys.exit(f"tail records found no room {k['tail_no_room']} times:\n{json.dumps(st)}")
    if k.get("tail_room_min", 0) < MAX_HDR_SECTORS:
        sys.exit(f"a pass's copies left {k.get('tail_room_min')} sectors for its tail record "
                 f"and the records that must always find room (fewer than a header, "
                 f"{MAX_HDR_SECTORS}):\n{json.dumps(st)}")
    for x in list(range(0, 20)) + [w]:
        check(d, gens, x)
    d.stop()


def mirror(a, env, clients=0):
    """The dip with two devices and --dirty-copies 2: a mirrored copy needs
    room on two devices at once.  The oldest group holds two dirty blocks
    (each on both devices) and 18 hot ones; the pass comes back with only
    the reserve (a segment on each device), copies the hot blocks -- one
    device's head takes a chunk more than the other's --, then the dirty
    ones, mirrored.  Summed over both devices the room left satisfied the
    bound, but one head could not take a copy: the append closed both
    heads, found no free segment, and left the tail record no room
    (tail_no_room 1, every run).  A mirrored copy now counts the room of
    each device (cleaner.c, record_room()).

    With clients (case clientmirror): once the pass has copied into the
    reserve (no segment free), its walk of the second device's segment is
    held and mirrored client writes arrive.  Each must wait for room
    (log.c, ensure_group(): below the reserve the open group's room is the
    pass's), not be appended -- nor close the heads, whose room the pass
    counted for its tail record, when no two of them take it."""
    gens = setup(a, ("cache.img", "c2.img"))
    env = no_background_writeback(env)
    boom = f"{a.dir}/boom"
    dirty, hot = 2, 18
    hold = f"{a.dir}/hold"
    second = f"{a.dir}/c2.img"
    if clients:
        # The pass's reads of single blocks in the second device's first
        # segment (the group it reclaims): answered only once `hold` goes.
        second = (f"testdev:{second}?hold_when={hold}&hold_ops=read&hold_reply"
                  f"&hold_minlen={2 * BLOCK}")
    dev = (f"testdev:{a.dir}/cache.img?eio_when={boom}&eio_ops=read"
           f"&eio_range={FIRST_DATA}+{BLOCK},{second}")
    d = Daemon(a, env, dev, ("--dirty-copies", "2"))
    for b in range(dirty):
        gens[b] = 2
        d.write(b, 2)
    d.flush()
    first = list(range(dirty, dirty + hot))
    random.Random(1).shuffle(first)
    for b in first:                 # misses: admitted (lru), after the dirty blocks
        check(d, gens, b)
    for b in list(range(dirty)) + first:    # hits: every one of them hot
        check(d, gens, b)
    d.flush()
    open(boom, "w").close()
    # Cold reads until the cleaner gave the first group up for now, until
    # the free segments are down to the reserve, then until the open
    # group is full (fills never take the reserve); a write then waits.
    b = 60
    while d.status()["cleaner"]["read_retries"] == 0:
        check(d, gens, b)
        b += 1
        if b == ORIGIN_BLOCKS:
            sys.exit(f"the cleaner never tried the first group:\n{json.dumps(d.status())}")
    while d.status()["segments_free"] > 2:
        check(d, gens, b)
        b += 1
        if b == ORIGIN_BLOCKS:
            sys.exit(f"the free segments never came down to the reserve:\n"
                     f"{json.dumps(d.status())}")
    for _ in range(40):
        if b == ORIGIN_BLOCKS - 1:
            break
        check(d, gens, b)
        b += 1
    w = b
    more = []
    if not clients:
        st = write_waiting_for_room(d, gens, w, boom)
    else:
        gens[w] = 3
        cookie = d.h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(pattern(w, 3))), w * BLOCK)
        wait_status(d, "a write waiting for room",
                    lambda st: st["cleaner"]["appends_waiting_for_room"] > 0)
        open(hold, "w").close()
        os.unlink(boom)
        # The pass has copied into the reserve (no segment free) and its
        # walk is held: mirrored client writes arrive.  They must wait for
        # the room the pass frees, not take what it left its tail record.
        wait_status(d, "the pass's copies into the reserve and a read held",
                    lambda st: st["segments_free"] == 0 and os.path.exists(hold + ".held"))
        for i in range(clients):
            x = dirty + hot + i         # never read: not cached
            gens[x] = 3
            more.append((x, d.h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(pattern(x, 3))),
                                           x * BLOCK)))
        # Settled: every request still in flight waits for room.
        st = wait_status(d, "the client writes appended or waiting for room",
                         lambda st: d.h.poll(0) is not None and
                         st["cleaner"]["appends_waiting_for_room"] == d.h.aio_in_flight())
        if st["cleaner"]["appends_waiting_for_room"] != 1 + clients:
            sys.exit(f"mirrored client writes were appended while the pass held the reserve "
                     f"(waiting for room: {st['cleaner']['appends_waiting_for_room']}, not "
                     f"{1 + clients}):\n{json.dumps(st)}")
        os.unlink(hold)
        d.run(f"write of block {w} waiting for room", lambda: cookie)
        for x, c in more:
            d.run(f"write of block {x} waiting for room", lambda c=c: c)
        d.flush()
        st = d.status()
    k = st["cleaner"]
    name = "clientmirror" if clients else "mirror"
    print(f"{name}: {k['groups_retired']} groups retired, {k['read_retries']} attempts given "
          f"up, {st['dirty_copied']} dirty copies, {k['copies_refused']} copies refused, "
          f"least room at a tail record {k.get('tail_room_min')} sectors (record room "
          f"{k['record_room']}), tail records without room {k['tail_no_room']}")
    if k["tail_no_room"] != 0:
        sys.exit(f"tail records found no room {k['tail_no_room']} times:\n{json.dumps(st)}")
    if k.get("tail_room_min", 0) < MAX_HDR_SECTORS:
        sys.exit(f"a pass's copies left {k.get('tail_room_min')} sectors for its tail record "
                 f"(fewer than a header, {MAX_HDR_SECTORS}):\n{json.dumps(st)}")
    for x in list(range(0, dirty + hot)) + [w] + [x for x, _ in more]:
        check(d, gens, x)
    d.stop()
    d = Daemon(a, env, f"{a.dir}/cache.img,{a.dir}/c2.img", ("--dirty-copies", "2"))
    for x in list(range(0, dirty + hot)) + [w] + [x for x, _ in more]:
        check(d, gens, x)
    d.stop()
    # Last, once the data is checked: a run that did not reach the bound
    # is run again (cleaner-bound.test).
    if k["copies_refused"] == 0:
        sys.exit(f"no copy came near the bound (none refused): the case tests nothing:\n"
                 f"{json.dumps(st)}")


def progress(a, env):
    gens = setup(a)
    LOST.update(VICTIMS)

    # 1. The victims, dirty; stopped at once (writeback waits for a second
    # of client idleness), then damaged in the cache image.
    d = Daemon(a, env)
    for b in VICTIMS:
        gens[b] = 2
        d.write(b, 2)
    d.flush()
    d.stop()
    dump = subprocess.run([a.bin, "dump", "--cache", f"{a.dir}/cache.img", "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    with open(f"{a.dir}/cache.img", "r+b") as f:
        for b in VICTIMS:
            m = re.search(rf"^block {b} valid #+ dirty (#+) \| (\d+):(\d+) x16$", dump, re.M)
            if m is None or len(m.group(1)) != SPB:
                sys.exit(f"block {b} is not one dirty fragment after the stop:\n{dump}")
            seg, at = int(m.group(2)), int(m.group(3))
            for i in range(SPB):
                p = DATA_OFFSET + seg * SEGMENT + (at + i) * SECTOR + 100
                f.seek(p)
                x = f.read(1)[0]
                f.seek(p)
                f.write(bytes([x ^ 0x5A]))

    rng = random.Random(18)
    d = Daemon(a, env)
    others = [b for b in range(ORIGIN_BLOCKS) if b not in VICTIMS]
    for _ in range(8):
        rng.shuffle(others)
        for b in others:
            check(d, gens, b)
        if d.status()["lost_dirty_bytes"] == len(VICTIMS) * BLOCK:
            break
    else:
        sys.exit(f"the victims were never dropped as lost:\n{json.dumps(d.status())}")
    print(f"{len(VICTIMS)} victims recorded lost")
    # The next flush reports the loss (EIO), once.
    if d.run("flush", lambda: d.h.aio_flush()):
        sys.exit("the flush after the loss succeeded")

    # 2. The hot set, read every round, some of it rewritten (dirty).
    hot = rng.sample(others, HOT)
    st0 = d.status()
    gen = 3
    for r in range(a.rounds):
        rng.shuffle(hot)
        for i, b in enumerate(hot):
            check(d, gens, b)
            if i % 5 == 0:
                w = rng.choice(hot)
                gens[w] = gen
                gen += 1
                d.write(w, gens[w])
            if i % 23 == 0:
                d.flush()
        for b in VICTIMS:
            check(d, gens, b)
    st = d.status()
    k0, k = st0["cleaner"], st["cleaner"]
    retired = k["groups_retired"] - k0["groups_retired"]
    print(f"{a.rounds} rounds: {retired} groups retired, {st['reinsertions']} reinsertions, "
          f"{st['dirty_copied']} dirty copies, {k['copies_refused']} copies refused, "
          f"tail records without room {k['tail_no_room']}, segments free "
          f"{st['segments_free']} of {st['segments']}, least room at a tail record "
          f"{k.get('tail_room_min')} sectors (bound: {k['record_room']})")
    if k["tail_no_room"] != 0:
        sys.exit(f"tail records found no room {k['tail_no_room']} times:\n{json.dumps(st)}")
    if retired < 4 * st["segments"]:
        sys.exit(f"only {retired} groups retired in {a.rounds} rounds:\n{json.dumps(st)}")
    if st["lost_dirty_bytes"] != len(VICTIMS) * BLOCK:
        sys.exit(f"lost_dirty_bytes {st['lost_dirty_bytes']}, not {len(VICTIMS) * BLOCK}")
    d.stop()

    d = Daemon(a, env)
    for b in range(ORIGIN_BLOCKS):
        check(d, gens, b)
    d.stop()
    print("after a restart: every block reads its last data, the victims fail with EIO")


def failure(a, env):
    """A device failing with dirty data in its open segment's RAM image,
    the other device (the survivor) small: two devices of 11 and 4
    segments, so that the free segments, the reserve among them, can all
    be on the device that fails, and the survivor has no room left.  The
    image's data appended again on the survivor takes the reserve only as
    far as it leaves room for the cleaner's last records; what does not
    fit waits for room (a rescue, reading the image) -- before, it was
    recorded lost at once (0.5 to 1.5 MiB here).

    And every tail record finds room (cleaner.tail_no_room 0): each device
    keeps its share of the reserve free (space_dev_reserve()), so the
    survivor has a segment at the failure, and the failure's tombstones
    and LOST records leave the tail its room (cleaner_record_fits()).
    Before, the free segments, the reserve among them, were all on the
    failing device: the first tail record after it found no room."""
    gens = make_bound_set(a.bin, a.dir, pattern, ORIGIN_BLOCKS, BLOCK,
                          [("a.img", 12), ("b.img", 5)], SEGMENT)
    boom = f"{a.dir}/boom"
    d = Daemon(a, env, f"testdev:{a.dir}/a.img?eio_when={boom}&eio_ops=write,{a.dir}/b.img")
    rng = random.Random(1)
    gen = 2
    for i in range(190):
        b = rng.randrange(ORIGIN_BLOCKS)
        gens[b] = gen
        gen += 1
        d.write(b, gens[b])
        if i == 149:
            open(boom, "w").close()     # the first device's writes fail from now on
    d.run("flush", lambda: d.h.aio_flush())     # may report the failure (EIO)
    st = d.status()
    k = st["cleaner"]
    print(f"failure: {k['groups_retired']} groups retired, lost dirty bytes "
          f"{st['lost_dirty_bytes']}, least room at a tail record {k.get('tail_room_min')} "
          f"sectors (record room {k['record_room']}), tail records without room "
          f"{k['tail_no_room']}, room at the failure {k.get('failure_room_min')} sectors, "
          f"failure records deferred {k.get('records_deferred')}")
    if st["devices"][0]["state"] != "failing":
        sys.exit(f"the first device did not fail:\n{json.dumps(st)}")
    if k["tail_no_room"] != 0:
        sys.exit(f"tail records found no room {k['tail_no_room']} times:\n{json.dumps(st)}")
    # Nothing is lost at the failure for want of room.  (A rescue's data
    # may still be lost when the cleaner needs its group for room and the
    # origin refuses it: cleaner.c, rescue_holds().)
    before_give_up = d.logtext().split("is given up")[0]
    at_failure = re.findall(r"dirty data of origin block \d+ .* was only on a failed device "
                            r"and is lost", before_give_up)
    if at_failure:
        sys.exit(f"{len(at_failure)} blocks' dirty data lost at the failure for want of room:"
                 f"\n{d.logtext()[-3000:]}")
    # Each block reads its last data, or fails with EIO if recorded lost.
    lost = 0
    for b in range(ORIGIN_BLOCKS):
        data = d.read(b)
        if data is None:
            lost += 1
        elif bytes(data) != pattern(b, gens[b]):
            got = struct.unpack_from("<QQ", data, 8) if data[:8] == MAGIC else None
            sys.exit(f"block {b} read {got}, not generation {gens[b]}")
    if lost * BLOCK > st["lost_dirty_bytes"]:
        sys.exit(f"{lost} blocks read EIO, more than the {st['lost_dirty_bytes']} bytes lost")
    d.stop()
    os.unlink(boom)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--case", choices=("dip", "mirror", "clientmirror", "progress", "failure"),
                    required=True)
    # progress: 12 rounds retire some 75 groups, each segment's about 9
    # times (30 rounds took 2.5 times as long for nothing more: the check
    # is that every pass finds room, >= 4 per segment)
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    env = {"TIERCACHE_TEST_UNBOUNDED_COPIES": "1"} \
        if os.environ.get("TIERCACHE_TEST_UNBOUNDED_COPIES") else None
    {"dip": dip, "mirror": mirror, "clientmirror": lambda a, env: mirror(a, env, 24),
     "progress": progress, "failure": failure}[a.case](a, env)


if __name__ == "__main__":
    main()
