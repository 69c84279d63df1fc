# hitpath (issues 2 and 8): what tiercache's request path costs when the
# data is on the fast device, against nbdkit's file plugin on the same file.
#
#   nbdkit-file          nbdkit file DATA (its defaults: the page cache)
#   nbdkit-file-direct   nbdkit file DATA cache=none (the page cache dropped
#                        behind every request, as tiercache's O_DIRECT)
#   tiercache            tiercache serve --origin DATA, no cache
#   tiercache-cached     tiercache on the spindle holding DATA, with a cache
#                        file twice the volume, every block cached by a
#                        sequential warm pass (--sequential-cutoff 0)
#
# Tests: randread (4 KiB, QD32) and seqread (1 MiB, QD8), one connection.

wl_hitpath() {
  local size rt
  if [ "$SCALE" = small ]; then size=256M rt=2; else size=1G rt=5; fi
  local data=$STATE/data-$size.img
  datafile "$data" "$size"
  wl_begin hitpath

  fastdev nbdkit-file "$data"
  fastdev nbdkit-file-direct "$data" cache=none
  tcserve tiercache "$data"
  spindle spindle "$data"
  tcformat "$WORK/cache.img" spindle "$(( $(bytes "$size") * 2 ))"
  tcserve tiercache-cached spindle --cache "$WORK/cache.img" --sequential-cutoff 0
  say "  warm pass: reading the whole volume through tiercache-cached"
  local t0; t0=$(now)
  fio_nbd "$WORK/warm.json" tiercache-cached --rw=read --bs=1M --iodepth=8
  local cached; cached=$(tcstatus tiercache-cached volume.cache.blocks_cached volume.cache.block_size |
                         paste -sd' ' | awk '{ print $1 * $2 }')
  say "  warm pass: $(elapsed "$t0") s, $(hsize "$cached") of $size cached"
  [ "$cached" -ge "$(bytes "$size")" ] || die "hitpath: the warm pass left blocks uncached"

  local configs=(nbdkit-file nbdkit-file-direct tiercache tiercache-cached)
  local common=(--runtime="$rt" --time_based --ramp_time=1 --norandommap --randrepeat=0)
  local rep cfg h0 m0 h1 m1 j
  for rep in $(seq 1 "$REPS"); do
    for cfg in $(order "$rep" "${configs[@]}"); do
      j=$WORK/randread-$cfg-$rep.json
      [ "$cfg" = tiercache-cached ] &&
        read -r h0 m0 < <(tcstatus "$cfg" volume.cache.read_hits volume.cache.read_misses | paste -sd' ')
      fio_nbd "$j" "$cfg" --rw=randread --bs=4k --iodepth=32 "${common[@]}"
      record hitpath randread "$cfg" iops IOPS "$rep" "$(fio_get "$j" read_iops)"
      record hitpath randread "$cfg" p99 ms "$rep" "$(fio_get "$j" read_p99_ms)"
      if [ "$cfg" = tiercache-cached ]; then
        read -r h1 m1 < <(tcstatus "$cfg" volume.cache.read_hits volume.cache.read_misses | paste -sd' ')
        record hitpath randread "$cfg" hit_ratio fraction "$rep" \
          "$(awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) 'BEGIN { printf "%.4f", h / (h + m) }')"
      fi
    done
    for cfg in $(order "$rep" "${configs[@]}"); do
      j=$WORK/seqread-$cfg-$rep.json
      fio_nbd "$j" "$cfg" --rw=read --bs=1M --iodepth=8 "${common[@]}"
      record hitpath seqread "$cfg" bandwidth MB/s "$rep" "$(fio_get "$j" read_mbps)"
    done
  done

  tcdump tiercache-cached hitpath-cached
  ratio hitpath "randread IOPS: tiercache ÷ nbdkit file" randread/tiercache/iops randread/nbdkit-file/iops ">=1.0"
  ratio hitpath "randread IOPS: tiercache cached ÷ nbdkit file" randread/tiercache-cached/iops randread/nbdkit-file/iops ">=1.0"
  ratio hitpath "seqread MB/s: tiercache ÷ nbdkit file" seqread/tiercache/bandwidth seqread/nbdkit-file/bandwidth ">=1.0"
  ratio hitpath "seqread MB/s: tiercache cached ÷ nbdkit file" seqread/tiercache-cached/bandwidth seqread/nbdkit-file/bandwidth ">=1.0"
  ratio hitpath "randread IOPS: tiercache ÷ nbdkit file cache=none" randread/tiercache/iops randread/nbdkit-file-direct/iops "-"
  ratio hitpath "seqread MB/s: tiercache ÷ nbdkit file cache=none" seqread/tiercache/bandwidth seqread/nbdkit-file-direct/bandwidth "-"
  plot hitpath randread iops "4 KiB random read, QD32 (IOPS)"
  plot hitpath seqread bandwidth "1 MiB sequential read, QD8 (MB/s)"
  note hitpath "Volume $size of random data on local disk; fio nbd engine, one connection, ${rt} s per run after 1 s of ramp."
  wl_end
}
