# Helpers shared by the engine tests; source it after tests/lib.sh.

TCLIB=("$PY" "$TC_SRC/tests/tclib.py")
MiB=$((1 << 20))

# stats NAME PATH...: values from the status JSON of server NAME, one a
# line, in the order asked ("volume.cache." may be left out: "read_hits").
stats() {
  local name=$1 sock p paths=()
  shift
  sock=$(eval echo "\$SOCK_$name")
  for p in "$@"; do
    case $p in volume.*|nbd.*|pid|version|stopping) paths+=("$p") ;; *) paths+=("volume.cache.$p") ;; esac
  done
  "$TIERCACHE" status --socket "$sock" --json | "$PY" -S "$TC_SRC/tests/figures.py" "${paths[@]}"
}

# wait_flush_marked NAME: until a chunk header of server NAME's log says
# every chunk with entries flushed so far was flushed (the mark comes a
# second after the log went quiet: however long a loaded machine takes, up
# to 2 minutes).  A chunk without entries (a header that carries only a
# mark, or what a running checkpoint writes) is owed no mark: waiting for
# the mark to reach every flushed chunk could wait for ever when such a
# chunk came last.
wait_flush_marked() {
  local name=$1 owed end
  end=$((${EPOCHREALTIME/./} + 120000000))
  while :; do
    owed=$(stats "$name" log.flush_mark_owed)
    [ "$owed" = false ] && return 0
    [ "${EPOCHREALTIME/./}" -lt "$end" ] ||
      fail "server $name: the flushed mark was not written (chunks flushed $(stats "$name" log.chunks_flushed), marked $(stats "$name" log.flushed_marked))"
    sleep 0.1
  done
}

# snap NAME VAR: the status figures of the cache, as VAR_<key>=value
snap() {
  local name=$1 var=$2 k v
  local keys=(read_hits read_misses origin_read_bytes cache_write_bytes promotions promotion_bytes not_admitted
              bypassed_sequential_bytes blocks_cached dirty_bytes groups_retired demotions
              checksum_errors lost_dirty_bytes fills_dropped)
  local vals
  mapfile -t vals < <(stats "$name" "${keys[@]}")
  for k in "${!keys[@]}"; do
    eval "${var}_${keys[$k]}=${vals[$k]}"
  done
}

# fmt BYTES: for messages
mib() { awk -v b="$1" 'BEGIN{printf "%.1f MiB", b / 1048576}'; }

# check_export NAME MODEL: every byte of the export of server NAME matches
# the model (trimmed sectors may be zeroes).
check_export() {
  local uri
  uri=$(eval echo "\$URI_$1")
  rm -f export.img
  nbdcopy "$uri" export.img || fail "nbdcopy from server $1 failed"
  "${TCLIB[@]}" verify-file export.img "$2" || fail "server $1: the export differs from the model"
  rm -f export.img
}

# check_origin FILE MODEL
check_origin() {
  "${TCLIB[@]}" verify-file "$1" "$2" || fail "the origin $1 differs from the model"
}

# run_tiercache ARGS...: a tiercache command that must succeed, output logged
tc() {
  "$TIERCACHE" "$@" || fail "tiercache $* failed (exit $?)"
}

# stop_server_within NAME SECONDS: as stop_server, but a daemon that has not
# exited SECONDS after SIGTERM is killed and the test fails (instead of
# waiting for the runner's timeout).
stop_server_within() {
  local name=$1 limit=$2 pid end
  pid=$(eval echo "\$PID_$name")
  kill -TERM "$pid" 2>/dev/null || true
  end=$((${EPOCHREALTIME//[!0-9]/} + limit * 1000000))
  while [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ]; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  if kill -0 "$pid" 2>/dev/null; then
    tail -n 5 "$TC_TMP/$name.log" >&2
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  stop_server "$name"
}

# Notes carry the seconds since the test started, to see where time goes.
note() { echo "--- [${SECONDS}s] $*"; }
