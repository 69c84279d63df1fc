#!/usr/bin/python3
"""Transient read errors of the cache device while the cleaner reclaims a
group holding dirty data lose nothing.

Eight blocks are written in writeback mode (generation 2 over the
origin's generation 1) into the first group of the log, and the daemon
stops.  It serves again with the origin refusing writes (so the eight
stay dirty: writeback cannot clean them) and with reads of one of them,
the victim, failing on the cache device (testdev eio_when + eio_range:
the sectors of its data only; every other request succeeds, so the
device is not failed, as with a few sectors that read fine again a
moment later).  Reads of the rest of the volume fill the cache (the fifo
policy admits every read miss) until the cleaner reaches the first group
and gives up an attempt (status: cleaner.read_retries).  Then the errors
stop: the cleaner must reclaim the group, nothing may be counted lost,
the device must still be in service, and every sector of the eight
blocks must read generation 2 -- also on the origin file itself once the
origin takes writes again and 'tiercache flush' ran.  (Before the fix the
cleaner recorded the victim's dirty data as lost and dropped it, the
device still in service: reads of it failed with EIO.)

What fails (--where):
  chunk     every read touching the victim's data: the cleaner's walk of
            the group (one read of each chunk, header and data) fails;
  fragment  only reads of at most one block (testdev eio_maxlen): the
            walk reads the chunk fine, the read of the victim's dirty
            fragment that the cleaner copies (or writes back) fails;
  device    every read of the cache device, for a moment: the cleaner
            must not turn it into a run of errors that fails the device
            (8 in a row, failure.c) -- its attempts fail one read each.
            (Before the fix the reads of the group's dirty fragments,
            each tried three times at once, failed the device, and its
            dirty data was lost with it.)
  walk      only reads larger than a block (testdev eio_minlen), for good:
            the walk's read of the chunk never succeeds, the victim's own
            fragment reads fine (a lasting bad sector elsewhere in the
            chunk).  After its first few attempts the cleaner must read
            the chunk's dirty fragments on their own and reclaim the group
            while the errors go on.
  lasting   every read touching the victim's data, for good (a lasting
            bad sector inside dirty data; every other read succeeds, so
            the device is never failed): the cleaner may not hold the
            group -- and with it every append needing room -- for ever.
            With the cache full, a client write waits for room: after a
            bounded number of attempts the cleaner records the victim's
            dirty sectors lost (reads of them fail with EIO, the next
            flush reports the loss: exit 3), reclaims the group, and the
            write goes on; the other seven blocks keep their data.
            (Before the fix the cleaner retried every 5 s for ever, the
            group never went, and the write waited for ever.)
  stop      as lasting, and the daemon is stopped (SIGTERM) while the
            write waits for room: the stop must end -- it waits for the
            write, so the data is given up as in lasting --, and after a
            restart the victim's sectors still read EIO (the loss is
            recorded in the log), the rest their data.  (Before the fix
            the stop waited for ever.)
  lostcarry as lasting, and the group held also holds LOST records (of
            blocks whose dirty data the cleaner found damaged), in chunks
            before the victim's: each attempt given up
            walks the group again, and must not append those records again
            (status cleaner.lost_records_carried stays as it is between
            attempts); the group is still reclaimed in the end, and after
            a restart the lost sectors still read EIO.  (Before the fix
            every attempt carried them all again, out of the cleaner's
            reserve, until its tail record found no room.)

The daemon runs with TIERCACHE_TEST_READ_RETRY_MAX_MS=500: the cleaner's
back-off between attempts doubles from 50 ms up to half a second instead
of 5 s, so the ten attempts before a loss take 4 s instead of 21; the
attempts and what each does are the same.

usage: cleanerretry.py --bin TIERCACHE --dir DIR
                      --where chunk|fragment|device|walk|lasting|stop|lostcarry
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import Serve, connect_when_up, tagged_gen, tagged_sector  # noqa: E402

SECTOR = 4096
BLOCK = 64 << 10
ORIGIN_MIB = 48
CACHE_MIB = 10
MAGIC = b"TCCLRTR1"
DIRTY = range(0, 8)             # the blocks written in writeback mode
VICTIM = 3                      # the one whose cached data cannot be read for a while
SEGMENT = 1 << 20
DATA_OFFSET = 1 << 20           # where segment 0 starts on the cache device
READ_RETRY_MAX_MS = 500         # the daemon's longest back-off (see above)


def pattern(off, gen):
    return tagged_sector(MAGIC, off, gen, SECTOR)


def gen_of(off, data):
    return tagged_gen(MAGIC, off, data)


def block_data(b, gen):
    return b"".join(pattern(b * BLOCK + i * SECTOR, gen) for i in range(BLOCK // SECTOR))


class Daemon(Serve):
    def __init__(self, a, cache, origin):
        self.a = a
        super().__init__(a.bin, a.dir, ["--origin", origin, "--cache", cache,
                                        "--mode", "writeback", "--sequential-cutoff", "0",
                                        "--policy", "fifo"],
                         env=dict(os.environ, TIERCACHE_TEST_READ_RETRY_MAX_MS=str(
                             READ_RETRY_MAX_MS)))


def check_dirty_blocks(d, what):
    for b in DIRTY:
        for i in range(BLOCK // SECTOR):
            off = b * BLOCK + i * SECTOR
            try:
                g = gen_of(off, d.h.pread(SECTOR, off))
            except nbd.Error as e:
                sys.exit(f"{what}: sector {off // SECTOR} (block {b}) fails: {e}\n"
                         f"{open(d.log).read()[-3000:]}")
            if g != 2:
                sys.exit(f"{what}: sector {off // SECTOR} (block {b}) reads generation {g}, "
                         "expected 2")


def retry_bound(st, bound):
    """The attempts the cleaner may have given up by now, at most: bound,
    or a couple more than it had given up when an append was first seen
    waiting for room (st), if that is more -- the attempts are counted in
    a row whether or not someone waits, and once READ_TRIES are spent the
    next attempt with a waiter gives the data up; a writer slow to reach
    the wait on a loaded machine must not fail the test."""
    c = st["cleaner"]
    if c.get("appends_waiting_for_room", 0) >= 1:
        bound = max(bound, c.get("read_retries", 0) + 2)
    return bound


def wait_retired(d, more, max_retries=None):
    """Poll until the cleaner reclaimed a group; reads of the blocks `more`
    meanwhile keep the cache filling.  max_retries: give up once the
    cleaner gave up more attempts than that (see retry_bound()) without
    reclaiming one."""
    bound, seen_waiting = max_retries, False
    for i in range(6000):
        st = d.status()
        if st["cleaner"]["groups_retired"] >= 1:
            return st
        if max_retries is not None and not seen_waiting:
            # Fixed at the first sight of a waiter: it may not float up.
            bound = retry_bound(st, max_retries)
            seen_waiting = st["cleaner"].get("appends_waiting_for_room", 0) >= 1
        if max_retries is not None and st["cleaner"].get("read_retries", 0) > bound:
            sys.exit(f"{st['cleaner']['read_retries']} attempts given up and no group "
                     f"reclaimed: the cleaner holds the group for ever; status:\n"
                     f"{json.dumps(st)}")
        if i < len(more):
            d.h.pread(BLOCK, more[i] * BLOCK)
        else:
            time.sleep(0.02)
    sys.exit(f"no group reclaimed; status:\n{json.dumps(st)}")


# Attempts the cleaner may give up on one unreadable group before it must
# have recorded the data lost and reclaimed the group (the engine's bound,
# with a margin; the test fails once it is passed without a reclamation).
LASTING_MAX_RETRIES = 16


def start_waiting_writer(d):
    """Once the cleaner holds the unreadable group (the cache is full: the
    reads filled it), client writes of more than a segment need the room
    and wait for it -- the cleaner gives the unreadable data up only for
    someone waiting.  Returns the thread, the blocks it writes, and the
    list of those acknowledged."""
    for _ in range(6000):
        if d.status()["cleaner"].get("read_retries", 0) >= 1:
            break
        time.sleep(0.02)
    else:
        sys.exit("the cleaner never gave up an attempt on the unreadable group")
    written = range(max(DIRTY) + 1, max(DIRTY) + 1 + 24)     # 1.5 segments
    wrote = []

    def writer():
        h = connect_when_up(f"nbd+unix:///?socket={d.sock}", d.proc)
        try:
            for wb in written:
                h.pwrite(block_data(wb, 3), wb * BLOCK)
                wrote.append(wb)
            h.shutdown()
        except nbd.Error:
            pass            # the daemon stopping ('stop'): the rest are not acknowledged
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    return t, written, wrote


def stop_while_held(a, d, cache, origin, refuse):
    """A stop while a client write waits for the room the held group would
    free: it must end (the write completes first), and after a restart
    the victim's sectors still read EIO, everything else its data."""
    t, written, wrote = start_waiting_writer(d)
    for _ in range(6000):
        st = d.status()
        if st["cleaner"]["appends_waiting_for_room"] >= 1:
            break
        time.sleep(0.02)
    else:
        sys.exit("no append waits for room")
    bound = retry_bound(st, LASTING_MAX_RETRIES)
    d.proc.send_signal(signal.SIGTERM)
    while d.proc.poll() is None:
        try:
            st = d.status()
        except (OSError, RuntimeError, json.JSONDecodeError, KeyError):    # stopping
            time.sleep(0.02)
            continue
        if st["cleaner"].get("read_retries", 0) > bound:
            sys.exit(f"the stop waits for ever: {st['cleaner']['read_retries']} attempts given "
                     f"up, the group still held; status:\n{json.dumps(st)}")
        time.sleep(0.02)
    if d.proc.returncode != 0:
        sys.exit(f"daemon exit status {d.proc.returncode} after SIGTERM")
    t.join()
    print(f"stopped while a write waited for room: {len(wrote)} of {len(written)} writes "
          "acknowledged")
    if not wrote:
        sys.exit("the write waiting for room was never acknowledged")
    os.unlink(refuse)
    d = Daemon(a, cache, origin)
    st = d.status()
    if st["lost_sectors_unreadable"] != BLOCK // SECTOR:
        sys.exit(f"after the restart {st['lost_sectors_unreadable']} lost sectors, expected "
                 f"{BLOCK // SECTOR} (the victim's)")
    check_after_loss(d, wrote)
    d.stop()
    print("stop while the group was held: ended, the loss recorded across the restart")


