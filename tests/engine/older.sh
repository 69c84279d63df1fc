# Shared by the tests/engine/older-*.test: an older copy of a cache device
# put back (a restored backup), whose dirty data is older than the origin.
# Source it after tests/lib.sh and tests/engine/engine.sh.
#
# make_older_copy: origin.img (8 MiB of zeroes) cached by cache.img,
# writeback.  Run 1 writes 4 MiB of 0xaa at offset 0 and stops cleanly with
# it dirty (no writeback passes); the cache file is copied (old.img).  Run
# 2 writes 4 MiB of 0xbb there, flushes it to the origin and stops
# cleanly (new.img is that cache).  Then old.img is put back as cache.img:
# it holds 4 MiB of dirty 0xaa, older than the origin's 0xbb, and the
# sequence record cache.img.tcseq is ahead of its log.

# fill NAME BYTE: 4 MiB of BYTE (hex) at offset 0 through server NAME, then
# a FLUSH
fill() {
  $PY - "$(eval echo "\$URI_$1")" "$2" <<'PY' || fail "the writes to server $1"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(bytes([int(sys.argv[2], 16)]) * (4 << 20), 0)
h.flush()
h.shutdown()
PY
}

# origin_byte: the byte the first 4 MiB of origin.img hold ("mixed" if not
# all one)
origin_byte() {
  $PY -S - <<'PY'
d = open("origin.img", "rb").read(4 << 20)
print("%02x" % d[0] if d == bytes([d[0]]) * len(d) else "mixed")
PY
}

make_older_copy() {
  make_file origin.img $((8 * MiB))
  make_file cache.img $((16 * MiB))
  tc format --cache cache.img --origin origin.img --segment-size 1M >/dev/null
  TIERCACHE_TEST_NO_WRITEBACK_PASSES=1 \
    start_server old --origin origin.img --cache cache.img --mode writeback
  fill old aa
  stop_server old
  cp --sparse=always cache.img old.img
  start_server new --origin origin.img --cache cache.img --mode writeback
  fill new bb
  tc flush --socket "$SOCK_new" >/dev/null
  stop_server new
  cp --sparse=always cache.img new.img
  assert_eq "$(origin_byte)" bb "the origin after the second run"
  cp --sparse=always old.img cache.img
  note "older copy put back: origin holds 0xbb, the copy 4 MiB of dirty 0xaa"
}

# chunks TEXT: "DEV REC" from a refusal's "its newest chunk is DEV, but
# chunk REC was durable"; fails unless both are there and DEV < REC
chunks() {
  local both dev rec
  both=$(sed -n 's/.*its newest chunk is \([0-9]*\), but chunk \([0-9]*\) was durable.*/\1 \2/p' <<<"$1")
  [ -n "$both" ] || fail "the message does not give both chunk sequences: $1"
  read -r dev rec <<<"$both"
  [ "$dev" -lt "$rec" ] || fail "device chunk $dev is not below the record's $rec"
  echo "$dev $rec"
}
