# scale (issue 20): what a large cache costs the daemon.  Caches holding 1,
# 4 and 16 GiB (256 MiB and 1 GiB small) of a sparse origin, each filled by
# reading the whole volume once through NBD (every 64 KiB block cached,
# --sequential-cutoff 0), then:
#
#   start   the daemon restarted on its cache after a clean stop (SIGTERM)
#           and after kill -9: the time from its start to the answer of the
#           first request (bench/startclock.py connects every 2 ms and reads
#           4 KiB), status recovery_seconds, and VmRSS then; page caches are
#           dropped before every start
#   memory  status index_memory_bytes and memory_per_cached_block_bytes,
#           and VmRSS, after the clean start
#   survey  after each kill -9, before the start: bench/survey_speed on the
#           cache file -- the offline scan of the log (what that start
#           runs) against reading only the first chunk header of every
#           segment (src/engine/survey.h, the first step of a start from a
#           periodic checkpoint: src/engine/checkpoint.c), and its reads
#   fit     start time and VmRSS against the number of cached blocks, a
#           least-squares line per repetition, extrapolated to 1 TiB
#   randread, seqread
#           on the largest cache: 4 KiB random reads at QD32 and 1 MiB
#           sequential reads at QD8, fio over NBD (tiercache) against fio
#           reading the cache file's data directly (direct: io_uring,
#           O_DIRECT if the file system takes it), with the daemon's CPU
#           time (status cpu_user_seconds + cpu_system_seconds) per
#           request served
#
# Origin and cache files are sparse (format --allow-sparse) and removed at
# the end; the cache files hold the data read (zeros: the origin is a hole).

