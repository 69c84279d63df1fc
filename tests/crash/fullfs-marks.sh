# Shared by crash/fullfs-marks-*.test; source it after tests/lib.sh and
# tests/engine/engine.sh.
# fullfs_marks_setup: a drain cut short whose state file had no room for
# the proofs.  A sparse cache file on a file system that other files
# filled, writeback over an origin whose writes are held (the drain cannot
# progress), FLUSHed writes to NB (800) blocks, then more writes until the
# log reaches the file's hole: the device fails with ENOSPC, the cache is
# abandoned, and the state file (800 blocks: 170 KB with proofs, more than
# its spares) is written with marks instead (version 4).  Killed (-9)
# during the drain; check counts the marked data.  Then block 1's digest
# is changed in the state file: as if the replay found another version of
# its marked sector than the one marked, which must stay lost (EIO).
# The file system is left full; the origin's writes no longer held.
# ARGS: serve's options for the set (the origin aside).

# io SOCK write|extra|verify: write: sector 0 of each of NB blocks of
# 64 KiB, generation 1 everywhere, then 2 on the first 100, a FLUSH.
# extra: unflushed writes of 64 KiB past them, each acknowledged one
# counted in the file extra.n -- until the log reaches the hole and the
# cache fails; the writes after that go to the origin, whose writes are
# held: the kill ends them.  verify: every FLUSHed sector holds its newest
# generation; each unflushed one acknowledged its data or EIO, never the
# zeros it replaced.
io() {
  $PY - "$1" "$2" "$NB" <<'PY'
import os, struct, sys, nbd
sock, what, nb = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD()
h.connect_unix(sock)
def pat(s, g):
    return struct.pack("<QQ", s, g) * 256
EXTRA = range(nb * 16, nb * 16 + 200 * 16, 16)     # 200 blocks of 64 KiB
if what == "write":
    for b in range(nb):
        h.pwrite(pat(b * 16, 1), b * 65536)
    for b in range(100):
        h.pwrite(pat(b * 16, 2), b * 65536)
    h.flush()
    sys.exit(0)
if what == "extra":
    for n, s in enumerate(EXTRA):
        h.pwrite(b"".join(pat(s + i, 3) for i in range(16)), s * 4096)
        with open("extra.n.tmp", "w") as f:
            f.write("%d\n" % (n + 1))
        os.rename("extra.n.tmp", "extra.n")
    sys.exit(0)
acked = int(open("extra.n").read()) if os.path.exists("extra.n") else 0
bad = eio = 0
for b in range(nb):
    want = pat(b * 16, 2 if b < 100 else 1)
    try:
        got = h.pread(4096, b * 65536)
    except nbd.Error:
        got = None
    if b == 1:          # its digest changed: lost (EIO)
        if got is not None:
            bad += 1
            print("block 1: read although its digest did not match")
        continue
    if got != want:
        bad += 1
        if bad <= 3:
            print("block %d: %s" % (b, "EIO" if got is None else "wrong data"))
for s in EXTRA[:acked]:
    try:
        got = h.pread(4096, s * 4096)
    except nbd.Error:
        eio += 1
        continue
    if got != pat(s, 3):
        bad += 1
        print("unflushed sector %d: older data" % s)
print("%d FLUSHed blocks checked, %d unflushed acknowledged, %d of them EIO; %d bad"
      % (nb, acked, eio, bad))
sys.exit(1 if bad else 0)
PY
}

fullfs_marks_setup() {
  NB=800
  mkdir -p fs
  mount -t tmpfs -o size=12M tmpfs fs || skip "cannot mount a tmpfs"
  on_exit "umount -l $TC_TMP/fs"
  make_file origin.img $((64 * MiB))
  truncate -s 32M fs/c.img
  tc format --cache fs/c.img --origin origin.img --segment-size 1M --allow-sparse >/dev/null
  # The head of the file allocated, the rest a hole the log reaches later.
  fallocate -o 0 -l 6M fs/c.img
  touch ohold
  O="testdev:$TC_TMP/origin.img?hold_when=$TC_TMP/ohold&hold_ops=write"
  ARGS=(--cache fs/c.img --mode writeback --sequential-cutoff 0 --dirty-high 100 --dirty-target 100)
  start_server a --origin "$O" "${ARGS[@]}"
  # Other files fill the file system (after the start kept the state
  # file's spares: they cannot grow as the dirty blocks come).
  dd if=/dev/zero of=fs/filler bs=64k 2>/dev/null || true
  dd if=/dev/zero of=fs/filler2 bs=4k 2>/dev/null || true

  io "$SOCK_a" write || fail "the FLUSHed writes"
  io "$SOCK_a" extra >extra.out 2>&1 &
  extra=$!
  end=$((${EPOCHREALTIME//[!0-9]/} + 60000000))
  until [ "$(stats a abandoned)" = true ]; do
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ] || fail "the cache was not abandoned"
    sleep 0.05
  done
  end=$((${EPOCHREALTIME//[!0-9]/} + 60000000))
  until grep -q "written with marks instead (version 4)" a.log; do
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$end" ] ||
      { grep -i "state file" a.log >&2; fail "no state file written with marks"; }
    sleep 0.05
  done
  assert_ge "$(stats a drain_left_bytes)" $((NB * 4096)) "dirty data left to drain at the kill"
  kill_server a
  wait "$extra" || true
  note "$(cat extra.n 2>/dev/null || echo 0) unflushed writes acknowledged before the kill"
  assert_eq "$(od -An -tu4 -j8 -N4 fs/c.img.tcstate | tr -d ' ')" 4 "state file version"
  # (Exit status 1: the lost sectors are problems.)
  "$TIERCACHE" check --cache fs/c.img --json >check.json || [ $? = 1 ] || fail "check failed"
  marked=$("$PY" -S "$TC_SRC/tests/figures.py" marked_lost_bytes <check.json)
  assert_ge "$marked" $((NB * 4096)) "check: marked lost bytes"
  note "check: $marked bytes marked"

  # Block 1's digest changed (the file's checksum made again): as if the
  # replay found another version of its marked sector than the one marked.
  # The start must leave it lost, not write what it found.
  "$PY" - fs/c.img.tcstate "$TC_SRC/tests/fuzz" <<'PY' || fail "patching the state file"
import struct, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[2])
from seeds import crc32c
b = bytearray(open(sys.argv[1], "rb").read())
count = struct.unpack_from("<Q", b, 56)[0]
for i in range(count):
    e = 72 + 32 * i     # 64 KiB blocks: block, mask, marks, digest, zero
    if struct.unpack_from("<Q", b, e)[0] == 1:
        struct.pack_into("<I", b, e + 24, struct.unpack_from("<I", b, e + 24)[0] ^ 1)
        break
else:
    sys.exit("no entry for block 1")
struct.pack_into("<I", b, 12, 0)
struct.pack_into("<I", b, 12, crc32c(bytes(b)))
open(sys.argv[1], "wb").write(b)
PY
  rm ohold
}
