#!/usr/bin/python3
"""A device failure that leaves a small survivor: two cache devices, one
of 11 segments of 1 MiB and one of SMALL (2 or 3), writeback.  The large
one fails (its writes fail: testdev eio_when) with dirty data on it.

The reserve is a segment per device in service (space.c,
space_drop_free()).  Before, it stayed at two segments after the failure,
all of it the survivor's share: a survivor of 3 segments kept 2 free and
every client write waited for room for good after some 200; one of 2
kept both, and the cleaner retired groups in a loop (thousands a second)
while every write waited.  Now: the reserve is one segment, every write
completes, the cleaner's tail records find room, and every block reads
its last data.

usage: devfailsmall.py --bin TIERCACHE --dir DIR --small SEGMENTS
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import nbd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tclib import connect_when_up, ramp  # noqa: E402

BLOCK = 64 << 10
ORIGIN_BLOCKS = 256
WAIT = 60               # seconds a request may take (a loaded machine)


def pattern(b, gen):
    return (b.to_bytes(8, "little") + gen.to_bytes(8, "little") + ramp(b + gen, 4080)) * 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--small", type=int, required=True)
    a = ap.parse_args()
    d = a.dir
    with open(f"{d}/origin.img", "wb") as f:
        f.truncate(ORIGIN_BLOCKS * BLOCK)
    with open(f"{d}/a.img", "wb") as f:
        f.truncate(12 << 20)
    with open(f"{d}/b.img", "wb") as f:
        f.truncate((a.small + 1) << 20)
    subprocess.run([a.bin, "format", "--cache", f"{d}/a.img,{d}/b.img", "--origin",
                    f"{d}/origin.img", "--segment-size", "1M"], check=True,
                   stdout=subprocess.DEVNULL)
    boom = f"{d}/boom"
    sock = f"{d}/s.sock"
    log = open(f"{d}/daemon.log", "w")
    p = subprocess.Popen([a.bin, "serve", "--origin", f"{d}/origin.img", "--cache",
                          f"testdev:{d}/a.img?eio_when={boom}&eio_ops=write,{d}/b.img",
                          "--mode", "writeback", "--sequential-cutoff", "0",
                          "--socket", sock, "--foreground"], stdout=log, stderr=subprocess.STDOUT)
    try:
        h = connect_when_up(f"nbd+unix:///?socket={sock}", p)
        if h is None:
            sys.exit("daemon exited at start")

        def status():
            out = subprocess.run([a.bin, "status", "--socket", sock, "--json"],
                                 capture_output=True, text=True, check=True, timeout=WAIT).stdout
            return json.loads(out)["volume"]["cache"]

        def wedged(what):
            st = status()
            sys.exit(f"WEDGED: {what} did not complete within {WAIT} s: "
                     f"{st['cleaner']['appends_waiting_for_room']} appends waiting for room, "
                     f"segments free {[x['segments_free'] for x in st['devices']]}, reserve "
                     f"{st['segments_reserve']}, groups retired {st['cleaner']['groups_retired']}"
                     f"\n{json.dumps(st)}")

        def wait(what, cookie, may_fail=False):
            deadline = time.monotonic() + WAIT
            while True:
                try:
                    if h.aio_command_completed(cookie):
                        return
                except nbd.Error as e:
                    if may_fail:
                        return
                    sys.exit(f"{what} failed: {e}")
                if time.monotonic() > deadline:
                    wedged(what)
                h.poll(100)

        gens = {}
        gen = 1

        def write(b):
            nonlocal gen
            gen += 1
            gens[b] = gen
            wait(f"write of block {b}", h.aio_pwrite(pattern(b, gen), b * BLOCK))

        for i in range(60):
            write(i)
        wait("flush", h.aio_flush())
        open(boom, "w").close()
        for i in range(20):
            write(i)
        # The failure: the flush may report lost data (none here: the
        # dirty data is rescued or written back).
        wait("flush", h.aio_flush(), may_fail=True)
        deadline = time.monotonic() + WAIT
        while status()["devices"][0]["state"] == "ok":
            if time.monotonic() > deadline:
                sys.exit("the first device did not fail")
            time.sleep(0.02)
        for i in range(300):
            write((i * 7) % ORIGIN_BLOCKS)
        wait("flush", h.aio_flush(), may_fail=True)
        st = status()
        res = [x["segments_reserve"] for x in st["devices"]]
        print(f"survivor of {a.small} segments: reserve {st['segments_reserve']}, shares {res}")
        if st["segments_reserve"] != 1 or res[0] != 0:
            sys.exit(f"the reserve after the failure is {st['segments_reserve']} (shares {res}), "
                     f"not one segment, the survivor's\n{json.dumps(st)}")
        k = st["cleaner"]
        print(f"300 writes after the failure: {k['groups_retired']} groups retired, "
              f"tail records without room {k['tail_no_room']}, lost {st['lost_dirty_bytes']}")
        if k["tail_no_room"] != 0:
            sys.exit(f"tail records found no room {k['tail_no_room']} times")
        for b in range(ORIGIN_BLOCKS):
            buf = nbd.Buffer(BLOCK)
            try:
                wait(f"read of block {b}", h.aio_pread(buf, b * BLOCK))
            except SystemExit:
                raise
            got = bytes(buf.to_bytearray())
            want = pattern(b, gens[b]) if b in gens else bytes(BLOCK)
            if got != want:
                sys.exit(f"block {b} read other data than its last ({gens.get(b)})")
        h.shutdown()
        p.send_signal(signal.SIGTERM)
        if p.wait(WAIT) != 0:
            sys.exit(f"daemon exit status {p.returncode} after SIGTERM")
        print("every block reads its last data")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
