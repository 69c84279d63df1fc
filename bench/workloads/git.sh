# git (issue 8): the dm-cache / EnhanceIO test.  A 2 GiB volume through
# nbdfuse + a loop device + ext4: mkfs, git clone of a Linux-sized
# repository, then checkout of 5 tags, with sync and dropped page caches
# after every step (each phase's time includes its sync).
#
#   fast                 the volume on local disk alone (nbdkit file)
#   spindle              the volume on the emulated spindle alone
#   tiercache-wt, -wb    tiercache writethrough / writeback over the spindle
#   nbdkit-cache-wt      nbdkit --filter=cache cache=writethrough over the
#                        spindle (cache-on-read=true)
#   tiercache-on-fast    tiercache writethrough over the fast volume
#   nbdkit-cache-on-fast nbdkit's cache filter over the fast volume
#                        (these two: the cost of the cache layer itself)
#
# The repository is made once by bench/gitrepo.py from Debian's
# linux-source package: the whole tree (GIT_TREE=full: 78,600 files,
# 1.24 GB checked out, 250 MiB pack) or, by default, its core directories
# (block crypto fs include init ipc kernel lib mm net security: 11,700
# files, 139 MiB checked out, 38 MiB pack), with the cache scaled down too
# (256 MiB for the full tree, 64 MiB for the core: 32 MiB would keep the
# cache to data ratio, but a cache needs at least 8 segments of 4 MiB).
# See docs/BENCHMARKS.md for why the default is scaled down.
#
# The source package is named, not "the newest the archive offers", so
# that two machines measure the same repository: GIT_SOURCE (default
# linux-source-6.1, the tree docs/BENCHMARKS.md describes).

GIT_CORE_DIRS="block crypto fs include init ipc kernel lib mm net security"

git_prepare() {  # prints the bare repository's path
  local tree=$1 deb repo=$STATE/git/$1.git
  if [ -f "$repo/refs/tags/t5" ] || git -C "$repo" rev-parse -q --verify t5 >/dev/null 2>&1; then
    printf '%s\n' "$repo"; return 0
  fi
  mkdir -p "$STATE/dl" "$STATE/git"
  local pkg=${GIT_SOURCE:-linux-source-6.1}
  deb=$(ls "$STATE/dl/${pkg}_"*_all.deb 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$deb" ]; then
    apt-cache show "$pkg" >/dev/null 2>&1 ||
      die "git: package $pkg is not in the apt sources (run apt-get update, or set GIT_SOURCE)"
    say "bench: downloading $pkg"
    (cd "$STATE/dl" && apt-get download "$pkg" >&2) || die "git: apt-get download $pkg failed"
    deb=$(ls "$STATE/dl/${pkg}_"*_all.deb | sort -V | tail -n 1)
  fi
  say "bench: building $repo from $(basename "$deb") (once)"
  rm -rf "$repo"
  if [ "$tree" = full ]; then
    python3 "$ROOT/bench/gitrepo.py" "$deb" "$repo" 5 >&2
  else
    # shellcheck disable=SC2086
    python3 "$ROOT/bench/gitrepo.py" "$deb" "$repo" 5 $GIT_CORE_DIRS >&2
  fi
  printf '%s\n' "$repo"
}

# git_mount TARGET: nbdfuse + loop device on the NBD server TARGET;
# sets GIT_LOOP
git_mount() {
  local target=$1 i
  mkdir -p "$WORK/fuse" "$WORK/mnt"
  nbdfuse "$WORK/fuse/disk" --unix "$(sock "$target")" >>"$WORK/nbdfuse.log" 2>&1 &
  PIDS[nbdfuse]=$!
  on_exit "fusermount3 -u '$WORK/fuse'"
  for ((i = 0; i < 100; i++)); do [ -e "$WORK/fuse/disk" ] && break; sleep 0.1; done
  [ -e "$WORK/fuse/disk" ] || die "git: nbdfuse did not start"
  GIT_LOOP=$(losetup -f --show --direct-io=on "$WORK/fuse/disk")
  on_exit "losetup -d '$GIT_LOOP'"
}
git_umount() {
  local i
  # The unmount can fail for a moment (busy) just after a phase: tried
  # once, the file system stayed mounted, losetup -d and fusermount3 -u
  # failed behind it, and the wait for nbdfuse below never ended.
  for ((i = 0; i < 100; i++)); do
    mountpoint -q "$WORK/mnt" || break
    umount "$WORK/mnt" 2>/dev/null && break
    sleep 0.1
  done
  losetup -d "$GIT_LOOP" 2>/dev/null || true
  # The loop device lets go of the FUSE file a moment after losetup -d
  # returns: until then the unmount fails (busy), and nbdfuse, never told
  # to exit, would be waited for for ever.
  for ((i = 0; i < 100; i++)); do
    fusermount3 -u "$WORK/fuse" 2>/dev/null && break
    sleep 0.1
  done
  [ "$i" -lt 100 ] || fusermount3 -u -z "$WORK/fuse" 2>/dev/null || true
  wait "${PIDS[nbdfuse]}" 2>/dev/null || true
  unset 'PIDS[nbdfuse]'
  _cleanups=()
}

git_phase() {  # CONFIG REP PHASE COMMAND...: time COMMAND plus sync, then drop caches
  local cfg=$1 rep=$2 phase=$3 t0 s; shift 3
  t0=$(now)
  "$@"
  sync
  s=$(elapsed "$t0")
  echo 3 >/proc/sys/vm/drop_caches
  record git phases "$cfg" "$phase" s "$rep" "$s"
  # tiercache's counters after every phase (cumulative), so that a phase's
  # origin requests and hits are the difference of two dumps
  case $cfg in tiercache-*) tcdump vol "git-$cfg-$rep-$phase" ;; esac
  GIT_TOTAL=$(awk -v a="$GIT_TOTAL" -v b="$s" 'BEGIN { print a + b }')
  case $phase in
    mkfs|checkout_t1) ;;
    *) GIT_STEADY=$(awk -v a="$GIT_STEADY" -v b="$s" 'BEGIN { print a + b }') ;;
  esac
}

