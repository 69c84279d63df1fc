# bench/lib.sh: helpers for bench/run and the workloads in bench/workloads/.
# Sourced, never run.  Everything a workload starts (servers, fio, FUSE
# mounts, loop devices, cgroups) is registered and torn down on exit, also
# on failure or Ctrl-C.
#
# Set by bench/run before sourcing: ROOT (the source tree), BUILD, SCALE,
# STATE (prepared data, kept between runs), OUT (this run's results).

TC=$ROOT/$BUILD/tiercache
RAW=$OUT/raw.csv
RATIOS=$OUT/ratio_defs.csv
PLOTS=$OUT/plots.csv
NOTES=$OUT/notes.txt
WORK=""          # scratch directory of the current workload (wl_begin)

# ---- the emulated spindle (see docs/BENCHMARKS.md) -----------------------
# One request at a time (a disk has one actuator), 4 ms before each request
# (seek and rotation), 150 MB/s media rate with a bucket of 0.25 s so that an
# idle pause gives at most a 37 MB burst.
SP_DELAY=${SP_DELAY:-4ms}
SP_RATE=${SP_RATE:-1200M}
SP_BURST=${SP_BURST:-0.25}

say() { printf '%s\n' "$*" >&2; }
die() { say "bench: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# human sizes for messages: 1073741824 -> 1.0 GiB
hsize() { numfmt --to=iec-i --suffix=B --format='%.1f' "$1"; }
bytes() { numfmt --from=iec "${1%B}"; }

# ---- records --------------------------------------------------------------
# record WORKLOAD TEST CONFIG METRIC UNIT REP VALUE
record() {
  printf '%s,%s,%s,%s,%s,%s,%s\n' "$@" >>"$RAW"
  printf '    %-10s %-14s %-16s %-14s rep %s: %s %s\n' "$1" "$2" "$3" "$4" "$6" "$7" "$5" >&2
}
# ratio WORKLOAD NAME NUM DEN AIM
#   NUM and DEN are TEST/CONFIG/METRIC; AIM is ">=5", "<=1.5" or "-".  The
#   ratio is computed per repetition (the runs of one repetition ran close
#   in time) and summarised by its median, min and max.  DEN "1" holds the
#   figure NUM itself against AIM (an aim in seconds or bytes, not a ratio).
ratio() {
  case "$*" in *,*) die "ratio: no commas in a name or figure: $*" ;; esac
  printf '%s,%s,%s,%s,%s\n' "$@" >>"$RATIOS"
}
# plot WORKLOAD TEST METRIC TITLE: one panel of the workload's PNG
plot() { printf '%s,%s,%s,%s\n' "$@" >>"$PLOTS"; }
# note WORKLOAD TEXT: a line printed under the workload's table
note() { printf '%s\t%s\n' "$1" "$2" >>"$NOTES"; }

# order REP ITEM...: the items rotated by REP-1, so that over 3 repetitions
# every configuration runs once first, once in the middle and once last.
order() {
  local rep=$1; shift
  local n=$# i k
  local items=("$@")
  for ((i = 0; i < n; i++)); do
    k=$(( (i + rep - 1) % n ))
    printf '%s\n' "${items[$k]}"
  done
}

# ---- cleanup ---------------------------------------------------------------
declare -A PIDS=()
declare -A TC_UP=()   # tiercache server -> the NBD server of its origin
STARTED=()       # names in the order they were started
_cleanups=()
on_exit() { _cleanups+=("$*"); }
_cleanup() {
  local rc=$? i
  set +e
  for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[$i]}" >/dev/null 2>&1; done
  _cleanups=()
  for name in "${!PIDS[@]}"; do kill -KILL "${PIDS[$name]}" 2>/dev/null; wait "${PIDS[$name]}" 2>/dev/null; done
  PIDS=()
  [ -n "$WORK" ] && [ -z "${BENCH_KEEP:-}" ] && rm -rf "$WORK"
  return $rc
}

# wl_begin NAME: a fresh scratch directory for one workload (local disk,
# under state/bench: cache files, sockets, logs).
wl_begin() {
  WORK=$STATE/work/$1
  rm -rf "$WORK"
  mkdir -p "$WORK/records"
  # The origin and stop records of the workload's cache sets go with it:
  # every run formats sets of its own, whose records would otherwise
  # gather in the machine's /var/lib/tiercache (one a set, never removed).
  export TIERCACHE_ORIGIN_RECORDS=$WORK/records
}
# wl_end: stop the servers still running (in order, SIGTERM), then clean up
# (loop devices and cgroups the servers used go after the servers)
wl_end() {
  local i
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop "${STARTED[$i]}"; done
  STARTED=()
  _cleanup
  WORK=""
}

