#!/usr/bin/env python3
"""bench/git_phases.py OUT CONFIG [REP]

Where a tiercache configuration of the git workload spent its time, phase
by phase: from the status bench/workloads/git.sh keeps after every phase
(OUT/status/git-CONFIG-REP-PHASE.json, cumulative counters) and the phase
times in OUT/raw.csv.  For each phase: seconds, client reads and their
hit ratio by request and by bytes, origin reads and writes (requests and
MB), group fills (all, merged with a miss, read by a client), and the
origin's busy time as the emulated spindle charges it (SP_DELAY per
request plus the bytes at SP_RATE; defaults 4 ms and 1200 Mbit/s, as in
bench/lib.sh), for reads and for writes.  REP defaults to 1.
"""
import json
import os
import sys

if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
out, cfg = sys.argv[1], sys.argv[2]
rep = sys.argv[3] if len(sys.argv) > 3 else "1"


def seconds(v, unit):
    v = float(v)
    return v / 1000 if unit == "ms" else v


delay = os.environ.get("SP_DELAY", "4ms")
delay_s = seconds(delay[:-2], "ms") if delay.endswith("ms") else seconds(delay.rstrip("s"), "s")
rate = os.environ.get("SP_RATE", "1200M")
rate_bps = float(rate.rstrip("MGk")) * {"k": 1e3, "M": 1e6, "G": 1e9}.get(rate[-1], 1) / 8

phases = ["mkfs", "clone"] + [f"checkout_t{n}" for n in range(1, 6)]
times = {}
for line in open(os.path.join(out, "raw.csv")):
    f = line.strip().split(",")
    if len(f) >= 7 and f[0] == "git" and f[1] == "phases" and f[2] == cfg and f[5] == rep:
        times[f[3]] = float(f[6])

print(f"{'phase':12} {'s':>6} {'reads':>6} {'hit':>5} {'hitB':>5} {'oRd':>5} {'oRdMB':>6} "
      f"{'oWr':>5} {'oWrMB':>6} {'gf':>5} {'gfm':>5} {'gfr':>5} {'busyR':>6} {'busyW':>6}")
prev = None
for ph in phases:
    p = os.path.join(out, "status", f"git-{cfg}-{rep}-{ph}.json")
    if not os.path.exists(p):
        continue
    v = json.load(open(p))["volume"]
    c, o = v["cache"], v["origin"]
    cur = dict(rh=c["read_hits"], rm=c["read_misses"], hb=c["read_hit_bytes"],
               mb=c["read_miss_bytes"], orr=o["reads"], orb=o["read_bytes"], ow=o["writes"],
               owb=o["write_bytes"], gf=c["group_fills"], gfm=c.get("group_fills_merged", 0),
               gfr=c["group_fills_read"])
    d = {k: cur[k] - (prev[k] if prev else 0) for k in cur}
    prev = cur
    rq = d["rh"] + d["rm"]
    hr = d["rh"] / rq if rq else 0
    hbr = d["hb"] / (d["hb"] + d["mb"]) if d["hb"] + d["mb"] else 0
    busy_r = d["orr"] * delay_s + d["orb"] / rate_bps
    busy_w = d["ow"] * delay_s + d["owb"] / rate_bps
    print(f"{ph:12} {times.get(ph, 0):6.2f} {rq:6} {hr:5.3f} {hbr:5.3f} {d['orr']:5} "
          f"{d['orb'] / 1e6:6.1f} {d['ow']:5} {d['owb'] / 1e6:6.1f} {d['gf']:5} {d['gfm']:5} "
          f"{d['gfr']:5} {busy_r:6.2f} {busy_w:6.2f}")