def check_after_loss(d, written):
    for b in DIRTY:
        for i in range(BLOCK // SECTOR):
            off = b * BLOCK + i * SECTOR
            try:
                g = gen_of(off, d.h.pread(SECTOR, off))
            except nbd.Error:
                g = "EIO"
            want = "EIO" if b == VICTIM else 2
            if g != want:
                sys.exit(f"sector {off // SECTOR} (block {b}) reads {g}, expected {want}")
    for wb in written:
        got = d.h.pread(BLOCK, wb * BLOCK)
        if got != block_data(wb, 3):
            gens = [gen_of(wb * BLOCK + i * SECTOR, got[i * SECTOR:(i + 1) * SECTOR])
                    for i in range(BLOCK // SECTOR)]
            sys.exit(f"block {wb}, written while the group was held, reads back generations "
                     f"{gens}, expected 3")


def lasting(d, more, origin, refuse, boom):
    """The victim's data never reads again: lost, recorded, the rest kept."""
    t, written, wrote = start_waiting_writer(d)
    st = wait_retired(d, more, LASTING_MAX_RETRIES)
    t.join()
    if len(wrote) != len(written):
        sys.exit(f"only {len(wrote)} of the {len(written)} writes completed")
    # The bad sector is written over when its segment is used again, and
    # reads again (the test device fails the range for as long as boom
    # exists, whatever it holds by now).
    os.unlink(boom)
    print(f"lasting errors: read_retries {st['cleaner'].get('read_retries')}, groups retired "
          f"{st['cleaner']['groups_retired']}, lost_dirty_bytes {st['lost_dirty_bytes']}, "
          f"devices {[dev['state'] for dev in st['devices']]}")
    if st["cleaner"].get("read_retries", 0) < 5:
        sys.exit(f"only {st['cleaner'].get('read_retries')} attempts given up before the "
                 "victim's data was recorded lost, expected at least 5")
    if st["lost_dirty_bytes"] != BLOCK:
        sys.exit(f"lost_dirty_bytes {st['lost_dirty_bytes']}, expected {BLOCK} (the victim)")
    for dev in st["devices"]:
        if dev["state"] != "ok":
            sys.exit(f"cache device {dev['path']} is {dev['state']}")
    check_after_loss(d, written)
    os.unlink(refuse)
    rc = subprocess.run([d.a.bin, "flush", "--socket", d.sock], stdout=subprocess.DEVNULL).returncode
    if rc != 3:
        sys.exit(f"flush exit status {rc} after dirty data was lost, expected 3")
    d.stop()
    with open(origin, "rb") as f:
        for b in DIRTY:
            f.seek(b * BLOCK)
            if b != VICTIM and f.read(BLOCK) != block_data(b, 2):
                sys.exit(f"block {b} on the origin is not generation 2 after the flush")
        for wb in written:
            f.seek(wb * BLOCK)
            if f.read(BLOCK) != block_data(wb, 3):
                sys.exit(f"block {wb} on the origin is not generation 3 after the flush")
    print("lasting cache read errors: the victim's dirty data recorded lost after "
          f"{st['cleaner']['read_retries']} attempts, the group reclaimed, the rest kept")


LOSTB = range(100, 140)         # lostcarry: blocks whose dirty data is lost


def make_lost_records(a, cache, origin):
    """lostcarry: the cached data of the LOSTB blocks (dirty) is damaged;
    reads fill the cache until the cleaner finds it damaged and records
    it lost: LOST records, at the head of the log, in the group that then
    takes the victim again (written whole once more, after a flush: in a
    later chunk of that group)."""
    dump = subprocess.run([a.bin, "dump", "--cache", cache, "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    with open(cache, "r+b") as f:
        for b in LOSTB:
            m = re.search(rf"^block {b} valid #+ dirty #+((?: \| \d+:\d+ x\d+)+)$", dump, re.M)
            if m is None:
                sys.exit(f"block {b} is not dirty:\n{dump}")
            for seg, at, n in re.findall(r"(\d+):(\d+) x(\d+)", m.group(1)):
                for i in range(int(n)):
                    p = DATA_OFFSET + int(seg) * SEGMENT + (int(at) + i) * SECTOR + 100
                    f.seek(p)
                    x = f.read(1)[0]
                    f.seek(p)
                    f.write(bytes([x ^ 0x5A]))
    d = Daemon(a, cache, origin)
    nblocks = (ORIGIN_MIB << 20) // BLOCK
    others = [b for b in range(nblocks) if b not in DIRTY and b not in LOSTB]
    random.Random(7).shuffle(others)
    for i, b in enumerate(others):
        d.h.pread(BLOCK, b * BLOCK)
        if i % 8 == 7 and d.status()["lost_sectors_unreadable"] >= len(LOSTB) * (BLOCK // SECTOR):
            break
    lost = d.status()["lost_sectors_unreadable"]
    if lost != len(LOSTB) * (BLOCK // SECTOR):
        sys.exit(f"{lost} sectors lost after the cleaner found the damaged data, expected "
                 f"{len(LOSTB) * (BLOCK // SECTOR)}")
    try:
        d.h.flush()
    except nbd.Error:
        d.h.flush()         # the first reports the loss (EIO), once
    d.h.pwrite(block_data(VICTIM, 2), VICTIM * BLOCK)
    d.h.flush()
    d.stop()


def check_lostb(d, what):
    for b in LOSTB:
        for i in range(BLOCK // SECTOR):
            off = b * BLOCK + i * SECTOR
            try:
                g = gen_of(off, d.h.pread(SECTOR, off))
            except nbd.Error:
                g = "EIO"
            want = "EIO"
            if g != want:
                sys.exit(f"{what}: sector {off // SECTOR} (block {b}) reads {g}, expected {want}")


def lost_carry(a, d, more, cache, origin, refuse, boom):
    """lostcarry: attempts given up on the group holding the victim and
    LOST records carry those records once, not at every attempt."""
    def retries_carried():
        c = d.status()["cleaner"]
        return c.get("read_retries", 0), c.get("lost_records_carried", 0)
    # Attempts 1-5 give up at the unreadable chunk; from the 6th on the
    # chunk counts as unusable, and the whole lost set is carried (once).
    # Nobody waits for room yet, so the group stays past attempt 8.
    seen = []
    for _ in range(3000):
        r, n = retries_carried()
        if r >= 1 and (not seen or seen[-1][0] != r):
            seen.append((r, n))
        if r >= 8:
            break
        time.sleep(0.02)
    else:
        sys.exit(f"the cleaner gave up only {seen} attempts (retries, LOST records carried)")
    print(f"attempts given up and LOST records carried: {seen}")
    last = seen[-1][1]
    before = [n for r, n in seen if r == seen[-1][0] - 1]
    if last < len(LOSTB):
        sys.exit(f"only {last} LOST records carried, expected at least {len(LOSTB)}")
    # Once: the first attempt's records (those in the group, some lost
    # blocks recorded in more than one of its chunks: 40 to 58 here, by
    # timing), then the whole set once more from the 6th.
    if last > seen[0][1] + len(LOSTB) + 10 or (before and before[0] != last):
        sys.exit(f"LOST records carried grow with the attempts given up: {seen}")
    # The rest as in lasting: a write waits for the room, the victim is
    # given up after a bounded number of attempts, the group goes.
    t, written, wrote = start_waiting_writer(d)
    st = wait_retired(d, more, LASTING_MAX_RETRIES)
    t.join()
    if len(wrote) != len(written):
        sys.exit(f"only {len(wrote)} of the {len(written)} writes completed")
    os.unlink(boom)
    r, n = retries_carried()
    print(f"group reclaimed after {r} attempts; {n} LOST records carried in all")
    if n > 3 * len(LOSTB):
        sys.exit(f"{n} LOST records carried for {len(LOSTB)} lost blocks")
    check_lostb(d, "after the group was reclaimed")
    d.stop()
    os.unlink(refuse)
    d = Daemon(a, cache, origin)
    check_lostb(d, "after a restart")
    d.stop()
    print("LOST records carried once per group, and still there after a restart")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--where", choices=("chunk", "fragment", "device", "walk", "lasting",
                                        "stop", "lostcarry"),
                    required=True)
    a = ap.parse_args()
    nblocks = (ORIGIN_MIB << 20) // BLOCK
    with open(f"{a.dir}/origin.img", "wb") as f:
        for b in range(nblocks):
            f.write(block_data(b, 1))
    with open(f"{a.dir}/cache.img", "wb") as f:
        f.truncate(CACHE_MIB << 20)
    subprocess.run([a.bin, "format", "--cache", f"{a.dir}/cache.img", "--origin",
                    f"{a.dir}/origin.img", "--segment-size", "1M", "--block-size",
                    str(BLOCK)], check=True, stdout=subprocess.DEVNULL)
    origin = f"{a.dir}/origin.img"
    cache = f"{a.dir}/cache.img"

    # The dirty blocks, written, flushed and stopped at once (writeback
    # waits for a second of client idleness before it starts).
    # lostcarry: the origin refuses writes from the start (no block of
    # LOSTB may be written back before its data is damaged below).
    refusing = f"testdev:{origin}?eio_when={a.dir}/refuse&eio_ops=write"
    if a.where == "lostcarry":
        open(f"{a.dir}/refuse", "w").close()
    d = Daemon(a, cache, refusing if a.where == "lostcarry" else origin)
    for b in DIRTY:
        d.h.pwrite(block_data(b, 2), b * BLOCK)
    if a.where == "lostcarry":
        for b in LOSTB:
            d.h.pwrite(block_data(b, 2), b * BLOCK)
    d.h.flush()
    d.stop()
    if a.where == "lostcarry":
        make_lost_records(a, cache, refusing)
    dump = subprocess.run([a.bin, "dump", "--cache", cache, "--blocks"],
                          capture_output=True, text=True, check=True).stdout
    m = re.search(rf"^block {VICTIM} valid #+ dirty (#+) \| (\d+):(\d+) x16$", dump, re.M)
    if m is None or len(m.group(1)) != BLOCK // SECTOR:
        sys.exit(f"block {VICTIM} is not one dirty fragment after the stop:\n{dump}")
    at = DATA_OFFSET + int(m.group(2)) * SEGMENT + int(m.group(3)) * SECTOR

    boom = f"{a.dir}/boom"            # while it exists, the victim's cached data is unreadable
    refuse = f"{a.dir}/refuse"        # while it exists, the origin refuses writes
    open(refuse, "w").close()
    where = {"lostcarry": f"&eio_range={at}+{BLOCK}",
             "chunk": f"&eio_range={at}+{BLOCK}",
             "fragment": f"&eio_range={at}+{BLOCK}&eio_maxlen={BLOCK}",
             "device": "",
             "walk": f"&eio_range={at}+{BLOCK}&eio_minlen={BLOCK + 1}",
             "lasting": f"&eio_range={at}+{BLOCK}",
             "stop": f"&eio_range={at}+{BLOCK}"}[a.where]
    d = Daemon(a, f"testdev:{cache}?eio_when={boom}&eio_ops=read{where}",
               f"testdev:{origin}?eio_when={refuse}&eio_ops=write")
    dirty = d.status()["dirty_bytes"]
    want = len(DIRTY) * BLOCK
    if dirty != want:
        sys.exit(f"dirty_bytes {dirty} after the restart, expected {want}")

    lost0 = d.status()["lost_dirty_bytes"]
    # Reads of blocks not cached yet (each once) fill the cache until the
    # cleaner reaches the first group and gives up an attempt.
    open(boom, "w").close()
    rng = random.Random(11)
    others = [b for b in range(nblocks) if b not in DIRTY and b not in LOSTB]
    rng.shuffle(others)
    gave_up = False
    for n, b in enumerate(others):
        if d.h.pread(BLOCK, b * BLOCK) != block_data(b, 1):
            sys.exit(f"block {b} reads wrong data")
        if n % 4 != 3:
            continue
        st = d.status()
        if st.get("cleaner", {}).get("read_retries", 0) >= 1 and a.where != "walk":
            gave_up = True
            break
        if st["lost_dirty_bytes"] != lost0 or st.get("abandoned") or \
                (st["cleaner"]["groups_retired"] and a.where != "lostcarry"):
            break           # without the fix: dealt with (lost) while unreadable
    if a.where == "walk":
        # The errors go on: the cleaner must get past them on its own.
        st = wait_retired(d, others[n + 1:])
        if st["cleaner"].get("read_retries", 0) < 5:
            sys.exit(f"walk: {st['cleaner'].get('read_retries')} attempts given up before the "
                     "group was reclaimed, expected the 5 that read whole chunks")
        gave_up = True
    if a.where == "lasting":
        lasting(d, others[n + 1:], origin, refuse, boom)
        return
    if a.where == "lostcarry":
        lost_carry(a, d, others[n + 1:], cache, origin, refuse, boom)
        return
    if a.where == "stop":
        stop_while_held(a, d, cache, origin, refuse)
        return
    os.unlink(boom)
    st = d.status()
    print(f"the errors stop: read_retries {st['cleaner'].get('read_retries')}, groups retired "
          f"{st['cleaner']['groups_retired']}, lost_dirty_bytes {st['lost_dirty_bytes']}, "
          f"devices {[dev['state'] for dev in st['devices']]}")
    if not gave_up and not st["lost_dirty_bytes"] and not st["cleaner"]["groups_retired"]:
        sys.exit(f"the cleaner never reached the first group; status:\n{json.dumps(st)}")

    # The errors are over: the cleaner reclaims the group.
    st = wait_retired(d, others[n + 1:])
    if st["lost_dirty_bytes"] != 0:
        sys.exit(f"lost_dirty_bytes {st['lost_dirty_bytes']} after transient read errors, "
                 f"expected 0\n{open(d.log).read()[-3000:]}")
    check_dirty_blocks(d, "after the errors stopped")
    st = d.status()
    if st["lost_dirty_bytes"] != 0 or st.get("abandoned"):
        sys.exit(f"lost {st['lost_dirty_bytes']} bytes, abandoned {st.get('abandoned')}")
    for dev in st["devices"]:
        if dev["state"] != "ok":
            sys.exit(f"cache device {dev['path']} is {dev['state']} after transient errors")
    # The data reaches the origin intact.
    os.unlink(refuse)
    subprocess.run([a.bin, "flush", "--socket", d.sock], check=True, stdout=subprocess.DEVNULL)
    d.stop()
    with open(origin, "rb") as f:
        for b in DIRTY:
            f.seek(b * BLOCK)
            if f.read(BLOCK) != block_data(b, 2):
                sys.exit(f"block {b} on the origin is not generation 2 after the flush")
    # The attempts given up were for the read this run fails.
    log = open(d.log).read()
    walk_fails = [n for n in re.findall(r"read of (\d+) bytes at offset \d+ failed", log)
                  if int(n) > BLOCK]
    if bool(walk_fails) != (a.where != "fragment"):
        sys.exit(f"{a.where}: {len(walk_fails)} reads of whole chunks failed:\n{log[-3000:]}")
    print(f"transient cache read errors ({a.where}): the cleaner gave up "
          f"{st['cleaner']['read_retries']} attempt(s), lost nothing, reclaimed the group")


if __name__ == "__main__":
    main()
