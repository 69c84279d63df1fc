#!/usr/bin/python3
"""Crash consistency: writes acknowledged before a completed FLUSH survive
any crash of the daemon.

Each iteration: start `tiercache serve` on the same origin and cache; four
writer threads write tagged 4 KiB sectors (each carries its offset and a
generation number, and a pattern derived from both) at random offsets,
each thread in its own stripe of the volume; now and then a thread sends
FLUSH, and the generations acknowledged before it was sent become the
durable floor.  Once every writer has connected, at a random moment, the
daemon is killed with SIGKILL.
With --power-loss the cache device is a testdev layer keeping an undo log,
which is applied after the kill: the cache device then holds only what it
had at its last flush (the worst a volatile write cache allows).

Then `tiercache check` must find the cache clean, the daemon restarts, and
every sector must read back as a well-formed tag (no torn or foreign data)
with a generation at least its durable floor and no newer than the newest
written.  What is read becomes the next iteration's starting point.

usage: crashloop.py --bin TIERCACHE --dir DIR --iterations N [--power-loss]
                    [--seed S] [--modes writeback,writethrough]
"""
import argparse
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import connect_when_up  # noqa: E402

SECTOR = 4096
MAGIC = b"TCCRASH1"


# The last pattern made for each sector offset: off -> (gen, bytes).  Most
# sectors read back at the generation made before (by a writer, or by the
# last check), and seeding a Random for each took a quarter of an
# iteration.  Bounded by the volume's sectors; a tuple is replaced whole
# (one store, atomic between the threads), so an entry is always a
# generation and its own pattern.
_made = {}


def pattern(off, gen):
    """The 4 KiB a sector holds at generation gen (gen 0: never written)."""
    if gen == 0:
        return bytes(SECTOR)
    m = _made.get(off)
    if m is not None and m[0] == gen:
        return m[1]
    head = MAGIC + struct.pack("<QQ", off, gen)
    rng = random.Random(off * 1000003 + gen)
    body = rng.randbytes(SECTOR - len(head))
    _made[off] = (gen, head + body)
    return head + body


def parse(off, data):
    """The generation of a sector's content, or None if it is not a tag."""
    if data == bytes(SECTOR):
        return 0
    if data[:8] != MAGIC:
        return None
    o, g = struct.unpack("<QQ", data[8:24])
    if o != off or data != pattern(off, g):
        return None
    return g


class State:
    def __init__(self, nsectors):
        self.lock = threading.Lock()
        self.floor = [0] * nsectors      # durable: must read back at least this
        self.acked = [0] * nsectors      # acknowledged so far
        self.written = [0] * nsectors    # highest generation ever sent
        self.next_gen = 1