sc_rss_mib() {  # PID: VmRSS in MiB
  awk '/^VmRSS:/ { printf "%.2f", $2 / 1024 }' "/proc/$1/status"
}
# sc_start NAME ORIGIN CACHE: drop the page caches, start the daemon NAME
# and set SC_START to the seconds until it answered its first read (not
# printed: the daemon must be started by this shell, not a subshell)
sc_start() {
  local name=$1 origin=$2 cache=$3 ready=$WORK/startclock.ready t0 t1
  drop_caches
  rm -f "$(sock "$name")" "$ready"
  python3 bench/startclock.py "$(sock "$name")" "$ready" >"$WORK/startclock.out" 2>>"$WORK/startclock.err" &
  local clock=$!
  while [ ! -e "$ready" ]; do
    kill -0 "$clock" 2>/dev/null || die "scale: bench/startclock.py failed: $(cat "$WORK/startclock.err")"
    sleep 0.01
  done
  t0=$(now)
  spawn "$name" "$TC" serve --foreground --origin "$origin" --cache "$cache" \
    --socket "$(sock "$name")" --sequential-cutoff 0
  while kill -0 "$clock" 2>/dev/null; do
    kill -0 "${PIDS[$name]}" 2>/dev/null || { kill "$clock"; tail -n 20 "$WORK/$name.log" >&2; die "scale: $name exited at start"; }
    sleep 0.05
  done
  wait "$clock" || { tail -n 20 "$WORK/$name.log" >&2; die "scale: $name did not answer"; }
  t1=$(cat "$WORK/startclock.out")
  SC_START=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
}
# sc_kill9 NAME: kill -9, and wait until it is gone
sc_kill9() {
  local pid=${PIDS[$1]}
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  unset "PIDS[$1]"
}
# sc_kv KEY LINE: the value of KEY=value in LINE
sc_kv() { printf '%s\n' "$2" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
# sc_fit X_Y_PAIRS X...: least squares y = a + b x over "x y" lines on
# standard input; prints "a b" then a + b X for every X given
sc_fit() {
  awk -v xs="$*" '{ n++; sx += $1; sy += $2; sxx += $1 * $1; sxy += $1 * $2 }
    END {
      b = (n * sxy - sx * sy) / (n * sxx - sx * sx); a = (sy - b * sx) / n
      printf "%.9g %.9g", a, b
      k = split(xs, x, " "); for (i = 1; i <= k; i++) printf " %.9g", a + b * x[i]
      printf "\n"
    }'
}

wl_scale() {
  local sizes rt
  if [ "$SCALE" = small ]; then sizes="256M 1G" rt=2; else sizes="1G 4G 16G" rt=5; fi
  sizes=${SCALE_SIZES:-$sizes}
  local bsz=65536 tib=$((1 << 40)) gib=$((1 << 30)) largest=${sizes##* }
  local tib_blocks=$((tib / bsz)) g16_blocks=$((16 * gib / bsz))
  wl_begin scale
  local need=$(( $(bytes "$largest") * 5 / 4 + gib ))
  local avail; avail=$(df -B1 --output=avail "$WORK" | tail -n 1 | tr -d ' ')
  [ "$avail" -ge "$need" ] ||
    die "scale: $(hsize "$avail") free under $WORK, the $largest cache needs $(hsize "$need")"
  say "  $(hsize "$avail") free; the largest cache takes $(hsize $(( $(bytes "$largest") * 5 / 4 )))"

  local size sz blocks origin cache rep kind s rss rec idx per cached pid
  : >"$WORK/fit.txt"
  for size in $sizes; do
    sz=$(bytes "$size")
    blocks=$((sz / bsz))
    origin=$WORK/origin-$size.img cache=$WORK/cache-$size.img
    rm -f "$origin" "$cache"
    truncate -s "$sz" "$origin"
    truncate -s $((sz * 5 / 4)) "$cache"
    "$TC" format --force --allow-sparse --cache "$cache" --origin "$origin" >>"$WORK/format.log" 2>&1 ||
      { tail -n 5 "$WORK/format.log" >&2; die "tiercache format failed"; }
    tcserve tiercache "$origin" --cache "$cache" --sequential-cutoff 0
    say "  $size: filling the cache (reading the whole volume through tiercache)"
    local t0; t0=$(now)
    fio_nbd "$WORK/fill-$size.json" tiercache --rw=read --bs=1M --iodepth=8
    cached=$(tcstatus tiercache volume.cache.blocks_cached)
    say "  $size: fill $(elapsed "$t0") s, $cached blocks of 64 KiB cached, VmRSS $(sc_rss_mib "$(pid_of tiercache)") MiB"
    [ "$cached" = "$blocks" ] || die "scale: the fill cached $cached of $blocks blocks"
    stop tiercache

    for rep in $(seq 1 "$REPS"); do
      # a clean stop came before; the kill -9 start follows a kill -9
      for kind in clean kill9; do
        if [ "$kind" = kill9 ]; then
          sc_kill9 tiercache
          local sv
          sv=$("$ROOT/$BUILD/bench/survey_speed" "$cache" 3) || die "scale: bench/survey_speed failed"
          say "  $size: after kill -9: $sv"
          record scale survey "$size" scan_offline s "$rep" "$(sc_kv scan_s "$sv")"
          record scale survey "$size" first_headers s "$rep" "$(sc_kv survey_s "$sv")"
          record scale survey "$size" first_header_reads count "$rep" "$(sc_kv survey_reads "$sv")"
          record scale survey "$size" live_chunks count "$rep" "$(sc_kv live_chunks "$sv")"
        fi
        sc_start tiercache "$origin" "$cache"
        s=$SC_START
        pid=$(pid_of tiercache)
        rss=$(sc_rss_mib "$pid")
        read -r rec idx per cached < <(tcstatus tiercache volume.cache.recovery_seconds \
          volume.cache.index_memory_bytes volume.cache.memory_per_cached_block_bytes \
          volume.cache.blocks_cached | paste -sd' ')
        [ "$cached" = "$blocks" ] || die "scale: after the $kind start $cached of $blocks blocks are cached"
        record scale start "$size-$kind" start s "$rep" "$s"
        record scale start "$size-$kind" recovery s "$rep" "$rec"
        record scale start "$size-$kind" rss MiB "$rep" "$rss"
        if [ "$kind" = clean ]; then
          record scale memory "$size" rss MiB "$rep" "$rss"
          record scale memory "$size" index MiB "$rep" "$(awk -v v="$idx" 'BEGIN { printf "%.3f", v / 1048576 }')"
          record scale memory "$size" per_cached_block bytes "$rep" "$per"
        fi
        echo "$rep $kind $blocks $s $rss $idx" >>"$WORK/fit.txt"
      done
      [ "$rep" = "$REPS" ] || stop tiercache
    done
    [ "$size" = "$largest" ] && break
    stop tiercache
    rm -f "$origin" "$cache"
  done

  # the line through the sizes, per repetition, and where it leads
  local a b at16 at1t
  for rep in $(seq 1 "$REPS"); do
    for kind in clean kill9; do
      read -r a b at16 at1t < <(awk -v r="$rep" -v k="$kind" '$1 == r && $2 == k { print $3, $4 }' "$WORK/fit.txt" |
                                  sc_fit "$g16_blocks" "$tib_blocks")
      record scale fit-start "$kind" per_GiB s "$rep" "$(awk -v b="$b" -v g=$((gib / bsz)) 'BEGIN { printf "%.4f", b * g }')"
      record scale fit-start "$kind" at_0 s "$rep" "$a"
      record scale fit-start "$kind" at_16GiB s "$rep" "$at16"
      record scale fit-start "$kind" at_1TiB s "$rep" "$at1t"
    done
    read -r a b at1t < <(awk -v r="$rep" '$1 == r && $2 == "clean" { print $3, $5 * 1048576 }' "$WORK/fit.txt" |
                           sc_fit "$tib_blocks")
    record scale fit-memory rss per_block bytes "$rep" "$b"
    record scale fit-memory rss at_0 MiB "$rep" "$(awk -v v="$a" 'BEGIN { v = v / 1048576; printf "%.2f", (v < 0.005 && v > -0.005) ? 0 : v }')"
    record scale fit-memory rss at_1TiB GiB "$rep" "$(awk -v v="$at1t" 'BEGIN { printf "%.3f", v / 1073741824 }')"
    read -r a b at1t < <(awk -v r="$rep" '$1 == r && $2 == "clean" { print $3, $6 }' "$WORK/fit.txt" |
                           sc_fit "$tib_blocks")
    record scale fit-memory index per_block bytes "$rep" "$b"
    record scale fit-memory index at_0 MiB "$rep" "$(awk -v v="$a" 'BEGIN { v = v / 1048576; printf "%.2f", (v < 0.005 && v > -0.005) ? 0 : v }')"
    record scale fit-memory index at_1TiB GiB "$rep" "$(awk -v v="$at1t" 'BEGIN { printf "%.3f", v / 1073741824 }')"
  done

  # reads on the largest cache: over NBD against the cache file read directly
  local off len data direct=1 how="O_DIRECT"
  # where the cache file holds data: from its first extent of at least
  # 1 MiB (the superblocks come before) to the end of its last one.  The
  # segments are not full to their end (the holes are about 1 % of the
  # span, measured below): a read of a hole is answered without the disk
  read -r off len data < <(python3 - "$cache" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
end = os.fstat(fd).st_size
pos, ext = 0, []
while pos < end:
    try:
        d = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError:
        break
    h = os.lseek(fd, d, os.SEEK_HOLE)
    ext.append((d, h - d))
    pos = h
ext = [e for e in ext if e[1] >= 1 << 20] or ext
start = ext[0][0] // (1 << 20) * (1 << 20)
span = (ext[-1][0] + ext[-1][1] - start) // (1 << 20) * (1 << 20)
print(start, span, sum(l for d, l in ext if d + l <= start + span))
PY
  )
  local holes; holes=$(awk -v d="$data" -v l="$len" 'BEGIN { printf "%.1f", 100 * (1 - d / l) }')
  say "  direct reads: $(hsize "$len") of the cache file from offset $off, $holes % of it holes"
  if ! dd if="$cache" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null; then
    direct=0 how="buffered (the file system refused O_DIRECT)"
  fi
  local common=(--runtime="$rt" --time_based --ramp_time=1 --norandommap --randrepeat=0)
  local test cfg j u0 u1 s0 s1 r0 r1 m0 m1
  for rep in $(seq 1 "$REPS"); do
    for test in randread seqread; do
      local io=(--rw=randread --bs=4k --iodepth=32)
      [ "$test" = seqread ] && io=(--rw=read --bs=1M --iodepth=8)
      for cfg in $(order "$rep" tiercache direct); do
        j=$WORK/$test-$cfg-$rep.json
        if [ "$cfg" = direct ]; then
          [ "$direct" = 0 ] || drop_caches
          timeout -k 10 $((rt + 121)) fio --output-format=json --output="$j" --name=direct \
            --filename="$cache" --offset="$off" --size="$len" --ioengine=io_uring --direct="$direct" \
            "${io[@]}" "${common[@]}" >/dev/null 2>"$j.err" || { cat "$j.err" >&2; die "fio on the cache file failed"; }
        else
          read -r r0 m0 u0 s0 < <(tcstatus tiercache volume.requests.read volume.cache.read_misses \
            cpu_user_seconds cpu_system_seconds | paste -sd' ')
          fio_nbd "$j" tiercache "${io[@]}" "${common[@]}"
          read -r r1 m1 u1 s1 < <(tcstatus tiercache volume.requests.read volume.cache.read_misses \
            cpu_user_seconds cpu_system_seconds | paste -sd' ')
          record scale "$test" tiercache cpu_per_request us "$rep" \
            "$(awk -v u0="$u0" -v s0="$s0" -v u1="$u1" -v s1="$s1" -v n=$((r1 - r0)) \
                 'BEGIN { printf "%.2f", (u1 + s1 - u0 - s0) * 1e6 / n }')"
          record scale "$test" tiercache misses count "$rep" $((m1 - m0))
        fi
        if [ "$test" = randread ]; then
          record scale "$test" "$cfg" iops IOPS "$rep" "$(fio_get "$j" read_iops)"
        else
          record scale "$test" "$cfg" bandwidth MB/s "$rep" "$(fio_get "$j" read_mbps)"
        fi
      done
    done
  done
  tcdump tiercache "scale-$largest"
  stop tiercache
  rm -f "$origin" "$cache"

  ratio scale "start of 16 GiB after a clean stop (s$([ "$largest" = 16G ] || echo "; fitted"))" \
    "$([ "$largest" = 16G ] && echo start/16G-clean/start || echo fit-start/clean/at_16GiB)" 1 "<=1"
  ratio scale "start of 16 GiB after kill -9 (s$([ "$largest" = 16G ] || echo "; fitted"))" \
    "$([ "$largest" = 16G ] && echo start/16G-kill9/start || echo fit-start/kill9/at_16GiB)" 1 "<=1"
  ratio scale "status memory per cached block at $largest (bytes)" "memory/$largest/per_cached_block" 1 "<=64"
  ratio scale "VmRSS per cached block (fitted slope; bytes)" fit-memory/rss/per_block 1 "<=64"
  ratio scale "randread IOPS: tiercache ÷ direct" randread/tiercache/iops randread/direct/iops ">=0.6"
  ratio scale "seqread MB/s: tiercache ÷ direct" seqread/tiercache/bandwidth seqread/direct/bandwidth ">=0.8"
  ratio scale "daemon CPU per cached 4 KiB read at QD32 (us)" randread/tiercache/cpu_per_request 1 "-"
  ratio scale "daemon CPU per cached 1 MiB read at QD8 (us)" seqread/tiercache/cpu_per_request 1 "-"
  plot scale start start "start to the first answer (s)"
  plot scale memory rss "VmRSS after a clean start (MiB)"
  plot scale randread iops "cached 4 KiB random read, QD32 (IOPS)"
  plot scale seqread bandwidth "cached 1 MiB sequential read, QD8 (MB/s)"
  note scale "Caches of $(echo "$sizes" | sed 's/ /, /g') cached data in 64 KiB blocks, cache files 1.25 times that, origin and cache sparse files on local disk, filled by one sequential read of the volume through NBD (--sequential-cutoff 0; the data are zeros: the origin is a hole).  start: from the daemon's start to the answer of its first 4 KiB read (a client connecting every 2 ms), page caches dropped before; clean follows SIGTERM, kill9 follows kill -9; recovery is status recovery_seconds; rss is VmRSS just after the first answer."
  note scale "survey: after each kill -9, bench/survey_speed on the cache file: scan_offline is the offline open of the set (recovery's walk of every chunk header of the log and the replay of the live entries, as the start after kill -9 runs them); first_headers the median of 3 reads of the first chunk header of every segment (one read each, 64 in flight), the first step of a start from a running checkpoint (off by default; TIERCACHE_TEST_CKPT_BYTES=N turns them on for the daemons the workload starts); first_header_reads its reads; live_chunks the chunks the scan found in live groups."
  note scale "Model: start time and VmRSS are fitted as a + b × cached blocks by least squares over the sizes measured, per repetition; at_16GiB and at_1TiB are the line at 262,144 and 16,777,216 cached blocks (per_GiB is b × 16,384 blocks, at_0 is a).  index is status index_memory_bytes fitted the same way."
  note scale "Reads on the $largest cache: fio nbd engine, one connection, ${rt} s per run after 1 s of ramp; direct: fio on the cache file where it holds data ($(hsize "$len") from offset $off, of which $holes % are holes at the ends of segments, read without the disk), io_uring, $how, the page cache dropped before.  cpu_per_request: the daemon's CPU time (status cpu_user_seconds + cpu_system_seconds, getrusage) over the fio run, ramp included, divided by the read requests it served then (status volume.requests.read); misses: reads that went to the origin."
  wl_end
}
