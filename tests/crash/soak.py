#!/usr/bin/python3
"""Soak: a mixed verified workload in writeback mode, with the daemon
killed (SIGKILL) and restarted again and again, for a given time.

Writers write tagged 4 KiB sectors and send FLUSH now and then (as in
crashloop.py, whose tagging and bookkeeping this reuses); readers read
random ranges all the while and check every sector on the fly: a well-formed
tag of its own offset, at least as new as what was acknowledged before the
read was sent, never newer than anything written.  The cache is smaller
than the data, so the cleaner and writeback run.  After every kill,
tiercache check must find the cache clean, and after the restart every
sector must hold at least its generation acknowledged before a completed
FLUSH.

usage: soak.py --bin TIERCACHE --dir DIR --seconds N [--seed S]
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time

import nbd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crashloop import SECTOR, State, parse, start_actors, wait_for, writer  # noqa: E402


def reader(uri, st, stop, rng, errors, counts, ready):
    h = nbd.NBD()
    try:
        h.connect_uri(uri)
    except nbd.Error as e:
        errors.append(f"reader could not connect: {e}")
        return
    finally:
        ready.release()
    nsectors = len(st.floor)
    try:
        while not stop.is_set():
            count = rng.choice([1, 4, 16, 64])
            start = rng.randrange(0, nsectors - count)
            with st.lock:
                lo = st.acked[start:start + count]
            data = h.pread(count * SECTOR, start * SECTOR)
            with st.lock:
                hi = st.written[start:start + count]
            for i in range(count):
                s = start + i
                g = parse(s * SECTOR, data[i * SECTOR:(i + 1) * SECTOR])
                if g is None:
                    errors.append(f"sector {s} read during the workload is not a well-formed "
                                  f"tag (torn or foreign)")
                elif g < lo[i]:
                    errors.append(f"sector {s} read generation {g} during the workload, but "
                                  f"{lo[i]} was acknowledged before the read")
                elif g > hi[i]:
                    errors.append(f"sector {s} read generation {g}, never written")
                if errors:
                    return
            counts["reads"] += 1
    except nbd.Error:
        pass                            # the daemon was killed
    finally:
        del h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--origin-mib", type=int, default=32)
    ap.add_argument("--cache-mib", type=int, default=16)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print(f"seed {a.seed}", flush=True)
    d = a.dir
    origin, cache = f"{d}/origin.img", f"{d}/cache.img"
    sock, log = f"{d}/soak.sock", f"{d}/daemon.log"
    with open(origin, "wb") as f:
        f.truncate(a.origin_mib << 20)
    with open(cache, "wb") as f:
        f.truncate(a.cache_mib << 20)
    subprocess.run([a.bin, "format", "--cache", cache, "--origin", origin,
                    "--segment-size", "1M"], check=True, stdout=subprocess.DEVNULL)
    nsectors = (a.origin_mib << 20) // SECTOR
    st = State(nsectors)
    uri = f"nbd+unix:///?socket={sock}"
    counts = {"reads": 0, "durable_checked": 0}
    t_end = time.time() + a.seconds
    it = 0

    def serve():
        if os.path.exists(sock):
            os.unlink(sock)
        p = subprocess.Popen([a.bin, "serve", "--origin", origin, "--cache", cache,
                              "--mode", "writeback", "--socket", sock, "--foreground"],
                             stdout=open(log, "a"), stderr=subprocess.STDOUT)
        wait_for(uri, p, log)
        return p

    while it == 0 or time.time() < t_end:
        with open(log, "a") as lf:
            lf.write(f"--- kill {it}\n")
        proc = serve()
        stop = threading.Event()
        errors = []
        ready = threading.Semaphore(0)
        threads = [threading.Thread(target=writer,
                                    args=(uri, st, t, 3, stop, random.Random(rng.random()),
                                          errors, ready))
                   for t in range(3)]
        threads += [threading.Thread(target=reader,
                                     args=(uri, st, stop, random.Random(rng.random()), errors,
                                           counts, ready))
                     for _ in range(2)]
        start_actors(threads, ready, proc, log, f"kill {it}")
        if errors:
            sys.exit(f"kill {it}: {errors[0]}")
        time.sleep(rng.uniform(0.3, 2.5))
        if proc.poll() is not None:
            sys.exit(f"kill {it}: the daemon died by itself (status {proc.returncode})")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
        if errors:
            sys.exit(f"kill {it}: {errors[0]}")
        chk = subprocess.run([a.bin, "check", "--cache", cache, "--origin", origin],
                             capture_output=True, text=True)
        if chk.returncode != 0:
            sys.exit(f"kill {it}: tiercache check failed (exit {chk.returncode}):\n"
                     f"{chk.stdout}{chk.stderr}")

        # Restart: every sector holds at least its flushed generation.
        proc = serve()
        h = nbd.NBD()
        h.connect_uri(uri)
        step = 256
        for base in range(0, nsectors, step):
            data = h.pread(step * SECTOR, base * SECTOR)
            for i in range(step):
                s = base + i
                g = parse(s * SECTOR, data[i * SECTOR:(i + 1) * SECTOR])
                if g is None:
                    sys.exit(f"kill {it}: sector {s} holds data that is not a well-formed tag")
                if g < st.floor[s]:
                    sys.exit(f"kill {it}: sector {s} reads generation {g}, but generation "
                             f"{st.floor[s]} was flushed: an acknowledged, flushed write was "
                             f"lost")
                if g > st.written[s]:
                    sys.exit(f"kill {it}: sector {s} reads generation {g}, never written")
                if st.floor[s]:
                    counts["durable_checked"] += 1
                st.floor[s] = g
                st.acked[s] = g
        h.shutdown()
        del h
        proc.send_signal(signal.SIGTERM)
        if proc.wait() != 0:
            sys.exit(f"kill {it}: daemon exit status {proc.returncode} after SIGTERM")
        it += 1
        print(f"kill {it} ok: {st.next_gen - 1} writes, {counts['reads']} verified reads so far",
              flush=True)
    print(f"{it} kills and restarts in {a.seconds:.0f} s passed: {st.next_gen - 1} writes, "
          f"{counts['reads']} reads verified during the workload, "
          f"{counts['durable_checked']} flushed sector checks")


if __name__ == "__main__":
    main()
