# interleave (issues 5 and 8): a cached file striped over two cache devices
# that each read at most LIMIT, read linearly by 1, 2 and 3 readers at once:
# the aggregate throughput against the sum of the two devices' limits.
#
# The limit: each cache device is a loop device over a file on local disk
# (buffered, so the disk itself is never the bottleneck), and the tiercache
# daemon runs in a blkio cgroup (v1) with blkio.throttle.read_bps_device set
# to LIMIT for every loop device.  The kernel throttles each device's reads
# separately, like two disks of the same speed.  The limits are measured in
# the same run: fio reads each loop device directly from the same cgroup,
# one device at a time, O_DIRECT, QD4, in requests of the largest size the
# device takes whole (docs/BENCHMARKS.md: buffered reads understate the
# limit, and a request the kernel splits is charged more than its size).
#
#   tiercache-2dev   a cache set of two throttled devices, DATA cached
#                    (the warm pass ran on a fast origin; the daemon then
#                    restarts on the same cache with the spindle as origin,
#                    so a miss would show)
#   tiercache-1dev   the reference: the same on a single throttled device
#
# Readers: fio nbd engine, N jobs, one connection each; job k reads its
# N-th of the file linearly (1 MiB, QD4) for the run time, looping.

IL_CG=""

il_cgroup() {  # make the cgroup, throttle the loop devices given
  local dev
  [ -e /sys/fs/cgroup/blkio/cgroup.procs ] || die "interleave: the blkio cgroup (v1) is not mounted at /sys/fs/cgroup/blkio"
  IL_CG=/sys/fs/cgroup/blkio/tiercache-bench-$$
  mkdir -p "$IL_CG"
  on_exit "il_rmcg"
  for dev in "$@"; do
    echo "$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ') $IL_LIMIT" >"$IL_CG/blkio.throttle.read_bps_device"
  done
}
il_rmcg() {
  local p
  [ -n "$IL_CG" ] && [ -d "$IL_CG" ] || return 0
  for p in $(cat "$IL_CG/cgroup.procs" 2>/dev/null); do echo "$p" >/sys/fs/cgroup/blkio/cgroup.procs; done
  rmdir "$IL_CG"
}
# il_serve NAME ORIGIN CACHES: tiercache inside the throttled cgroup
il_serve() {
  local name=$1 origin=$2 caches=$3
  rm -f "$(sock "$name")"
  TC_UP[$name]=$origin
  spawn "$name" sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$IL_CG" \
    "$TC" serve --foreground --origin "$(uri "$origin")" --socket "$(sock "$name")" \
    --cache "$caches" --sequential-cutoff 0 --state-file "$WORK/$name.tcstate"
  wait_up "$name"
}

il_limit() {  # DEV REP: the throttled read rate of DEV, measured
  local dev=$1 rep=$2 j=$WORK/limit-$(basename "$1")-$2.json bs
  bs=$(il_max_io "$dev")
  sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$IL_CG" \
    fio --output-format=json --output="$j" --name=limit --filename="$dev" --rw=read --bs="$bs" \
    --direct=1 --ioengine=io_uring --iodepth=4 --time_based \
    --runtime="$IL_RUN" >/dev/null 2>"$j.err" || { cat "$j.err" >&2; die "fio on $dev failed"; }
  fio_get "$j" read_mbps
}
# il_max_io DEV: the largest request DEV takes whole, in bytes: the smaller
# of max_sectors_kb and max_segments pages (a buffer's pages need not be
# physically adjacent), as tiercache computes it (devices[].max_io)
il_max_io() {
  local q=/sys/block/$(basename "$1")/queue kb segs
  kb=$(cat "$q/max_sectors_kb")
  segs=$(( $(cat "$q/max_segments") * $(getconf PAGESIZE) / 1024 ))
  echo $(( (kb < segs ? kb : segs) * 1024 ))
}

