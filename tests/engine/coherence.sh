# The body of the coherence tests: run_config MODE POLICY SEED OPS.
#
# A 128 MiB origin of random data, a 24 MiB cache of 1 MiB segments.  fio
# (2 jobs, 512-byte to 64 KiB random writes, crc32c verification) works on
# the first 16 MiB while four libnbd connections with 8 requests in flight
# each run random reads, writes, trims, write-zeroes and flushes (a third
# of them 512-byte granular) over the rest, checked against a model; most
# requests go to a 16 MiB hot zone, the rest anywhere, so the cache fills,
# the cleaner retires groups all along, and hits, misses, fills and
# evictions interleave with writes.  Then:
#   writeback     (default policy) stop with dirty data, restart, the
#                 export matches the model (recovery); tiercache flush
#                 leaves nothing dirty
#   all modes     stop; the origin file matches the model; restart on the
#                 same cache, every byte of the export matches the model
# passthrough starts in writethrough (so the cache holds data), switches
# online, runs a second workload, and restarts in writethrough: a stale
# cached block would show there.
# Trimmed sectors may read back as old data or as zeroes.

SIZE=$((128 * MiB))
FIO_SPAN=$((16 * MiB))
make_file origin.src "$SIZE" random

run_workload() {  # seed ops
  local s=$SOCK_c
  "${TCLIB[@]}" workload "$s,$s,$s,$s" model --seed "$1" --ops "$2" --depth 8 \
    --lo "$FIO_SPAN" --hot $((16 * MiB)) || fail "workload (seed $1): data read back differs from the model"
}

check_health() {  # what
  local v
  mapfile -t v < <(stats c checksum_errors lost_dirty_bytes volume.errors)
  assert_eq "${v[0]}" 0 "$1: checksum errors"
  assert_eq "${v[1]}" 0 "$1: lost dirty bytes"
  assert_eq "${v[2]}" 0 "$1: failed requests"
}

run_config() {
  local mode=$1 policy=$2 seed=$3 ops=$4
  local start_mode=$mode restart_mode=$mode
  [ "$mode" = passthrough ] && start_mode=writethrough restart_mode=writethrough
  SECONDS=0
  note "$mode / $policy: seed $seed, $ops requests (TC_SEED=$seed reproduces)"
  cp origin.src origin.img
  cp origin.src model.img
  rm -f model.maybe cache.img
  make_file cache.img $((24 * MiB))
  tc format --cache cache.img --origin origin.img --segment-size 1M >/dev/null
  start_server c --origin origin.img --cache cache.img --mode "$start_mode" --policy "$policy"

  fio --name=verify --ioengine=nbd --uri="$URI_c" --rw=randwrite --bsrange=512-64k \
      --iodepth=8 --numjobs=2 --size=8m --offset_increment=8m --verify=crc32c \
      --verify_fatal=1 --randseed="$seed" --group_reporting --output-format=json \
      --output=fio.json >/dev/null 2>fio.err &
  local fpid=$!
  run_workload "$seed" "$ops"
  if [ "$mode" = passthrough ]; then
    assert_ge "$(stats c groups_retired)" 1 "groups retired before passthrough"
    tc mode --socket "$SOCK_c" passthrough >/dev/null
    assert_eq "$(stats c volume.mode)" passthrough "mode after the switch"
    run_workload $((seed + 1)) $((ops / 2))
  fi
  wait $fpid || { cat fio.err >&2; fail "fio failed"; }
  $PY - <<'PY' || fail "fio reported errors"
import json
j = json.load(open("fio.json"))["jobs"][0]
print("fio: error", j["error"], "written", j["write"]["io_bytes"], "verified", j["read"]["io_bytes"])
assert j["error"] == 0 and j["write"]["io_bytes"] == 16 << 20 and j["read"]["io_bytes"] == 16 << 20
PY
  # What fio wrote (and verified) enters the model.
  "${TCLIB[@]}" absorb "$SOCK_c" model --lo 0 --hi "$FIO_SPAN"
  local retired
  retired=$(stats c groups_retired)
  note "groups retired: $retired"
  assert_ge "$retired" 1 "groups retired (the cleaner ran)"
  check_health "after the workload"

  if [ "$mode" = writeback ] && [ "$policy" = default ]; then
    # A burst of writes, and stop at once: writeback drains only when
    # clients have been idle for a while, so dirty data is left to recover.
    run_workload $((seed + 2)) 300
    stop_server c
    start_server c --origin origin.img --cache cache.img --mode writeback --policy "$policy"
    # (the restart writes recovered dirty data back at once: the log says
    # how much there was)
    local line
    line=$(grep "recovered" c.log | tail -n 1)
    note "restart after a burst: ${line#*info: }"
    check_export c model
  fi
  if [ "$mode" = writeback ]; then
    tc flush --socket "$SOCK_c" >/dev/null
    assert_eq "$(stats c dirty_bytes)" 0 "dirty bytes after tiercache flush"
    check_health "after the flush"
  fi
  stop_server c
  check_origin origin.img model

  start_server c --origin origin.img --cache cache.img --mode "$restart_mode" --policy "$policy"
  check_export c model
  check_health "after the restart"
  stop_server c
  note "$mode / $policy: passed in ${SECONDS}s"
}
