#!/usr/bin/env bash
# bench/swap.sh: the swap prefetch benchmark (a benchmark, not a test).
#
# sp_tester in a memory cgroup (1 GiB by default) with a swap file on disk,
# sleeping 30 s between the push and the reread, four times in one run:
#
#   floor    the first buffer is never pushed out (--no-push)
#   without  pushed out to swap, no daemon
#   with     pushed out to swap, tiercache swap-prefetch running (pages
#            brought back into the swap cache: the reread maps each one
#            with a minor fault)
#   mapped   the same with swap-prefetch --map (pages also mapped into
#            sp_tester's page tables: the reread takes no fault)
#
# and prints the reread times, their major faults, and the ratios
# with / floor and without / with.
#
#   bench/swap.sh [--limit SIZE] [--swap SIZE] [--sleep S] [--reread MODES]
#                 [--level N] [--dir DIR] [--build DIR] [--order RUNS]
#                 [--record FILE] [-- DAEMON OPTIONS]
#
#   --limit   the cgroup's limit, RAM for sp_tester's sizing (default 1G)
#   --swap    size of the swap file (default 2G)
#   --sleep   seconds between push and reread (default 30)
#   --reread  sp_tester reread modes, each run in turn (default "bytes";
#             also "pages", "random")
#   --level   the daemon's level (default 3: prefetch regardless of idleness,
#             so that a busy shared machine still shows the effect; use 1
#             on an idle machine for the default behaviour)
#   --dir     where the swap file goes: a directory on a disk, not tmpfs
#             (default /var/tmp)
#   --build   the build to use (default build)
#   --order   the runs, in this order (default "floor without with mapped"; bench/run
#             rotates it between repetitions)
#   --record  append a line "MODE RUN reread_s majflt" per run to FILE
#   after --: more options for tiercache swap-prefetch (default: its
#             defaults for rate, interval and headroom)
#
# Needs root.  Everything it makes (swap file, cgroup, daemon) is removed on
# exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=1G swap=2G sleep_s=30 modes=bytes level=3 dir=/var/tmp build=build
runs="floor without with mapped" record=
daemon_opts=()
while [ $# -gt 0 ]; do
  case $1 in
    --limit) limit=$2; shift 2 ;;
    --swap) swap=$2; shift 2 ;;
    --sleep) sleep_s=$2; shift 2 ;;
    --reread) modes=$2; shift 2 ;;
    --level) level=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --order) runs=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    --) shift; daemon_opts=("$@"); break ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "bench/swap.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" = 0 ] || { echo "bench/swap.sh: needs root (swapon, cgroups)" >&2; exit 1; }
TC=$build/tiercache
SPT=$build/bench/sp_tester
[ -x "$TC" ] && [ -x "$SPT" ] || { echo "bench/swap.sh: build first (make)" >&2; exit 1; }