wl_interleave() {
  local size rep cfg n j a b c
  if [ "$SCALE" = small ]; then size=512M IL_RUN=3; else size=1G IL_RUN=8; fi
  IL_LIMIT=${IL_LIMIT:-50000000}
  local data=$STATE/data-$size.img
  datafile "$data" "$size"
  wl_begin interleave
  local dsz=$(( $(bytes "$size") * 3 / 4 ))   # each of the two: 1.5x the data in all
  local ssz=$(( $(bytes "$size") * 3 / 2 ))   # the single device
  truncate -s "$dsz" "$WORK/a.img" "$WORK/b.img"
  truncate -s "$ssz" "$WORK/s.img"
  a=$(losetup -f --show "$WORK/a.img"); on_exit "losetup -d $a"
  b=$(losetup -f --show "$WORK/b.img"); on_exit "losetup -d $b"
  c=$(losetup -f --show "$WORK/s.img"); on_exit "losetup -d $c"
  il_cgroup "$a" "$b" "$c"

  # warm both cache sets through a fast origin, then serve with the spindle
  # Each set has an origin of its own (the same data file behind another
  # server): the two daemons serve at the same time, and one origin served
  # by two cache sets at once is refused (a set may hold writes the other
  # would not see).
  local o
  for cfg in tiercache-2dev tiercache-1dev; do
    if [ "$cfg" = tiercache-2dev ]; then n="$a,$b" o=origin; else n="$c" o=origin1; fi
    fastdev "$o" "$data"
    tcformat "$n" "$o" 0
    TC_UP[warm]=$o
    # The state file (and sequence record) in the scratch folder: the
    # sets are on loop devices, whose default place is the machine's
    # /var/lib/tiercache, where nothing would remove them.
    "$TC" serve --foreground --origin "$(uri "$o")" --socket "$(sock warm)" --cache "$n" \
      --sequential-cutoff 0 --state-file "$WORK/$cfg.tcstate" >>"$WORK/warm.log" 2>&1 </dev/null &
    PIDS[warm]=$!; STARTED+=(warm)
    wait_up warm
    fio_nbd "$WORK/warm.json" warm --rw=read --bs=1M --iodepth=8
    stop warm
    stop "$o"
  done
  spindle origin "$data"
  spindle origin1 "$data"
  il_serve tiercache-2dev origin "$a,$b"
  il_serve tiercache-1dev origin1 "$c"

  local configs=(limits 2dev-1r 2dev-2r 2dev-3r 1dev-1r)
  local h0 m0 h1 m1 la lb
  for rep in $(seq 1 "$REPS"); do
    for cfg in $(order "$rep" "${configs[@]}"); do
      case $cfg in
        limits)
          la=$(il_limit "$a" "$rep")
          lb=$(il_limit "$b" "$rep")
          record interleave limits device-a bandwidth MB/s "$rep" "$la"
          record interleave limits device-b bandwidth MB/s "$rep" "$lb"
          record interleave limits sum bandwidth MB/s "$rep" "$(awk -v x="$la" -v y="$lb" 'BEGIN { print x + y }')"
          ;;
        *)
          local srv=tiercache-${cfg%-*} readers=${cfg##*-}
          readers=${readers%r}
          read -r h0 m0 < <(tcstatus "$srv" volume.cache.read_hits volume.cache.read_misses | paste -sd' ')
          j=$WORK/read-$cfg-$rep.json
          fio_nbd "$j" "$srv" --rw=read --bs=1M --iodepth=4 --numjobs="$readers" \
            --size=$(( $(bytes "$size") / readers / 1048576 ))M \
            --offset_increment=$(( $(bytes "$size") / readers / 1048576 ))M \
            --time_based --runtime="$IL_RUN" --ramp_time=1
          read -r h1 m1 < <(tcstatus "$srv" volume.cache.read_hits volume.cache.read_misses | paste -sd' ')
          record interleave read "$cfg" bandwidth MB/s "$rep" "$(fio_get "$j" read_mbps)"
          record interleave read "$cfg" misses count "$rep" "$((m1 - m0))"
          ;;
      esac
    done
  done
  tcdump tiercache-2dev interleave-2dev
  tcdump tiercache-1dev interleave-1dev
  for n in 1 2 3; do
    ratio interleave "$n reader(s) on 2 devices: aggregate ÷ sum of the two limits" \
      "read/2dev-${n}r/bandwidth" limits/sum/bandwidth ">=0.95"
  done
  ratio interleave "1 reader on 1 device: throughput ÷ its limit" read/1dev-1r/bandwidth limits/device-a/bandwidth "-"
  ratio interleave "1 reader: 2 devices ÷ 1 device" read/2dev-1r/bandwidth read/1dev-1r/bandwidth "-"
  plot interleave read bandwidth "linear reads of a cached file (MB/s)"
  plot interleave limits bandwidth "the throttled devices, read directly (MB/s)"
  note interleave "File $size, all cached; each cache device throttled to $(awk -v l="$IL_LIMIT" 'BEGIN { printf "%.0f", l / 1e6 }') MB/s of reads (blkio cgroup v1 on a loop device); limits: each device read directly, O_DIRECT, QD4, in requests of $(( $(il_max_io "$a") / 1024 )) KiB (the largest it takes whole); configurations NdevMr: N cache devices, M readers; ${IL_RUN} s per run after 1 s of ramp; 'misses' counts reads that went to the origin during the run (0 when all was cached)."
  wl_end
}