git_run() {  # CONFIG REP
  local cfg=$1 rep=$2 target=vol n
  local origin=$WORK/origin.img
  rm -f "$origin" "$WORK/cache.img"
  truncate -s 2G "$origin"
  case $cfg in
    fast) fastdev origin "$origin"; target=origin ;;
    spindle) spindle origin "$origin"; target=origin ;;
    tiercache-wt|tiercache-wb)
      spindle origin "$origin"
      tcformat "$WORK/cache.img" origin "$GIT_CACHE"
      # The request stream is kept (bench/workloads/policy.sh replays it).
      mkdir -p "$OUT/traces"
      tcserve vol origin --cache "$WORK/cache.img" --trace "$OUT/traces/git-$cfg-$rep.trace" ${GIT_SERVE_EXTRA:-} \
        --mode "$([ "$cfg" = tiercache-wt ] && echo writethrough || echo writeback)" ;;
    nbdkit-cache-wt)
      spindle origin "$origin"
      nbdcache vol origin writethrough "$GIT_CACHE" ;;
    tiercache-on-fast)
      fastdev origin "$origin"
      tcformat "$WORK/cache.img" origin "$GIT_CACHE"
      tcserve vol origin --cache "$WORK/cache.img" ${GIT_SERVE_EXTRA:-} ;;
    nbdkit-cache-on-fast)
      fastdev origin "$origin"
      nbdcache vol origin writethrough "$GIT_CACHE" ;;
  esac
  git_mount "$target"
  GIT_TOTAL=0 GIT_STEADY=0
  git_phase "$cfg" "$rep" mkfs mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$GIT_LOOP"
  mount "$GIT_LOOP" "$WORK/mnt"
  on_exit "umount '$WORK/mnt'"
  git_phase "$cfg" "$rep" clone git -c core.fsync=none clone -q --no-hardlinks "$GIT_REPO" "$WORK/mnt/linux"
  for n in 1 2 3 4 5; do
    git_phase "$cfg" "$rep" "checkout_t$n" git -C "$WORK/mnt/linux" checkout -q "t$n"
  done
  record git phases "$cfg" total s "$rep" "$GIT_TOTAL"
  record git total "$cfg" seconds s "$rep" "$GIT_TOTAL"
  # The clone and the checkouts but the first: the first checkout is
  # bimodal for every configuration, the fast device alone included (6,000-
  # 9,000 reads in one run, under 2,000 in the next, the same build):
  # most likely git reading again the files its index leaves racily clean,
  # which depends on where the clone's end falls on the clock.  Without it,
  # two builds compare in fewer repetitions.
  record git total "$cfg" steady_seconds s "$rep" "$GIT_STEADY"
  case $cfg in tiercache-*)
    record git total "$cfg" hit_ratio fraction "$rep" "$(tcstatus vol volume.cache.read_hit_ratio)"
    tcdump vol "git-$cfg-$rep" ;;
  esac
  git_umount
  # A writeback set stopped holding dirty data leaves the origin recorded
  # as lacking writes only that set has, and the next run's format over
  # the same origin is refused: write it all back first (not timed).
  if [ "$cfg" = tiercache-wb ]; then
    "$TC" flush --socket "$(sock vol)" >>"$WORK/flush.log" 2>&1 || die "git: tiercache flush failed"
  fi
  [ "$target" = vol ] && stop vol
  stop origin
  # The origin's request counts and sizes (nbdkit's stats filter, written
  # when it stops): what the cache spared the spindle, or cost it.
  [ -f "$WORK/origin.stats" ] && mkdir -p "$OUT/stats" && mv "$WORK/origin.stats" "$OUT/stats/git-$cfg-$rep.stats"
  rm -f "$origin" "$WORK/cache.img"
}

