# Shared by engine/devfail-noroom*.test; source it after tests/lib.sh.
# Two cache devices, a2 too small (4 segments, no more than the cleaner's
# reserve) to take the blocks a1 leaves behind, the origin refusing writes
# (the data stays dirty, the cleaner frees nothing): devfail_noroom_setup
# writes every block's two halves (dirty, each its own chunk), fails a1
# and returns once rewrites wait for room on a2.  The writes that failed
# a1 run in the background (PID in $writer): their answers wait.
CF="$PY $TC_SRC/tests/engine/cachefaults.py"
# Running checkpoints off (TIERCACHE_TEST_CKPT_BYTES=0): a1 is failed by its
# one write error (eio_once), which must fall on a chunk of the log; a
# running checkpoint's write may take it instead (only warned, the
# checkpoint dropped), and a1 then never fails.
export TIERCACHE_TEST_CKPT_BYTES=0
NB=80                   # blocks of 64 KiB in the model
N=$((NB * 16))          # its 4 KiB sectors
OSPEC="testdev:$TC_TMP/origin.img?eio_when=$TC_TMP/ohold&eio_ops=write"
A1="testdev:$TC_TMP/a1.img?eio_when=$TC_TMP/boom&eio_once&eio_ops=write"
A2="testdev:$TC_TMP/a2.img?eio_when=$TC_TMP/boom2&eio_ops=read"
wait_for() {  # wait_for DESCRIPTION COMMAND...: until COMMAND succeeds (30 s at most)
  local what=$1 end=$((${EPOCHREALTIME//[!0-9]/} + 30000000))
  shift
  until "$@"; do
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ] || fail "waited 30 s for $what"
    sleep 0.05
  done
}
devfail_noroom_setup() {
  rm -f model.json ohold boom boom2
  make_file origin.img 16M; make_file a1.img 16M; make_file a2.img 5M   # a2: 4 segments
  "$TIERCACHE" format --cache a1.img,a2.img --origin origin.img --segment-size 1M >/dev/null
  touch ohold
  start_server s --origin "$OSPEC" --cache "$A1,$A2" --mode writeback --sequential-cutoff 0

  note "sectors 0-7, then 8-15 of every block, each write its own chunk: dirty, on both devices"
  $PY - "$SOCK_s" model.json "$NB" <<'PY' || fail "writing the blocks"
import json, struct, sys
import nbd
sock, path, nb = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = {"gen": 0, "ok": {}, "eio": []}
h = nbd.NBD()
h.connect_unix(sock)
for first in (0, 8):
    for b in range(nb):
        m["gen"] += 1
        g = m["gen"]
        s0 = b * 16 + first
        h.pwrite(b"".join(struct.pack("<QQ", s, g) * 256 for s in range(s0, s0 + 8)), s0 * 4096)
        h.flush()
        for s in range(s0, s0 + 8):
            m["ok"][str(s)] = [g]
h.shutdown()
json.dump(m, open(path, "w"))
PY

  note "a1 fails at its next write; the blocks left on a2 wait for room there"
  touch boom
  # Writes beyond the model until one lands on a1; its answer waits for the
  # rewrites, so this runs in the background, and stops at its first error.
  $PY - "$SOCK_s" $((N * 4096)) <<'PY' >writer.log 2>&1 &
import sys
import nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
for i in range(64):
    try:
        h.pwrite(b"\x5a" * 4096, int(sys.argv[2]) + i * 65536)
        h.flush()
    except nbd.Error as e:
        print("write", i, "failed:", e)
        break
PY
  writer=$!
  on_exit "kill -9 $writer"
  failed() { [ "$(status_value s "volume.cache.devices.$1.state")" != ok ]; }
  wait_for "a1 to fail" failed 0
  waiting() {
    [ "$(status_value s volume.cache.device_failure_rewrites_pending)" -gt 0 ] &&
      [ "$(status_value s volume.cache.cleaner.appends_waiting_for_room)" -gt 0 ]
  }
  wait_for "rewrites waiting for room" waiting
  note "$(status_value s volume.cache.device_failure_rewrites_pending) rewrites wait," \
       "$(status_value s volume.cache.device_failure_rewrites) done"

}
