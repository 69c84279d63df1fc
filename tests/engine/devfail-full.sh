# Shared by engine/devfail-full*.test; source it after tests/lib.sh.
# Two cache devices, a2 small (4 segments; A2_MB=N sets a2 N MiB, N - 1
# segments), the origin refusing writes (the
# data stays dirty, nothing can be written back): devfail_full_setup
# PASSES BLOCKS writes BLOCKS whole blocks PASSES times, each its own
# chunk -- chunks alternate devices while both have room, so with several
# passes the survivor holds older versions of blocks whose newest is on
# a1 -- until a2 has no free segment left, then fails a1 (its writes
# held, then failed).  Nothing the
# failure appends (tombstones, LOST records, copies) fits on a2 then, not
# even in the cleaner's reserve.  A write acknowledged just before runs
# its FLUSH in the background (PID in $writer); with FUA_WRITE=1 it is a
# FUA write instead, with no FLUSH, whose answer waits for the chunk (the
# writer prints "acknowledged" once it has it).  A2 is a2's cache spec
# (default a2.img: a testdev spec on it lets a test fail it later).
# DEVFAIL_FULL_FORMATTED names a command the setup runs once the set is
# formatted, before its daemon starts (an earlier life of the set).
CF="$PY $TC_SRC/tests/engine/cachefaults.py"
# Running checkpoints off (TIERCACHE_TEST_CKPT_BYTES=0): the setup counts on
# filling a2 to its last segment, and a running checkpoint takes its
# segments round the devices and gives the older one's back, so a2 could
# keep a free segment ("a2 still has room" with them on).
export TIERCACHE_TEST_CKPT_BYTES=0
OSPEC="testdev:$TC_TMP/origin.img?eio_when=$TC_TMP/ohold&eio_ops=write"
A1="testdev:$TC_TMP/a1.img?hold_when=$TC_TMP/hold1&hold_ops=write&eio_held"
wait_for() {  # wait_for DESCRIPTION COMMAND...: until COMMAND succeeds (60 s at most)
  local what=$1 end=$((${EPOCHREALTIME//[!0-9]/} + 60000000))
  shift
  until "$@"; do
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ] || fail "waited 60 s for $what"
    sleep 0.05
  done
}
devfail_full_setup() {  # devfail_full_setup PASSES BLOCKS: the model's writes
  local passes=$1
  NB=$2 N=$(($2 * 16))
  rm -f model.json ohold hold1
  make_file origin.img 16M; make_file a1.img 16M; make_file a2.img ${A2_MB:-5}M   # a2: 4 segments (A2_MB - 1)
  "$TIERCACHE" format --cache a1.img,a2.img --origin origin.img --segment-size 1M >/dev/null
  [ -z "${DEVFAIL_FULL_FORMATTED:-}" ] || $DEVFAIL_FULL_FORMATTED
  touch ohold
  # No share of the reserve kept on a2 (TIERCACHE_TEST_RESERVE_SHARED):
  # a2 fills up, and the reserve is all on a1.
  TIERCACHE_TEST_RESERVE_SHARED=1 start_server s --origin "$OSPEC" --cache "$A1,${A2:-a2.img}" \
      --mode writeback --sequential-cutoff 0

  # Every write of a whole block is its own chunk, and chunks alternate
  # devices while both have room: with an odd number of blocks a block's
  # versions alternate too, until a2 is full and every write goes to a1.
  note "$passes passes over $NB whole blocks (dirty): a2 has no free segment left"
  a2_full() { [ "$(status_value s volume.cache.devices.1.segments_free)" = 0 ]; }
  $PY - "$SOCK_s" model.json "$NB" "$passes" <<'PY' || fail "writing the blocks"
import json, struct, sys
import nbd
sock, path, nb, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = {"gen": 0, "ok": {}, "eio": []}
h = nbd.NBD()
h.connect_unix(sock)
for p in range(passes):
    for b in range(nb):
        m["gen"] += 1
        g = m["gen"]
        s0 = b * 16
        h.pwrite(b"".join(struct.pack("<QQ", s, g) * 256 for s in range(s0, s0 + 16)), s0 * 4096)
        h.flush()
        for s in range(s0, s0 + 16):
            m["ok"][str(s)] = [g]
h.shutdown()
json.dump(m, open(path, "w"))
PY
  $CF verify "$SOCK_s" model.json --sectors $N --expect-no-eio
  a2_full || fail "a2 still has room: the test needs it full"

  note "a1's writes are held, then fail: nothing the failure appends fits on a2"
  touch hold1
  # A write beyond the model, taken into a1's open chunk (a2 is full) and
  # acknowledged; its FLUSH waits for the chunk, held with a1's other
  # writes.  Released, they fail, and so does a1.  (Writes that came after
  # the failure would wait for room.)  With EXTRA_BLOCK=B it is a new
  # version of the model's block B instead, which the model records once
  # acknowledged (the log keeps B's older version).
  local xoff=$((N * 4096 + 1048576))
  [ -z "${EXTRA_BLOCK:-}" ] || xoff=$((EXTRA_BLOCK * 65536))
  $PY - "$SOCK_s" $xoff "${FUA_WRITE:-0}" "${EXTRA_BLOCK:+model.json}" <<'PY' >writer.log 2>&1 &
import json, os, struct, sys
import nbd
h = nbd.NBD()
h.connect_unix(sys.argv[1])
off, fua, model = int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
data = b"\x5a" * 65536
if model:
    m = json.load(open(model))
    g = m["gen"] + 1
    s0 = off // 4096
    data = b"".join(struct.pack("<QQ", s, g) * 256 for s in range(s0, s0 + 16))
try:
    h.pwrite(data, off, nbd.CMD_FLAG_FUA if fua else 0)
except nbd.Error as e:
    print("write failed:", e, flush=True)
    sys.exit(0)
if model:
    m["gen"] = g
    for s in range(s0, s0 + 16):
        m["ok"][str(s)] = [g]
    json.dump(m, open(model + ".new", "w"))
    os.rename(model + ".new", model)
print("acknowledged", flush=True)
if fua:
    sys.exit(0)
try:
    h.flush()
except nbd.Error as e:
    print("flush failed:", e)
PY
  writer=$!
  on_exit "kill -9 $writer"
  acked() { grep -q acknowledged writer.log; }
  [ "${FUA_WRITE:-0}" = 1 ] || wait_for "the write beyond the model to be acknowledged" acked
  # Its FLUSH may not have reached the daemon yet: a1 fails only if a
  # chunk write of it is held when hold1 goes (else it is written).
  held() {
    [ "$(status_value s volume.cache.log.chunks_written)" -lt \
      "$(status_value s volume.cache.log.chunks_issued)" ]
  }
  wait_for "a chunk write of a1 to be held" held
  rm hold1
  failed() { [ "$(status_value s volume.cache.devices.0.state)" != ok ]; }
  wait_for "a1 to fail" failed
  $CF verify "$SOCK_s" model.json --sectors $N
}
