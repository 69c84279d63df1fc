# Helpers for the shell tests.  Source it first:  . "$TC_SRC/tests/lib.sh"
#
# Every helper fails the test (exit 1) with a message on error; cleanup of
# daemons, mounts, loop devices and swap the test made runs on exit.

set -euo pipefail
: "${TIERCACHE:?run tests through tests/run}"
: "${TC_TMP:?run tests through tests/run}"
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH   # Debian's python3 with the nbd module
PY=/usr/bin/python3
cd "$TC_TMP"

_cleanups=()
on_exit() { _cleanups+=("$*"); }
_run_cleanups() {
  local rc=$?
  set +e
  for ((i=${#_cleanups[@]}-1; i>=0; i--)); do eval "${_cleanups[$i]}" >/dev/null 2>&1; done
  exit $rc
}
trap _run_cleanups EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
note() { echo "--- $*"; }

assert_eq() {  # actual expected message
  [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"
}
assert_ge() {  # actual minimum message (numbers, may be decimal)
  awk -v a="$1" -v b="$2" 'BEGIN{exit !(a+0 >= b+0)}' || fail "$3: $1 < $2"
}
assert_le() {
  awk -v a="$1" -v b="$2" 'BEGIN{exit !(a+0 <= b+0)}' || fail "$3: $1 > $2"
}
assert_contains() {  # haystack needle message
  grep -qF -- "$2" <<<"$1" || fail "$3: '$2' not found in: $1"
}

# Under the sanitizer build, the daemon's own findings are in its log.
TC_DAEMON_ENV=()

# start_server NAME ARGS...: tiercache serve in the foreground, in the
# background, on $TC_TMP/NAME.sock, log in $TC_TMP/NAME.log.  Sets
# SOCK_<NAME>, URI_<NAME>, PID_<NAME>.  Waits until it answers.
start_server() {
  local name=$1; shift
  local sock=$TC_TMP/$name.sock log=$TC_TMP/$name.log
  local wrap=()
  if [ "${TC_VALGRIND:-0}" = 1 ]; then
    wrap=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --log-file="$TC_TMP/$name.valgrind")
  fi
  "${wrap[@]}" "$TIERCACHE" serve --socket "$sock" --foreground "$@" >>"$log" 2>&1 &
  local pid=$!
  eval "PID_$name=$pid SOCK_$name=$sock URI_$name='nbd+unix:///?socket=$sock'"
  on_exit "kill -9 $pid"
  # Polled often: a test may start dozens of daemons, each ready within a
  # fraction of a second.  nbdinfo runs only once the socket is there.  The
  # limit is 30 s (${EPOCHREALTIME//[!0-9]/}: now in microseconds).
  local end=$((${EPOCHREALTIME//[!0-9]/} + 30000000))
  while [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ]; do
    if [ -S "$sock" ] && nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "server $name exited at start"; }
    sleep 0.02
  done
  cat "$log" >&2
  fail "server $name did not start"
}

# stop_server NAME: SIGTERM, wait, and require exit status 0 and a clean
# sanitizer report.
stop_server() {
  local name=$1 pid rc=0
  pid=$(eval echo "\$PID_$name")
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 40 "$TC_TMP/$name.log" >&2
    fail "server $name exited with status $rc"
  fi
  check_daemon_log "$name"
}

# kill_server NAME: SIGKILL (a crash); no checks.
kill_server() {
  local name=$1 pid
  pid=$(eval echo "\$PID_$name")
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

check_daemon_log() {
  check_daemon_log_file "$TC_TMP/$1.log"
  # valgrind's note that it does not know an ioctl (a loop device's
  # LOOP_GET_STATUS64, whose result is zeroed first) is no finding.
  if [ -s "$TC_TMP/$1.valgrind" ] &&
     grep -qv -e 'noted but unhandled ioctl' -e 'could cause spurious value errors' \
       -e 'README_MISSING_SYSCALL_OR_IOCTL' "$TC_TMP/$1.valgrind"; then
    cat "$TC_TMP/$1.valgrind" >&2
    fail "valgrind findings for server $1"
  fi
}

# Sanitizer findings and failed assertions (util/assert.h) in any daemon log.
check_daemon_log_file() {
  local log=$1
  if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|assertion failed:" "$log"; then
    grep -E -A30 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|assertion failed:" "$log" | head -60 >&2
    fail "sanitizer findings in $log"
  fi
}

# status_json NAME [jq-like dotted path]: a value from tiercache status --json
status_value() {
  local name=$1 path=$2 sock
  sock=$(eval echo "\$SOCK_$name")
  "$TIERCACHE" status --socket "$sock" --json | $PY -S -c '
import json,sys
v=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v=v[int(k)] if isinstance(v,list) else v[k]
print(v if not isinstance(v,bool) else str(v).lower())' "$path"
}

# wait_drained NAME: until no failed cache device of the server still
# drains dirty data (status: drain_left_bytes 0, health not "draining";
# engine/failure.c).  Polled; fails after 30 s.
wait_drained() {
  local name=$1 end=$((${EPOCHREALTIME//[!0-9]/} + 30000000))
  while [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ]; do
    if [ "$(status_value "$name" volume.cache.drain_left_bytes)" = 0 ] &&
       [[ "$(status_value "$name" volume.health)" != draining* ]]; then
      return 0
    fi
    sleep 0.05
  done
  fail "server $name: the drain did not end ($(status_value "$name" volume.health))"
}

# forget_stop_records: remove the stop records of every cache set (kept
# with the origin records; io/originrec.c).  Each names the chunk of its
# set's last clean stop, which a copy of the set taken before it lacks: a
# test that puts back such a copy on purpose (with its sequence record)
# calls this, as if the stop record had been put back with it.
forget_stop_records() {
  rm -f "$TIERCACHE_ORIGIN_RECORDS"/set-*.tcstop
}

# forget_origin_path PATH: remove the origin records of an origin that was
# the file at PATH.  Another file made at that path is refused as the
# first one replaced (io/originrec.c) while a record names a set that may
# hold writes for it; a test making a new origin there has given that set
# up (as an operator removes the record once the set is gone for good).
forget_origin_path() {
  local p f
  [ -n "${TIERCACHE_ORIGIN_RECORDS:-}" ] || return 0
  p=$(realpath -m "$1")
  for f in "$TIERCACHE_ORIGIN_RECORDS"/origin-*.tcorigin; do
    [ -e "$f" ] || continue
    if grep -qxF "origin $p" "$f"; then rm -f "$f"; fi
  done
}

# make_file PATH SIZE [random]: a sparse or random file (a new one: the
# origin records of a file that was at PATH are forgotten)
make_file() {
  forget_origin_path "$1"
  if [ "${3:-}" = random ]; then
    head -c "$2" /dev/urandom > "$1"
  else
    rm -f "$1"; truncate -s "$2" "$1"
  fi
}

# An nbdkit peer on a Unix socket: start_nbdkit NAME ARGS... (after -U/-P)
start_nbdkit() {
  local name=$1; shift
  local sock=$TC_TMP/$name.sock
  rm -f "$sock"
  nbdkit -U "$sock" -P "$TC_TMP/$name.pid" "$@"
  on_exit "kill \$(cat $TC_TMP/$name.pid); rm -f $sock"
  eval "SOCK_$name=$sock URI_$name='nbd+unix:///?socket=$sock'"
  local i
  for i in $(seq 1 100); do
    nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "nbdkit $name did not start"
}

# ---- swap and memory cgroups ----

# make_swapfile SIZE: a swap file in $TC_TMP, enabled at a high priority so
# that this test's pages go to it, and swapped off on exit.  Register it
# before starting the processes that swap, so that they are gone when the
# swapoff runs (cleanups run last-registered first).  Sets SWAPFILE.
make_swapfile() {
  SWAPFILE=$TC_TMP/swapfile
  rm -f "$SWAPFILE"
  fallocate -l "$1" "$SWAPFILE" || fail "fallocate -l $1 $SWAPFILE"
  chmod 600 "$SWAPFILE"
  mkswap "$SWAPFILE" >/dev/null || fail "mkswap $SWAPFILE"
  on_exit "swapoff $SWAPFILE"
  swapon -p 32000 "$SWAPFILE" || fail "swapon $SWAPFILE"
}

# make_memcg NAME LIMIT: a memory cgroup (the v1 memory controller, or
# cgroup2 with the memory controller) with this limit (bytes, or K/M/G).
# On exit its processes are killed and it is removed.  Sets MEMCG_<NAME> to
# its directory.
make_memcg() {
  local name=$1 limit=$2 dir
  if [ -e /sys/fs/cgroup/memory/cgroup.procs ]; then
    dir=/sys/fs/cgroup/memory/tc-test-$name-$$
    mkdir "$dir" || fail "mkdir $dir"
    on_exit "remove_memcg $dir"
    echo "$limit" > "$dir/memory.limit_in_bytes" || fail "limit of $dir"
  elif [ -e /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    dir=/sys/fs/cgroup/tc-test-$name-$$
    mkdir "$dir" || fail "mkdir $dir"
    on_exit "remove_memcg $dir"
    echo "$limit" > "$dir/memory.max" || fail "limit of $dir"
  else
    skip "no memory cgroup controller is mounted"
  fi
  eval "MEMCG_$name=$dir"
}

remove_memcg() {
  local dir=$1 i pid
  for i in $(seq 1 50); do
    [ -s "$dir/cgroup.procs" ] || break
    for pid in $(cat "$dir/cgroup.procs"); do kill -9 "$pid" 2>/dev/null; done
    sleep 0.1
  done
  for i in $(seq 1 50); do
    rmdir "$dir" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "could not remove $dir" >&2
}

# in_memcg DIR COMMAND...: run COMMAND inside the memory cgroup DIR.
in_memcg() {
  local dir=$1; shift
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$dir" "$@"
}

# memcg_stat DIR KEY: a memory.stat figure of the cgroup.
memcg_stat() {
  awk -v k="$2" '$1 == k { print $2 }' "$1/memory.stat"
}

# memcg_limit_hits DIR: times a charge hit the cgroup's limit (v1 failcnt,
# v2 the "max" event); reclaim inside the cgroup starts there.
memcg_limit_hits() {
  if [ -e "$1/memory.failcnt" ]; then
    cat "$1/memory.failcnt"
  else
    awk '$1 == "max" { print $2 }' "$1/memory.events"
  fi
}

vmstat_value() {
  awk -v k="$1" '$1 == k { print $2 }' /proc/vmstat
}