work=$(mktemp -d "$dir/tiercache-swapbench.XXXXXX")
swapfile=$work/swapfile
daemon_pid=
cg=
cleanup() {
  set +e
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    for _ in $(seq 1 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
  fi
  swapoff "$swapfile" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fallocate -l "$swap" "$swapfile"
chmod 600 "$swapfile"
mkswap "$swapfile" >/dev/null
swapon -p 32000 "$swapfile"

if [ -e /sys/fs/cgroup/memory/cgroup.procs ]; then
  cg=/sys/fs/cgroup/memory/tiercache-swapbench-$$
  mkdir "$cg"
  echo "$limit" > "$cg/memory.limit_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  cg=/sys/fs/cgroup/tiercache-swapbench-$$
  mkdir "$cg"
  echo "$limit" > "$cg/memory.max"
else
  echo "bench/swap.sh: no memory cgroup controller is mounted" >&2
  exit 1
fi

echo "swap prefetch benchmark: cgroup limit $limit, swap file $swap on $(df --output=source "$dir" | tail -n 1) ($dir), sleep ${sleep_s} s, daemon level $level ${daemon_opts[*]}"
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"

field() { sed -n 's/^result //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

run() {  # name sp_tester options...
  local name=$1; shift
  "$SPT" --cgroup "$cg" --sleep "$sleep_s" "$@" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out" >&2; exit 1; }
  printf '  %-8s reread %8.3f s, %7s major faults, %7s minor; swapped %6s MiB, resident before reread %6s of %s MiB\n' \
    "$name" "$(field "$work/$name.out" reread_s)" "$(field "$work/$name.out" majflt)" \
    "$(field "$work/$name.out" minflt)" "$(field "$work/$name.out" swapped_mib)" \
    "$(field "$work/$name.out" resident_before_reread_mib)" "$(field "$work/$name.out" buffer_mib)"
}

start_daemon() {  # extra daemon options...
  "$TC" swap-prefetch --foreground --level "$level" --cgroup "$cg" \
    --control "$work/sp.ctl" "$@" "${daemon_opts[@]}" >"$work/daemon.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 1 100); do
    "$TC" swap-prefetch --status --control "$work/sp.ctl" >/dev/null 2>&1 && break
    sleep 0.1
  done
}
stop_daemon() {  # run name
  "$TC" swap-prefetch --status --control "$work/sp.ctl" | sed -n '/^prefetched/,/^pending/s/^/    daemon: /p'
  # When the daemon started and finished, from the push (its log's wall
  # clock against sp_tester's): whether it was done before the reread.
  local pushed t
  pushed=$(sed -n 's/^pushed.*(at \([0-9.]*\)).*/\1/p' "$work/$1.out")
  for ev in "prefetching: " "nothing left to prefetch"; do
    t=$(grep -m 1 -F "$ev" "$work/daemon.log" | cut -d' ' -f1-2)
    [ -n "$t" ] && [ -n "$pushed" ] &&
      awk -v a="$(date -d "$t" +%s.%N)" -v p="$pushed" -v e="${ev%: }" -v s="$sleep_s" \
        'BEGIN { printf "    daemon: %s %.1f s after the push (reread at %s s)\n", e, a - p, s }'
  done
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "    daemon: CPU time %.2f s\n", ($12 + $13) / hz }' \
    "/proc/$daemon_pid/stat"
  kill "$daemon_pid"
  wait "$daemon_pid" || true
  daemon_pid=
}

for mode in $modes; do
  echo "reread mode: $mode"
  for r in $runs; do
    case $r in
      # nothing is pushed out, so there is nothing to wait for
      floor) run floor --no-push --sleep 0 --reread "$mode" ;;
      without) run without --reread "$mode" ;;
      with)
        start_daemon
        run with --reread "$mode" --linger 3
        stop_daemon with ;;
      mapped)
        start_daemon --map
        run mapped --reread "$mode" --linger 3
        stop_daemon mapped ;;
      *) echo "bench/swap.sh: --order: unknown run '$r' (floor, without, with, mapped)" >&2; exit 2 ;;
    esac
    if [ -n "$record" ]; then echo "$mode $r $(field "$work/$r.out" reread_s) $(field "$work/$r.out" majflt)" >>"$record"; fi
  done
  # The ratios of the runs made (a run left out of --order has no file).
  fig() { if [ -f "$work/$1.out" ]; then field "$work/$1.out" "$2"; fi; }
  awk -v f="$(fig floor reread_s)" -v off="$(fig without reread_s)" -v on="$(fig with reread_s)" \
      -v mp="$(fig mapped reread_s)" -v mo="$(fig without majflt)" -v mw="$(fig with majflt)" 'BEGIN {
    s = "  ratios:"
    if (f > 0 && on > 0) s = s sprintf(" with/floor %.2f (aim <= 1.5)", on / f)
    if (f > 0 && mp > 0) s = s sprintf(", mapped/floor %.2f", mp / f)
    if (off > 0 && on > 0) s = s sprintf(", without/with %.2f (aim >= 4)", off / on)
    if (off > 0 && mp > 0) s = s sprintf(", without/mapped %.2f", off / mp)
    if (mo > 0 && mw != "") s = s sprintf(", major faults %.1f%% fewer", 100 * (1 - mw / mo))
    print s
  }'
done
