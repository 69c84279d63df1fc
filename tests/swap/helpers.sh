# Helpers for the swap prefetch tests; source after tests/lib.sh.
#
# The victim is bench/sp_tester: it fills a buffer, pushes it out to swap
# with a second one inside a memory cgroup, then sleeps until SIGUSR1 and
# times a reread.  The figures always come from the normal build of
# sp_tester: under the sanitizer build its every access would also touch
# shadow memory, charged to the same cgroup.

[ "$(id -u)" = 0 ] || skip "the swap tests need root (swapon, cgroups, process_madvise)"
SP_TESTER=$TC_SRC/build/bench/sp_tester
[ -x "$SP_TESTER" ] || SP_TESTER=$TC_BUILD/bench/sp_tester
[ -x "$SP_TESTER" ] || fail "sp_tester is not built (make)"

# start_victim NAME MEMCG_DIR [SP_TESTER OPTIONS]: sp_tester in the cgroup,
# output in $TC_TMP/NAME.out; returns once the first buffer is pushed out.
# Sets VPID_<NAME>.
start_victim() {
  local name=$1 dir=$2; shift 2
  local out=$TC_TMP/$name.out
  "$SP_TESTER" --cgroup "$dir" --sleep 600 "$@" >"$out" 2>&1 &
  local pid=$!
  on_exit "kill -9 $pid"
  eval "VPID_$name=$pid"
  local i
  for i in $(seq 1 1200); do
    grep -q '^pushed' "$out" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$out" >&2; fail "victim $name exited"; }
    sleep 0.1
  done
  cat "$out" >&2
  fail "victim $name did not finish pushing in 120 s"
}

# victim_field NAME KEY: a key=value of the victim's result line.
victim_field() {
  sed -n 's/^result //p' "$TC_TMP/$1.out" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# victim_reread NAME: end the victim's sleep and wait for its result line.
victim_reread() {
  local name=$1 pid i
  pid=$(eval echo "\$VPID_$name")
  kill -USR1 "$pid"
  for i in $(seq 1 1200); do
    grep -q '^result ' "$TC_TMP/$name.out" && return 0
    sleep 0.1
  done
  cat "$TC_TMP/$name.out" >&2
  fail "victim $name did not reread in 120 s"
}

# victim_resident NAME: MiB of its first buffer in memory now (mapped or in
# the swap cache), asked with SIGUSR2.
victim_resident() {
  local name=$1 pid n i out=$TC_TMP/$1.out
  pid=$(eval echo "\$VPID_$name")
  n=$(grep -c '^resident now' "$out" || true)
  kill -USR2 "$pid"
  for i in $(seq 1 100); do
    if [ "$(grep -c '^resident now' "$out" || true)" -gt "$n" ]; then
      grep '^resident now' "$out" | tail -n 1 | awk '{print $3}'
      return 0
    fi
    sleep 0.05
  done
  fail "victim $name did not report its residency"
}

# start_prefetch NAME ARGS...: tiercache swap-prefetch in the foreground, in
# the background; control socket $TC_TMP/NAME.ctl, log $TC_TMP/NAME.log.
# Waits until it answers.  Sets PID_<NAME>, CTL_<NAME>.
start_prefetch() {
  local name=$1; shift
  local ctl=$TC_TMP/$name.ctl log=$TC_TMP/$name.log
  "$TIERCACHE" swap-prefetch --foreground --control "$ctl" "$@" >>"$log" 2>&1 &
  local pid=$!
  eval "PID_$name=$pid CTL_$name=$ctl"
  on_exit "kill -9 $pid"
  local i
  for i in $(seq 1 100); do
    "$TIERCACHE" swap-prefetch --status --json --control "$ctl" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "swap-prefetch $name exited at start"; }
    sleep 0.1
  done
  cat "$log" >&2
  fail "swap-prefetch $name did not start"
}

# sp_value NAME PATH: a figure from the daemon's status JSON; PATH is dotted
# (swap_prefetch. is implied); "processes[pid=123].used_bytes" selects an
# element of a list by a member.
sp_value() {
  local ctl
  ctl=$(eval echo "\$CTL_$1")
  "$TIERCACHE" swap-prefetch --status --json --control "$ctl" | $PY -S -c '
import json, re, sys
v = json.load(sys.stdin)["swap_prefetch"]
for part in sys.argv[1].split("."):
    m = re.fullmatch(r"(\w+)\[(\w+)=([^\]]*)\]", part)
    if m:
        v = [e for e in v[m.group(1)] if str(e[m.group(2)]) == m.group(3)]
        v = v[0] if v else None
    elif v is not None:
        v = v[part]
print("null" if v is None else (str(v).lower() if isinstance(v, bool) else v))' "$2"
}

# wait_for NAME PYTHON-CONDITION SECONDS: poll the status JSON (as s) until
# the condition holds; fails after SECONDS.
wait_for() {
  local ctl end
  ctl=$(eval echo "\$CTL_$1")
  end=$((SECONDS + $3))
  while [ $SECONDS -lt "$end" ]; do
    if "$TIERCACHE" swap-prefetch --status --json --control "$ctl" 2>/dev/null | $PY -S -c '
import json, sys
s = json.load(sys.stdin)["swap_prefetch"]
sys.exit(0 if eval(sys.argv[1]) else 1)' "$2"; then
      return 0
    fi
    sleep 0.2
  done
  "$TIERCACHE" swap-prefetch --status --control "$ctl" >&2 || true
  fail "timed out after $3 s waiting for: $2"
}

# stop_prefetch NAME: SIGTERM; requires exit status 0 and a clean log.
stop_prefetch() {
  local name=$1 pid rc=0
  pid=$(eval echo "\$PID_$name")
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 40 "$TC_TMP/$name.log" >&2
    fail "swap-prefetch $name exited with status $rc"
  fi
  check_daemon_log "$name"
}