# ---- processes --------------------------------------------------------------
# spawn NAME COMMAND...: run in the background, output in $WORK/NAME.log
spawn() {
  local name=$1; shift
  "$@" >>"$WORK/$name.log" 2>&1 </dev/null &
  PIDS[$name]=$!
  STARTED+=("$name")
}
pid_of() { printf '%s' "${PIDS[$1]}"; }
# stop NAME [SECONDS]: SIGTERM, wait (default 60 s), then SIGKILL
stop() {
  local name=$1 t=${2:-60} pid=${PIDS[$1]:-} i up=${TC_UP[$1]:-}
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < t * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    # tiercache with an NBD origin: once the volume is closed (durable, the
    # origin flushed) the daemon still waits for the origin's connections
    # to drop (see docs/BENCHMARKS.md, "Problems found"); the origin server
    # is stopped next anyway, so stop it now.
    if [ -n "$up" ] && ((i >= 20)) && grep -q 'volume closed' "$WORK/$name.log" 2>/dev/null; then
      echo "$(date +%T) $name: still running $((i / 10)) s after 'volume closed'; stopping its origin $up" >>"$WORK/stop.log"
      kill -KILL "${PIDS[$up]}" 2>/dev/null || true
      wait "${PIDS[$up]}" 2>/dev/null || true
      up=""
    fi
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "bench: $name did not stop in ${t} s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  unset "PIDS[$name]" "TC_UP[$name]"
  rm -f "$WORK/$name.sock"
  return 0
}
sock() { printf '%s/%s.sock' "$WORK" "$1"; }
uri() { printf 'nbd+unix:///?socket=%s/%s.sock' "$WORK" "$1"; }
# wait_up NAME: until the NBD server NAME answers (60 s at most)
wait_up() {
  local name=$1 i
  for ((i = 0; i < 600; i++)); do
    if [ -S "$(sock "$name")" ] && nbdinfo --size "$(uri "$name")" >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "${PIDS[$name]}" 2>/dev/null || { tail -n 20 "$WORK/$name.log" >&2; die "$name exited at start"; }
    sleep 0.1
  done
  tail -n 20 "$WORK/$name.log" >&2
  die "$name did not start"
}

# ---- servers ------------------------------------------------------------------
# Every configuration is an NBD server on a Unix socket, so every one pays
# the same client path (fio's nbd engine, or nbdfuse).

