# writeback (issues 4 and 8): random writes absorbed by the cache, and the
# time to drain them to the spindle.
#
# randwrite: fio 4 KiB random writes, QD16, one connection, uniform over
#   the volume, into
#     spindle            the slow origin alone
#     tiercache-wb       tiercache --mode writeback, fresh cache of half the
#                        volume (its default dirty thresholds)
#     nbdkit-cache-wb    nbdkit --filter=cache cache=writeback, the same
#                        cache-max-size
#
# drain: DRAIN bytes at the start of the volume written in random order
#   (4 KiB, every block exactly once) into a fresh writeback cache, then the
#   time to make them durable on the spindle:
#     spindle-seqwrite   the spindle's own sequential write speed: DRAIN
#                        written in 1 MiB writes, QD16, from idle (timed
#                        like the drains, client start included): the
#                        reference
#     tiercache          'tiercache flush'; during the fill the dirty
#                        thresholds are raised (--dirty-target 90) so that
#                        the background writeback does not start early
#     nbdkit-cache-wb    an NBD FLUSH to nbdkit's cache filter, which writes
#                        back every dirty block before answering
#   The drain rate is the dirty bytes at the end of the fill divided by the
#   time from the end of the fill until the flush returns.

wb_flush_nbd() {  # NAME: one NBD FLUSH, prints its duration in seconds
  /usr/bin/python3 - "$(uri "$1")" <<'PY'
import nbd, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
t = time.monotonic()
h.flush()
print('%.3f' % (time.monotonic() - t))
h.shutdown()
PY
}

wb_randwrite() {  # CONFIG REP
  local cfg=$1 rep=$2 target=vol j
  case $cfg in
    spindle) target=origin; spindle origin "$WB_DATA" ;;
    tiercache-wb)
      spindle origin "$WB_DATA"
      tcformat "$WORK/cache.img" origin "$WB_CACHE"
      tcserve vol origin --cache "$WORK/cache.img" --mode writeback ;;
    nbdkit-cache-wb)
      spindle origin "$WB_DATA"
      nbdcache vol origin writeback "$WB_CACHE" ;;
  esac
  j=$WORK/randwrite-$cfg-$rep.json
  fio_nbd "$j" "$target" --rw=randwrite --bs=4k --iodepth=16 --norandommap --randrepeat=0 \
    --runtime="$WB_RUN" --time_based
  record writeback randwrite "$cfg" iops IOPS "$rep" "$(fio_get "$j" write_iops)"
  record writeback randwrite "$cfg" p99 ms "$rep" "$(fio_get "$j" write_p99_ms)"
  if [ "$cfg" = tiercache-wb ]; then
    record writeback randwrite "$cfg" dirty_at_end MiB "$rep" \
      "$(tcstatus vol volume.cache.dirty_bytes | awk '{ printf "%.1f", $1 / 1048576 }')"
    tcdump vol "writeback-randwrite-$rep"
  fi
  # what is left dirty is not part of the figure: kill rather than wait
  # for minutes of writeback at the spindle's random-write speed
  if [ "$target" = vol ]; then
    kill -KILL "${PIDS[vol]}" 2>/dev/null || true
    stop vol 5
  fi
  if [ "$cfg" = tiercache-wb ]; then
    # Its dirty data is thrown away with its cache file, and so is the
    # origin's record that the set holds writes the origin lacks (kept in
    # the workload's folder: wl_begin), which refuses the next format for
    # this origin otherwise -- as it should anywhere but here.
    rm -f "$WORK/cache.img" "$TIERCACHE_ORIGIN_RECORDS"/origin-*.tcorigin
  fi
  stop origin
}