wl_git() {
  local tree=${GIT_TREE:-core} rep cfg
  case $tree in core) GIT_CACHE=64M ;; full) GIT_CACHE=256M ;; *) die "GIT_TREE must be core or full" ;; esac
  # GIT_CACHE_SIZE=96M: another cache size than the tree's (a measurement
  # of how the cache size changes a result; not the benchmark's figures)
  GIT_CACHE=${GIT_CACHE_SIZE:-$GIT_CACHE}
  GIT_REPO=$(git_prepare "$tree")
  wl_begin git
  local configs=(fast spindle tiercache-wt tiercache-wb nbdkit-cache-wt tiercache-on-fast nbdkit-cache-on-fast)
  [ "$SCALE" = small ] && configs=(fast spindle tiercache-wt nbdkit-cache-wt tiercache-on-fast nbdkit-cache-on-fast)
  # GIT_CONFIGS="tiercache-wt" runs only the configurations named (the
  # ratios of the others are then missing); GIT_SERVE_EXTRA adds serve
  # options to the tiercache runs (experiments).
  if [ -n "${GIT_CONFIGS:-}" ]; then
    local known=" ${configs[*]} " want
    read -r -a configs <<<"$GIT_CONFIGS"
    for want in "${configs[@]}"; do
      [[ $known == *" $want "* ]] || die "GIT_CONFIGS: '$want' is not a configuration of this scale (choose from:$known)"
    done
  fi
  for rep in $(seq 1 "$REPS"); do
    for cfg in $(order "$rep" "${configs[@]}"); do
      git_run "$cfg" "$rep"
    done
  done
  ratio git "total: tiercache wt ÷ fast alone" total/tiercache-wt/seconds total/fast/seconds "-"
  ratio git "total: tiercache wt ÷ nbdkit cache" total/tiercache-wt/seconds total/nbdkit-cache-wt/seconds "<=1.0"
  ratio git "total: tiercache wt ÷ spindle alone" total/tiercache-wt/seconds total/spindle/seconds "<=1.0"
  if [ "$SCALE" != small ]; then
    ratio git "total: tiercache wb ÷ fast alone" total/tiercache-wb/seconds total/fast/seconds "-"
    ratio git "total: tiercache wb ÷ nbdkit cache" total/tiercache-wb/seconds total/nbdkit-cache-wt/seconds "<=1.0"
  fi
  ratio git "total: nbdkit cache ÷ fast alone" total/nbdkit-cache-wt/seconds total/fast/seconds "-"
  ratio git "clone + checkouts 2-5: tiercache wt ÷ spindle alone" total/tiercache-wt/steady_seconds total/spindle/steady_seconds "-"
  if [ "$SCALE" != small ]; then
    ratio git "clone + checkouts 2-5: tiercache wb ÷ fast alone" total/tiercache-wb/steady_seconds total/fast/steady_seconds "-"
  fi
  ratio git "clone + checkouts 2-5: cache on fast origin ÷ fast alone" total/tiercache-on-fast/steady_seconds total/fast/steady_seconds "-"
  ratio git "cache on fast origin: tiercache ÷ fast alone" total/tiercache-on-fast/seconds total/fast/seconds "<=1.1"
  ratio git "cache on fast origin: nbdkit cache ÷ fast alone" total/nbdkit-cache-on-fast/seconds total/fast/seconds "-"
  plot git total seconds "mkfs + clone + 5 checkouts, total (s, lower is better)"
  plot git phases clone "git clone (s)"
  note git "Repository: $(basename "$GIT_REPO") ($(git -C "$GIT_REPO" ls-tree -r master | wc -l) files at master, 5 tags); 2 GiB volume, caches of $GIT_CACHE, fresh for every run; times are phase plus sync. Times are seconds: lower is better, and a ratio below 1 means tiercache was faster."
  note git "Published figures (the full kernel tree, 256 MiB cache, real disks): SSD 140 s, spindle 261 s, dm-cache 241 s, EnhanceIO 361 s; on an SSD origin dm-cache 161 s, EnhanceIO 309 s."
  wl_end
}
