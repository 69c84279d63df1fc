# cpu (issue 20): the daemon's CPU time per cached read, measured by a
# fixed amount of I/O rather than a fixed time, so that the figure does not
# depend on how fast the shared machine let the run go.
#
# A volume of 1 GiB (256 MiB small) of random data (a file on local disk,
# made once and kept in state/bench), a cache file 1.25 times it formatted
# fresh, filled by one sequential read of the whole volume through NBD
# (--sequential-cutoff 0: every 64 KiB block cached).  Then, REPS times,
# for every build named in CPU_BUILDS (default: BUILD), the daemon started
# on that cache and
#
#   randread  4 KiB random reads at QD32, 400 MiB of them (102,400 reads;
#             160 MiB small)
#   seqread   1 MiB sequential reads at QD8, 3 times the volume
#
# with fio's nbd engine, one connection.  cpu_per_request is the daemon's
# CPU time over the run (status cpu_user_seconds + cpu_system_seconds)
# divided by the reads it served (status volume.requests.read); misses
# counts reads that went to the origin (0: every block is cached).
#
#   CPU_BUILDS="build state/base"   builds to compare (directories under
#                the source tree holding a tiercache binary); they take
#                turns in an order rotated between repetitions, each on the
#                same cache, and the ratio table holds each against the
#                first
#   CPU_TESTS=seqread          only the tests named
#   CPU_DATA=zero              a sparse origin (zeros) instead of random data
#   CPU_PERF=1                 after the measured runs, one more run of each
#                build and test under perf record -g (its CPU is not
#                counted); the top of perf report in OUT/perf-BUILD-TEST.txt

wl_cpu() {
  local vol n4k nseq
  if [ "$SCALE" = small ]; then vol=256M n4k=160M nseq=768M; else vol=1G n4k=400M nseq=3G; fi
  local builds=${CPU_BUILDS:-$BUILD} data=${CPU_DATA:-random} b
  for b in $builds; do
    [ -x "$ROOT/$b/tiercache" ] || die "cpu: no $b/tiercache (CPU_BUILDS names build directories under the source tree)"
  done
  local origin
  if [ "$data" = zero ]; then
    wl_begin cpu
    origin=$WORK/origin.img
    truncate -s "$vol" "$origin"
  else
    origin=$STATE/data-$vol.img
    datafile "$origin" "$vol"
    wl_begin cpu
  fi
  local cache=$WORK/cache.img first=${builds%% *}
  truncate -s $(( $(bytes "$vol") * 5 / 4 )) "$cache"
  "$ROOT/$first/tiercache" format --force --allow-sparse --cache "$cache" --origin "$origin" \
    >>"$WORK/format.log" 2>&1 || { tail -n 5 "$WORK/format.log" >&2; die "tiercache format failed"; }

  TC=$ROOT/$first/tiercache
  tcserve fill "$origin" --cache "$cache" --sequential-cutoff 0
  local t0; t0=$(now)
  fio_nbd "$WORK/fill.json" fill --rw=read --bs=1M --iodepth=8
  local cached blocks=$(( $(bytes "$vol") / 65536 ))
  cached=$(tcstatus fill volume.cache.blocks_cached)
  say "  fill: $(elapsed "$t0") s, $cached blocks of 64 KiB cached"
  [ "$cached" = "$blocks" ] || die "cpu: the fill cached $cached of $blocks blocks"
  stop fill

  local rep test j u0 u1 s0 s1 r0 r1 m0 m1 name perf
  local -a io
  # the repetitions, then (CPU_PERF) one more under perf, not recorded
  for rep in $(seq 1 "$REPS") ${CPU_PERF:+perf}; do
    for b in $(order "${rep/perf/1}" $builds); do
      name=${b//\//-}
      TC=$ROOT/$b/tiercache
      tcserve cpu "$origin" --cache "$cache" --sequential-cutoff 0
      for test in ${CPU_TESTS:-randread seqread}; do
        if [ "$test" = randread ]; then
          io=(--rw=randread --bs=4k --iodepth=32 --size="$vol" --io_size="$n4k" --norandommap --randrepeat=0)
        else
          io=(--rw=read --bs=1M --iodepth=8 --size="$vol" --io_size="$nseq")
        fi
        j=$WORK/$test-$name-$rep.json
        read -r r0 m0 u0 s0 < <(tcstatus cpu volume.requests.read volume.cache.read_misses \
          cpu_user_seconds cpu_system_seconds | paste -sd' ')
        perf=""
        if [ "$rep" = perf ]; then
          perf record -g -o "$WORK/perf.data" -p "$(pid_of cpu)" >"$WORK/perf.log" 2>&1 &
          perf=$!
          sleep 1
        fi
        fio_nbd "$j" cpu "${io[@]}"
        if [ -n "$perf" ]; then
          kill -INT "$perf"
          wait "$perf" || true
          perf report -i "$WORK/perf.data" --no-children --stdio --percent-limit 0.7 \
            >"$OUT/perf-$name-$test.txt" 2>/dev/null || true
          say "  perf: $name $test: ${OUT#"$ROOT"/}/perf-$name-$test.txt"
          continue
        fi
        read -r r1 m1 u1 s1 < <(tcstatus cpu volume.requests.read volume.cache.read_misses \
          cpu_user_seconds cpu_system_seconds | paste -sd' ')
        record cpu "$test" "$name" cpu_per_request us "$rep" \
          "$(awk -v u0="$u0" -v s0="$s0" -v u1="$u1" -v s1="$s1" -v n=$((r1 - r0)) \
               'BEGIN { printf "%.2f", (u1 + s1 - u0 - s0) * 1e6 / n }')"
        record cpu "$test" "$name" user_per_request us "$rep" \
          "$(awk -v u0="$u0" -v u1="$u1" -v n=$((r1 - r0)) 'BEGIN { printf "%.2f", (u1 - u0) * 1e6 / n }')"
        record cpu "$test" "$name" misses count "$rep" $((m1 - m0))
        if [ "$test" = randread ]; then
          record cpu "$test" "$name" iops IOPS "$rep" "$(fio_get "$j" read_iops)"
        else
          record cpu "$test" "$name" bandwidth MB/s "$rep" "$(fio_get "$j" read_mbps)"
        fi
      done
      stop cpu
    done
  done

  local fname=${first//\//-}
  for b in $builds; do
    name=${b//\//-}
    ratio cpu "CPU per 4 KiB random read at QD32 (us; $name)" "randread/$name/cpu_per_request" 1 "-"
    ratio cpu "CPU per 1 MiB sequential read at QD8 (us; $name)" "seqread/$name/cpu_per_request" 1 "-"
    [ "$b" = "$first" ] && continue
    ratio cpu "CPU per 4 KiB read: $name ÷ $fname" "randread/$name/cpu_per_request" "randread/$fname/cpu_per_request" "-"
    ratio cpu "CPU per 1 MiB read: $name ÷ $fname" "seqread/$name/cpu_per_request" "seqread/$fname/cpu_per_request" "-"
  done
  note cpu "A $vol volume of $data data wholly cached (a cache file of 1.25 times it, on local disk, filled by one sequential read through NBD, --sequential-cutoff 0); fio's nbd engine, one connection, a fixed amount of I/O per run: randread $n4k in 4 KiB random reads at QD32, seqread $nseq in 1 MiB sequential reads at QD8.  cpu_per_request: the daemon's CPU (status cpu_user_seconds + cpu_system_seconds) over the run divided by the reads it served; user_per_request the user-space part alone.  Builds: $builds, taking turns in every repetition on the same cache."
  wl_end
}