# spindle NAME FILE: the slow origin, FILE behind the emulated spindle
spindle() {
  local name=$1 file=$2
  rm -f "$(sock "$name")"
  spawn "$name" nbdkit --foreground --exit-with-parent -U "$(sock "$name")" \
    --filter=stats --filter=noparallel --filter=delay --filter=rate file "$file" \
    statsfile=$WORK/$name.stats serialize=all-requests rdelay="$SP_DELAY" wdelay="$SP_DELAY" rate="$SP_RATE" burstiness="$SP_BURST"
  wait_up "$name"
}
# fastdev NAME FILE [nbdkit file options]: a file on local disk, nothing else
fastdev() {
  local name=$1 file=$2; shift 2
  rm -f "$(sock "$name")"
  spawn "$name" nbdkit --foreground --exit-with-parent -U "$(sock "$name")" file "$file" "$@"
  wait_up "$name"
}
# nbdcache NAME UPSTREAM MODE SIZE: nbdkit's cache filter in front of the
# NBD server UPSTREAM (a separate process, as for tiercache), its cache file
# in $WORK (local disk), reads cached too.
nbdcache() {
  local name=$1 up=$2 mode=$3 size=$4
  rm -f "$(sock "$name")"
  TMPDIR=$WORK spawn "$name" nbdkit --foreground --exit-with-parent -U "$(sock "$name")" \
    --filter=cache nbd socket="$(sock "$up")" \
    cache="$mode" cache-max-size="$size" cache-on-read=true
  wait_up "$name"
}
# tcformat CACHE[,CACHE] UPSTREAM SIZE [format options]: fresh cache files
# of SIZE each for the origin served by UPSTREAM (a block device is
# reformatted, discarding what an earlier run left in it, dirty data too)
tcformat() {
  local caches=$1 up=$2 size=$3 c; shift 3
  for c in ${caches//,/ }; do
    case $c in
      /dev/*) ;;
      *) rm -f "$c"; truncate -s "$size" "$c" ;;
    esac
  done
  "$TC" format --force --discard-dirty --cache "$caches" --origin "$(uri "$up")" "$@" \
    >>"$WORK/format.log" 2>&1 ||
    { tail -n 5 "$WORK/format.log" >&2; die "tiercache format failed"; }
}
# tcserve NAME ORIGIN [serve options]: ORIGIN is a file or an NBD server name
tcserve() {
  local name=$1 origin=$2; shift 2
  if [ ! -e "$origin" ]; then TC_UP[$name]=$origin; origin=$(uri "$origin"); fi
  rm -f "$(sock "$name")"
  spawn "$name" "$TC" serve --foreground --origin "$origin" --socket "$(sock "$name")" "$@"
  wait_up "$name"
}
# tcdump NAME LABEL: keep tiercache status --json in OUT/status/LABEL.json
tcdump() {
  mkdir -p "$OUT/status"
  "$TC" status --json --socket "$(sock "$1")" >"$OUT/status/$2.json" 2>/dev/null || true
}
# tcstatus NAME KEY...: figures from tiercache status --json (dotted keys)
tcstatus() {
  local name=$1; shift
  "$TC" status --json --socket "$(sock "$name")" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for k in sys.argv[1:]:
    v = d
    for p in k.split("."):
        v = v[int(p)] if isinstance(v, list) else v[p]
    print(v)' "$@"
}

# ---- fio ---------------------------------------------------------------------
# fio_nbd OUT.json NAME [fio options]: one fio job per connection against
# server NAME, results as JSON.  A run that does not end 120 s after its
# --runtime (15 minutes without one) fails the workload, with the server's
# status kept in OUT/status/, rather than hanging the whole benchmark.
fio_nbd() {
  local out=$1 name=$2 limit=900 a rt=0 ramp=0 rc=0; shift 2
  for a in "$@"; do
    case $a in
      --runtime=*) rt=${a#--runtime=} ;;
      --ramp_time=*) ramp=${a#--ramp_time=} ;;
    esac
  done
  [ "$rt" != 0 ] && limit=$(awk -v a="$rt" -v b="$ramp" 'BEGIN { printf "%d", a + b + 120 }')
  timeout -k 10 "$limit" fio --output-format=json --output="$out" --name=bench --ioengine=nbd \
    --uri="$(uri "$name")" "$@" >/dev/null 2>"$out.err" || rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    local tag; tag=hung-$(basename "$out" .json)
    tcdump "$name" "$tag"
    cp "$WORK/$name.log" "$OUT/status/$tag.log" 2>/dev/null || true
    die "fio against $name did not finish within $limit s: a request never completed (its status and log: ${OUT#"$ROOT"/}/status/$tag.*)"
  fi
  [ $rc = 0 ] || { cat "$out.err" >&2; die "fio failed against $name"; }
}
# fio_get OUT.json FIGURE...: read_iops write_iops read_mbps write_mbps
# read_p99_ms write_p99_ms (summed or worst over jobs)
fio_get() {
  local out=$1; shift
  python3 - "$out" "$@" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text[text.index('{'):])
jobs = d['jobs']
for f in sys.argv[2:]:
    rw, what = f.split('_', 1)
    if what == 'iops':
        v = sum(j[rw]['iops'] for j in jobs)
    elif what == 'mbps':
        v = sum(j[rw]['bw_bytes'] for j in jobs) / 1e6
    elif what == 'p99_ms':
        v = max(j[rw]['clat_ns']['percentile'].get('99.000000', 0) for j in jobs) / 1e6
    else:
        raise SystemExit('fio_get: unknown figure ' + f)
    print('%.6g' % v)
PY
}

# ---- data ---------------------------------------------------------------------
# datafile PATH SIZE: a file of SIZE random bytes, made once and kept
datafile() {
  local path=$1 size=$2
  if [ -f "$path" ] && [ "$(stat -c %s "$path")" = "$(bytes "$size")" ]; then return 0; fi
  say "bench: making $path ($size of random data)"
  rm -f "$path"
  head -c "$(bytes "$size")" /dev/urandom >"$path.tmp"
  mv "$path.tmp" "$path"
}
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
