#!/usr/bin/env python3
"""bench/replay_means.py [--tiercache BIN] [--policy P] [--sizes LIST]
                         [--mode auto|wt|wb|both] [-j N] DIR

Replays every DIR/*.trace (the request streams the git workload keeps in
OUT/traces/) with `tiercache replay` and prints, for each cache size, the
mean over the traces of the read hit ratio by request and by bytes: all
traces, and those replayed in writethrough and in writeback.  Mode auto
replays each trace in the mode it was captured in (a name with "-wb" is
writeback: git-tiercache-wb-2.trace); both replays each in both modes.
Defaults: build/tiercache, policy default, 64M,68M,72M.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
ap.add_argument("dir")
ap.add_argument("--tiercache", default="build/tiercache")
ap.add_argument("--policy", default="default")
ap.add_argument("--sizes", default="64M,68M,72M")
ap.add_argument("--mode", default="auto", choices=["auto", "wt", "wb", "both"])
ap.add_argument("-j", type=int, default=2)
a = ap.parse_args()

jobs = []
for t in sorted(glob.glob(os.path.join(a.dir, "*.trace"))):
    name = os.path.basename(t)
    if a.mode == "auto":
        modes = ["wb" if "-wb" in name else "wt"]
    elif a.mode == "both":
        modes = ["wt", "wb"]
    else:
        modes = [a.mode]
    jobs += [(t, m) for m in modes]
if not jobs:
    sys.exit(f"replay_means: no *.trace in {a.dir}")


def replay(job):
    t, m = job
    out = subprocess.run([a.tiercache, "replay", "--trace", t, "--cache-size", a.sizes,
                          "--policy", a.policy, "--mode", m, "--json"],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"replay_means: {t}: {out.stderr.strip()}")
    return [(m, r) for r in json.loads(out.stdout)["results"]]


with ThreadPoolExecutor(a.j) as ex:
    rows = [x for res in ex.map(replay, jobs) for x in res]


def means(rs):
    if not rs:
        return "      -       -"
    req = sum(r["read_hits"] / r["reads"] for r in rs) / len(rs)
    byt = sum(r["read_hit_bytes"] / r["read_bytes"] for r in rs) / len(rs)
    return f"{req:7.3f} {byt:7.3f}"


print(f"policy {a.policy}, {len(jobs)} replays; mean read hit ratio by request, by bytes")
print(f"{'cache':>8} | {'all':^15} | {'writethrough':^15} | {'writeback':^15}")
for size in sorted({r["cache_bytes"] for _, r in rows}):
    sel = [(m, r) for m, r in rows if r["cache_bytes"] == size]
    cols = [means([r for m, r in sel if f in (None, m)]) for f in (None, "wt", "wb")]
    print(f"{size / 2**20:6.0f} M | " + " | ".join(cols))
