#!/usr/bin/env bash
# serve --nbd-threads N, N = 0, 1, 2 in turn (the order rotated each round):
# cached 4 KiB random reads at QD32 and 1 MiB sequential reads at QD8
# through fio's nbd engine over a Unix socket, against an origin wholly
# cached (--sequential-cutoff 0, warmed by one sequential read).  For each
# run: IOPS (or MB/s) and the daemon's CPU per request, status
# cpu_user_seconds + cpu_system_seconds over volume.requests.read around
# the run (all the daemon's threads).
#
#   bench/frontend_threads.sh [ROUNDS [SECONDS [ORIGIN_MIB]]]
#
# Prints one line per run and the medians per N at the end.
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-5}
MIB=${3:-512}
TIERCACHE=${TIERCACHE:-$(dirname "$0")/../build/tiercache}
THREADS=${THREADS:-"0 1 2"}
dir=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

head -c $((MIB << 20)) /dev/urandom > "$dir/origin.img"
truncate -s $((MIB * 5 / 4))M "$dir/cache.img"
"$TIERCACHE" format --cache "$dir/cache.img" --origin "$dir/origin.img" >/dev/null
sock=$dir/s.sock
uri="nbd+unix:///?socket=$sock"

start() {
  "$TIERCACHE" serve --origin "$dir/origin.img" --cache "$dir/cache.img" \
    --sequential-cutoff 0 --socket "$sock" --foreground --nbd-threads "$1" \
    >>"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    nbdinfo --size "$uri" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the daemon did not start" >&2
  exit 1
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
}
# cpu seconds and reads so far, then the CPU seconds of the front-end
# threads (named nbd-fe*) from /proc
sample() {
  "$TIERCACHE" status --socket "$sock" --json | /usr/bin/python3 -c '
import json, os, sys
v = json.load(sys.stdin)
pid = sys.argv[1]
hz = os.sysconf("SC_CLK_TCK")
fe = 0
for t in os.listdir("/proc/%s/task" % pid):
    try:
        comm = open("/proc/%s/task/%s/comm" % (pid, t)).read().strip()
        st = open("/proc/%s/task/%s/stat" % (pid, t)).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if comm.startswith("nbd-fe"):
        fe += (int(st[11]) + int(st[12])) / hz
print(v["cpu_user_seconds"] + v["cpu_system_seconds"], v["volume"]["requests"]["read"], fe)' "$pid"
}
# fio run: prints "iops MB/s cpu_us_per_request fe_cpu_us_per_request"
measure() {
  local bs=$1 rw=$2 qd=$3 a b out
  a=$(sample)
  out=$(fio --name=b --ioengine=nbd --uri="$uri" --rw="$rw" --bs="$bs" --iodepth="$qd" \
        --size=$((MIB << 20)) --runtime="$SECS" --time_based --output-format=json)
  b=$(sample)
  /usr/bin/python3 -c '
import json, sys
a = list(map(float, sys.argv[1].split())); b = list(map(float, sys.argv[2].split()))
out = sys.argv[3]
r = json.loads(out[out.index("{"):])["jobs"][0]["read"]     # after any notes
n = max(1, b[1] - a[1])
print("%.0f %.0f %.2f %.2f" % (r["iops"], r["bw_bytes"] / 1e6, (b[0] - a[0]) / n * 1e6,
                               (b[2] - a[2]) / n * 1e6))' "$a" "$b" "$out"
}

start 0
nbdcopy "$uri" null: 2>/dev/null || fio --name=w --ioengine=nbd --uri="$uri" --rw=read \
  --bs=1M --iodepth=8 --size=$((MIB << 20)) >/dev/null
stop

results=$dir/results
: > "$results"
set -- $THREADS
for round in $(seq 1 "$ROUNDS"); do
  for n in "$@"; do
    start "$n"
    read -r iops _ cpu4 fe4 < <(measure 4k randread 32)
    read -r _ mbs cpu1m fe1m < <(measure 1M read 8)
    stop
    echo "round $round  N=$n  4k QD32: $iops IOPS, $cpu4 us/req ($fe4 on front ends)" \
         "  1M QD8: $mbs MB/s, $cpu1m us/req ($fe1m)   load $(cut -d' ' -f1 /proc/loadavg)"
    echo "$n $iops $cpu4 $fe4 $mbs $cpu1m $fe1m" >> "$results"
  done
  set -- "${@:2}" "$1"      # rotate the order
done
/usr/bin/python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for n in sorted({r[0] for r in rows}, key=int):
    rs = [list(map(float, r[1:])) for r in rows if r[0] == n]
    med = [statistics.median(c) for c in zip(*rs)]
    print("N=%s medians of %d: 4k %.0f IOPS %.2f us/req (front ends %.2f), "
          "1M %.0f MB/s %.1f us/req (front ends %.1f)" % (n, len(rs), *med))
PY
