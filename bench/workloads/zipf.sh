# zipf (issues 3 and 8): a skewed working set on the emulated spindle with a
# cache a quarter of the volume.
#
#   spindle              the slow origin alone
#   tiercache-wt, -wb    tiercache writethrough / writeback, fresh cache
#   nbdkit-cache-wt, -wb nbdkit --filter=cache (cache-on-read=true, the same
#                        cache-max-size) over the spindle, writethrough /
#                        writeback
#
# Tests, fio random_distribution=zipf:1.2, 4 KiB, QD16, one connection:
#   randread   random reads (spindle, tiercache-wt, nbdkit-cache-wt)
#   mixed      70% reads, 30% writes (all five)
#
# Every run starts from an empty cache, warmed up by the same job with
# another random seed through the same file served without the spindle (the
# spindle delivers only ~220 misses per second: a warm-up through it would
# take minutes to teach a cache the hot set); then the spindle takes the
# file's place and the measured run begins.  tiercache is restarted on its
# cache for the swap (the index is recovered from the log; the policy's
# in-memory history starts again); nbdkit keeps its cache in the process.

zipf_run() {  # TEST CONFIG REP
  local test=$1 cfg=$2 rep=$3 target=vol j h0 m0 h1 m1 mode
  local job=(--bs=4k --iodepth=16 --random_distribution=zipf:1.2 --norandommap)
  if [ "$test" = randread ]; then job+=(--rw=randread); else job+=(--rw=randrw --rwmixread=70); fi
  case $cfg in
    spindle) spindle origin "$ZIPF_DATA"; target=origin ;;
    tiercache-*)
      mode=$([ "$cfg" = tiercache-wt ] && echo writethrough || echo writeback)
      # warm-up through the same file without the spindle, then the spindle
      # in its place and tiercache restarted on the same cache (recovery)
      fastdev origin "$ZIPF_DATA"
      tcformat "$WORK/cache.img" origin "$ZIPF_CACHE"
      tcserve vol origin --cache "$WORK/cache.img" --mode "$mode"
      fio_nbd "$WORK/warm.json" vol "${job[@]}" --runtime="$ZIPF_WARM" --time_based --randseed=7
      stop vol
      stop origin
      spindle origin "$ZIPF_DATA"
      tcserve vol origin --cache "$WORK/cache.img" --mode "$mode" ;;
    nbdkit-cache-*)
      mode=$([ "$cfg" = nbdkit-cache-wt ] && echo writethrough || echo writeback)
      # the same: nbdkit's nbd plugin connects to its upstream for each
      # client connection, and the cache stays in the process
      fastdev origin "$ZIPF_DATA"
      nbdcache vol origin "$mode" "$ZIPF_CACHE"
      fio_nbd "$WORK/warm.json" vol "${job[@]}" --runtime="$ZIPF_WARM" --time_based --randseed=7
      stop origin
      spindle origin "$ZIPF_DATA" ;;
  esac
  case $cfg in tiercache-*)
    read -r h0 m0 < <(tcstatus vol volume.cache.read_hits volume.cache.read_misses | paste -sd' ') ;;
  esac
  j=$WORK/$test-$cfg-$rep.json
  fio_nbd "$j" "$target" "${job[@]}" --runtime="$ZIPF_RUN" --time_based --randseed=42
  if [ "$test" = randread ]; then
    record zipf "$test" "$cfg" iops IOPS "$rep" "$(fio_get "$j" read_iops)"
    record zipf "$test" "$cfg" p99 ms "$rep" "$(fio_get "$j" read_p99_ms)"
  else
    record zipf "$test" "$cfg" iops IOPS "$rep" \
      "$(fio_get "$j" read_iops write_iops | awk '{ s += $1 } END { printf "%.6g", s }')"
    record zipf "$test" "$cfg" read_p99 ms "$rep" "$(fio_get "$j" read_p99_ms)"
    record zipf "$test" "$cfg" write_p99 ms "$rep" "$(fio_get "$j" write_p99_ms)"
  fi
  case $cfg in tiercache-*)
    read -r h1 m1 < <(tcstatus vol volume.cache.read_hits volume.cache.read_misses | paste -sd' ')
    record zipf "$test" "$cfg" hit_ratio fraction "$rep" \
      "$(awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) 'BEGIN { printf "%.4f", h / (h + m) }')"
    record zipf "$test" "$cfg" cache_used MiB "$rep" \
      "$(tcstatus vol volume.cache.used | awk '{ printf "%.1f", $1 / 1048576 }')"
    tcdump vol "zipf-$test-$cfg-$rep" ;;
  esac
  stop vol
  stop origin
}

wl_zipf() {
  local size rep cfg
  if [ "$SCALE" = small ]; then
    size=256M ZIPF_CACHE=64M ZIPF_WARM=2 ZIPF_RUN=3
  else
    size=1G ZIPF_CACHE=256M ZIPF_WARM=5 ZIPF_RUN=10
  fi
  ZIPF_DATA=$STATE/data-$size.img
  datafile "$ZIPF_DATA" "$size"
  wl_begin zipf
  for rep in $(seq 1 "$REPS"); do
    for cfg in $(order "$rep" spindle tiercache-wt nbdkit-cache-wt); do
      zipf_run randread "$cfg" "$rep"
    done
    local mixed=(spindle tiercache-wt tiercache-wb nbdkit-cache-wt nbdkit-cache-wb)
    [ "$SCALE" = small ] && mixed=(spindle tiercache-wb nbdkit-cache-wb)
    for cfg in $(order "$rep" "${mixed[@]}"); do
      zipf_run mixed "$cfg" "$rep"
    done
  done
  ratio zipf "randread IOPS: tiercache ÷ nbdkit cache" randread/tiercache-wt/iops randread/nbdkit-cache-wt/iops ">=2"
  ratio zipf "randread IOPS: tiercache ÷ spindle" randread/tiercache-wt/iops randread/spindle/iops ">=5"
  ratio zipf "randread p99: spindle ÷ tiercache" randread/spindle/p99 randread/tiercache-wt/p99 "-"
  ratio zipf "mixed IOPS: tiercache wt ÷ nbdkit cache wt" mixed/tiercache-wt/iops mixed/nbdkit-cache-wt/iops ">=2"
  ratio zipf "mixed IOPS: tiercache wb ÷ nbdkit cache wb" mixed/tiercache-wb/iops mixed/nbdkit-cache-wb/iops ">=2"
  ratio zipf "mixed IOPS: tiercache wt ÷ spindle" mixed/tiercache-wt/iops mixed/spindle/iops ">=5"
  ratio zipf "mixed IOPS: tiercache wb ÷ spindle" mixed/tiercache-wb/iops mixed/spindle/iops ">=5"
  plot zipf randread iops "zipf 1.2 random read 4 KiB QD16 (IOPS)"
  plot zipf randread p99 "zipf random read: p99 latency (ms)"
  plot zipf mixed iops "zipf 70/30 read/write 4 KiB QD16 (IOPS)"
  plot zipf mixed read_p99 "zipf 70/30: read p99 latency (ms)"
  note zipf "Volume $size on the spindle, caches of $ZIPF_CACHE; every run: fresh servers and an empty cache, ${ZIPF_WARM} s warm-up (another seed), ${ZIPF_RUN} s measured."
  wl_end
}