def writer(uri, st, stripe, nstripes, stop, rng, errors, ready):
    h = nbd.NBD()
    try:
        h.connect_uri(uri)
    except nbd.Error as e:
        errors.append(str(e))
        return
    finally:
        ready.release()                 # connected, or failed: the kill may come
    nsectors = len(st.floor)
    chunk = 16                          # stripes of 16 sectors (64 KiB)
    try:
        while not stop.is_set():
            if rng.random() < 0.08:
                with st.lock:
                    snapshot = list(st.acked)
                h.flush()
                with st.lock:
                    for i, g in enumerate(snapshot):
                        if g > st.floor[i]:
                            st.floor[i] = g
                continue
            # A write of 1..8 sectors inside one of this thread's stripes.
            while True:
                base = rng.randrange(0, nsectors // chunk) * chunk
                if (base // chunk) % nstripes == stripe:
                    break
            start = base + rng.randrange(0, chunk)
            count = min(rng.randint(1, 8), base + chunk - start)
            with st.lock:
                gens = []
                for i in range(count):
                    gens.append(st.next_gen)
                    st.next_gen += 1
                for i in range(count):
                    st.written[start + i] = max(st.written[start + i], gens[i])
            buf = b"".join(pattern((start + i) * SECTOR, gens[i]) for i in range(count))
            h.pwrite(buf, start * SECTOR)
            with st.lock:
                for i in range(count):
                    if gens[i] > st.acked[start + i]:
                        st.acked[start + i] = gens[i]
    except nbd.Error:
        pass                            # the daemon was killed
    finally:
        del h


def start_actors(threads, ready, proc, log, what):
    """Start the threads and wait until each has connected (or failed to):
    a kill before that would be a race of the test, not a crash to survive.
    Each thread releases `ready` once; the wait is bounded but generous,
    since a loaded machine may take seconds to schedule a thread."""
    for t in threads:
        t.daemon = True                 # a failed wait must not hang on them
        t.start()
    deadline = time.time() + 120
    for _ in threads:
        while not ready.acquire(timeout=0.5):
            if proc.poll() is not None:
                sys.exit(f"{what}: the daemon died before the clients connected "
                         f"(status {proc.returncode}):\n{open(log).read()[-3000:]}")
            if time.time() > deadline:
                sys.exit(f"{what}: the clients did not connect within 120 s")


def wait_for(uri, proc, log):
    h = connect_when_up(uri, proc)
    if h is None:
        sys.exit(f"daemon exited at start:\n{open(log).read()[-3000:]}")
    h.shutdown()
    del h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--power-loss", action="store_true")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--modes", default="writeback")
    ap.add_argument("--origin-mib", type=int, default=48)
    ap.add_argument("--cache-mib", type=int, default=24)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print(f"seed {a.seed}", flush=True)
    d = a.dir
    origin, cache = f"{d}/origin.img", f"{d}/cache.img"
    sock, undo, log = f"{d}/c.sock", f"{d}/undo.log", f"{d}/daemon.log"
    with open(origin, "wb") as f:
        f.truncate(a.origin_mib << 20)
    with open(cache, "wb") as f:
        f.truncate(a.cache_mib << 20)
    subprocess.run([a.bin, "format", "--cache", cache, "--origin", origin,
                    "--segment-size", "1M"], check=True, stdout=subprocess.DEVNULL)
    nsectors = (a.origin_mib << 20) // SECTOR
    st = State(nsectors)
    uri = f"nbd+unix:///?socket={sock}"
    modes = a.modes.split(",")
    totals = {"writes_checked": 0, "durable_checked": 0}

    for it in range(a.iterations):
        mode = modes[it % len(modes)]
        cache_arg = f"testdev:{cache}?undo={undo}" if a.power_loss else cache
        if os.path.exists(sock):
            os.unlink(sock)
        with open(log, "a") as lf:
            lf.write(f"--- iteration {it} mode {mode}\n")
        proc = subprocess.Popen([a.bin, "serve", "--origin", origin, "--cache", cache_arg,
                                 "--mode", mode, "--socket", sock, "--foreground"],
                                stdout=open(log, "a"), stderr=subprocess.STDOUT)
        wait_for(uri, proc, log)
        stop = threading.Event()
        errors = []
        ready = threading.Semaphore(0)
        threads = [threading.Thread(target=writer,
                                    args=(uri, st, t, 4, stop, random.Random(rng.random()), errors,
                                          ready))
                   for t in range(4)]
        start_actors(threads, ready, proc, log, f"iteration {it}")
        if errors:
            sys.exit(f"iteration {it}: writer could not connect: {errors[0]}")
        time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
        if errors:
            sys.exit(f"iteration {it}: writer could not connect: {errors[0]}")
        if a.power_loss:
            subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..",
                                                         "tools", "undo"), undo, cache],
                           check=True, stdout=subprocess.DEVNULL)
        chk = subprocess.run([a.bin, "check", "--cache", cache, "--origin", origin],
                             capture_output=True, text=True)
        if chk.returncode != 0:
            sys.exit(f"iteration {it}: tiercache check failed (exit {chk.returncode}):\n"
                     f"{chk.stdout}{chk.stderr}")

        # Restart and read everything back.
        if os.path.exists(sock):
            os.unlink(sock)
        proc = subprocess.Popen([a.bin, "serve", "--origin", origin, "--cache", cache,
                                 "--mode", mode, "--socket", sock, "--foreground"],
                                stdout=open(log, "a"), stderr=subprocess.STDOUT)
        wait_for(uri, proc, log)
        h = nbd.NBD()
        h.connect_uri(uri)
        step = 256
        for base in range(0, nsectors, step):
            data = h.pread(step * SECTOR, base * SECTOR)
            for i in range(step):
                s = base + i
                g = parse(s * SECTOR, data[i * SECTOR:(i + 1) * SECTOR])
                if g is None:
                    sys.exit(f"iteration {it} ({mode}): sector {s} holds data that is not a "
                             f"well-formed tag (torn or foreign)")
                if g < st.floor[s]:
                    sys.exit(f"iteration {it} ({mode}): sector {s} reads generation {g}, but "
                             f"generation {st.floor[s]} was flushed: an acknowledged, flushed "
                             f"write was lost")
                if g > st.written[s]:
                    sys.exit(f"iteration {it} ({mode}): sector {s} reads generation {g}, never "
                             f"written")
                if st.floor[s]:
                    totals["durable_checked"] += 1
                # What survived is the new truth.
                st.floor[s] = g
                st.acked[s] = g
        h.shutdown()
        del h
        proc.send_signal(signal.SIGTERM)
        if proc.wait() != 0:
            sys.exit(f"iteration {it}: daemon exit status {proc.returncode} after SIGTERM")
        totals["writes_checked"] = st.next_gen - 1
        print(f"iteration {it} ({mode}) ok: {st.next_gen - 1} writes so far", flush=True)
    print(f"{a.iterations} iterations passed; {totals['writes_checked']} writes, "
          f"{totals['durable_checked']} flushed sector checks")


if __name__ == "__main__":
    main()
