# Shared by crash/drain-resume-*.test; source it after tests/lib.sh.
# drain_resume_setup: a writeback cache whose only device fails while the
# origin holds every write (ohold), so its drain cannot write anything
# back; returns once the abandonment's state file is written and the whole
# dirty set waits to be drained.  The model (model.json, gens per sector)
# holds the last acknowledged data of blocks 0..NB-1:
#   - every block written whole (gen 1), FLUSH;
#   - the second half of the even blocks again (gen 2: two fragments), FLUSH;
#   - sectors 0-3 of block 1 again (gen 3, a third fragment), FLUSH.  (Not
#     left unflushed: a write acknowledged from the open chunk may share the
#     failing chunk, never reach the device, and stay lost -- EIO, allowed
#     for unflushed data, but not this model's check.)
# Block NB takes the write whose chunk fails the device (boom: eio_minlen
# so that it is that chunk, not a header the daemon writes by itself); its
# data never reached the device, and its reply may wait for the drain: it
# runs in the background and is not in the model.
# With the argument "restart", the model is written by a daemon stopped
# cleanly before the one whose device fails, which runs without write-back
# passes: no chunk of the model was written or read by the failing
# daemon, so none of its CRCs is in RAM when the device fails (the
# abandonment reads their chunk headers for the proofs).
NB=16
SPB=16
drain_resume_setup() {
  make_file origin.img 64M; make_file c.img 64M
  "$TIERCACHE" format --cache c.img --origin origin.img >/dev/null
  touch ohold
  local msock=
  if [ "${1:-}" = restart ]; then
    TIERCACHE_TEST_NO_WRITEBACK_PASSES=1 start_server s0 --origin origin.img --mode writeback --sequential-cutoff 0 --cache c.img
    msock=$SOCK_s0
  else
    start_server s --origin "testdev:$TC_TMP/origin.img?hold_when=$TC_TMP/ohold&hold_ops=write" \
        --mode writeback --sequential-cutoff 0 \
        --cache "testdev:c.img?eio_when=$TC_TMP/boom&eio_once&eio_ops=write&eio_minlen=8192"
    msock=$SOCK_s
  fi
  $PY - "$msock" $NB model.json <<'PY' || fail "writing the model"
import json, nbd, struct, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
nb = int(sys.argv[2])
gen = {}
def write(b, s0, n, g):
    h.pwrite(b"".join(struct.pack("<QQ", b * 16 + s, g) * 256 for s in range(s0, s0 + n)),
             (b * 16 + s0) * 4096)
    for s in range(s0, s0 + n):
        gen[b * 16 + s] = g
for b in range(nb):
    write(b, 0, 16, 1)
h.flush()
for b in range(0, nb, 2):
    write(b, 8, 8, 2)
h.flush()
write(1, 0, 4, 3)
h.flush()
json.dump(gen, open(sys.argv[3], "w"))
PY
  if [ "${1:-}" = restart ]; then
    stop_server s0
    TIERCACHE_TEST_NO_WRITEBACK_PASSES=1 start_server s \
        --origin "testdev:$TC_TMP/origin.img?hold_when=$TC_TMP/ohold&hold_ops=write" \
        --mode writeback --sequential-cutoff 0 \
        --cache "testdev:c.img?eio_when=$TC_TMP/boom&eio_once&eio_ops=write&eio_minlen=8192"
    assert_eq "$(status_value s volume.cache.dirty_bytes)" $((NB * 65536)) "dirty bytes after the restart"
  fi
  touch boom
  $PY - "$SOCK_s" $NB >trigger.log 2>&1 <<'PY' &
import nbd, struct, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
b = int(sys.argv[2])
h.pwrite(struct.pack("<QQ", b * 16, 9) * 256, b * 65536)
print("acknowledged", flush=True)
PY
  trigger=$!
  on_exit "kill -9 $trigger"
  local end=$((${EPOCHREALTIME//[!0-9]/} + 60000000))
  while [ -e boom ] && [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ]; do sleep 0.02; done
  [ ! -e boom ] || fail "no cache write failed"
  ready() {
    [ "$(status_value s volume.cache.abandoned)" = true ] &&
      [ "$(status_value s volume.cache.state_file_writes)" -ge 1 ] &&
      [ "$(status_value s volume.cache.drain_left_bytes)" -ge $((NB * 65536)) ]
  }
  end=$((${EPOCHREALTIME//[!0-9]/} + 60000000))
  until ready; do
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ] || fail "the drain did not start"
    sleep 0.05
  done
  assert_eq "$(status_value s volume.cache.devices.0.state)" draining "device state"
}

# drain_resume_verify NAME [EIO-SECTORS]: every sector of blocks 0..NB-1
# reads its model data, except the sectors listed (comma-separated), which
# must fail with EIO; block NB reads the failed write's data, zeros (it
# may not have been acknowledged) or EIO.
drain_resume_verify() {
  local sock
  sock=$(eval echo "\$SOCK_$1")
  $PY - "$sock" $NB model.json "${2:-}" <<'PY' || fail "data after the resumed drain ($1)"
import json, nbd, struct, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
nb = int(sys.argv[2])
gen = {int(k): v for k, v in json.load(open(sys.argv[3])).items()}
want_eio = {int(x) for x in sys.argv[4].split(",") if x}
bad = 0
for s in range(nb * 16):
    try:
        got = h.pread(4096, s * 4096)
    except nbd.Error:
        if s not in want_eio:
            print("sector %d: EIO, data %d expected" % (s, gen[s]))
            bad += 1
        continue
    if s in want_eio:
        print("sector %d: read data, EIO expected (damaged)" % s)
        bad += 1
    elif got != struct.pack("<QQ", s, gen[s]) * 256:
        print("sector %d: wrong data (%r), gen %d expected" % (s, got[:16], gen[s]))
        bad += 1
for s in range(nb * 16, nb * 16 + 16):
    try:
        got = h.pread(4096, s * 4096)
    except nbd.Error:
        continue
    if got not in (b"\0" * 4096, struct.pack("<QQ", s, 9) * 256 if s == nb * 16 else b"\0" * 4096):
        print("sector %d (the failed write's block): wrong data %r" % (s, got[:16]))
        bad += 1
print("%d sectors wrong" % bad)
sys.exit(1 if bad else 0)
PY
}