wb_drain() {  # CONFIG REP
  local cfg=$1 rep=$2 j t0 dirty secs
  local fill=(--rw=randwrite --bs=4k --iodepth=16 --size="$WB_DRAIN" --randrepeat=0)
  case $cfg in
    spindle-seqwrite)
      spindle origin "$WB_DATA"
      j=$WORK/seqwrite-$rep.json
      # the same amount from the same idle start as the drains (the rate
      # filter's bucket full), so that its burst counts alike for both
      sleep 1
      t0=$(now)
      fio_nbd "$j" origin --rw=write --bs=1M --iodepth=16 --size="$WB_DRAIN"
      secs=$(elapsed "$t0")
      record writeback drain "$cfg" seconds s "$rep" "$secs"
      record writeback drain "$cfg" rate MB/s "$rep" "$(awk -v d="$(bytes "$WB_DRAIN")" -v s="$secs" 'BEGIN { printf "%.2f", d / s / 1e6 }')"
      stop origin ;;
    tiercache)
      spindle origin "$WB_DATA"
      tcformat "$WORK/cache.img" origin "$WB_CACHE"
      tcserve vol origin --cache "$WORK/cache.img" --mode writeback --dirty-target 90 --dirty-high 95
      fio_nbd "$WORK/fill-$cfg-$rep.json" vol "${fill[@]}"
      # timed from the end of the fill: after 1 s without clients the
      # writeback starts by itself (and dirty_bytes counts blocks being
      # written until they are done), so a pause here would hide part of
      # the drain.  The spindle sat idle during the fill: its bucket is
      # as full as for the reference.
      t0=$(now)
      dirty=$(tcstatus vol volume.cache.dirty_bytes)
      "$TC" flush --socket "$(sock vol)" >>"$WORK/flush.log" 2>&1 || die "tiercache flush failed"
      secs=$(elapsed "$t0")
      record writeback drain "$cfg" seconds s "$rep" "$secs"
      record writeback drain "$cfg" dirty MiB "$rep" "$(awk -v d="$dirty" 'BEGIN { printf "%.1f", d / 1048576 }')"
      record writeback drain "$cfg" rate MB/s "$rep" "$(awk -v d="$dirty" -v s="$secs" 'BEGIN { printf "%.2f", d / s / 1e6 }')"
      tcdump vol "writeback-drain-$rep"
      stop vol
      stop origin ;;
    nbdkit-cache-wb)
      spindle origin "$WB_DATA"
      nbdcache vol origin writeback "$WB_CACHE"
      fio_nbd "$WORK/fill-$cfg-$rep.json" vol "${fill[@]}"
      secs=$(wb_flush_nbd vol)
      dirty=$(bytes "$WB_DRAIN")
      record writeback drain "$cfg" seconds s "$rep" "$secs"
      record writeback drain "$cfg" dirty MiB "$rep" "$(awk -v d="$dirty" 'BEGIN { printf "%.1f", d / 1048576 }')"
      record writeback drain "$cfg" rate MB/s "$rep" "$(awk -v d="$dirty" -v s="$secs" 'BEGIN { printf "%.2f", d / s / 1e6 }')"
      stop vol
      stop origin ;;
  esac
}

wl_writeback() {
  local size rep cfg
  if [ "$SCALE" = small ]; then
    size=256M WB_CACHE=128M WB_DRAIN=64M WB_RUN=5
  else
    size=1G WB_CACHE=512M WB_DRAIN=256M WB_RUN=10
  fi
  wl_begin writeback
  # the origin is written to: a private copy, made once per workload
  WB_DATA=$WORK/origin.img
  datafile "$STATE/data-$size.img" "$size"
  cp --reflink=auto "$STATE/data-$size.img" "$WB_DATA"
  for rep in $(seq 1 "$REPS"); do
    for cfg in $(order "$rep" spindle tiercache-wb nbdkit-cache-wb); do
      wb_randwrite "$cfg" "$rep"
    done
    for cfg in $(order "$rep" spindle-seqwrite tiercache nbdkit-cache-wb); do
      wb_drain "$cfg" "$rep"
    done
  done
  ratio writeback "randwrite IOPS: tiercache wb ÷ spindle" randwrite/tiercache-wb/iops randwrite/spindle/iops ">=20"
  ratio writeback "randwrite IOPS: tiercache wb ÷ nbdkit cache wb" randwrite/tiercache-wb/iops randwrite/nbdkit-cache-wb/iops "-"
  ratio writeback "randwrite IOPS: nbdkit cache wb ÷ spindle" randwrite/nbdkit-cache-wb/iops randwrite/spindle/iops "-"
  ratio writeback "drain rate: tiercache flush ÷ spindle sequential write" drain/tiercache/rate drain/spindle-seqwrite/rate ">=0.5"
  ratio writeback "drain rate: nbdkit cache flush ÷ spindle sequential write" drain/nbdkit-cache-wb/rate drain/spindle-seqwrite/rate "-"
  plot writeback randwrite iops "4 KiB random write QD16 (IOPS)"
  plot writeback randwrite p99 "4 KiB random write: p99 latency (ms)"
  plot writeback drain rate "drain of $WB_DRAIN written randomly (MB/s)"
  note writeback "Volume $size on the spindle, caches of $WB_CACHE, fresh for every run; random writes ${WB_RUN} s per run; drain: $WB_DRAIN written once in random 4 KiB order, then flushed; the reference is the time to write $WB_DRAIN sequentially (1 MiB, QD16) to the idle spindle."
  wl_end
}
