# policy (issue 17): every policy judged on request traces in seconds, by
# tiercache replay, without devices.  Each trace is replayed for every
# policy at 1, 5, 10 and 25 % of its footprint (distinct 4 KiB blocks read
# or written; 4 KiB cache blocks), against Belady's OPT (ref-opt, the
# floor of read misses):
#
#   default lru fifo s3fifo      the engine's policies (as serve runs them)
#   ref-lru ref-arc ref-s3fifo   reference simulators (replay only)
#   ref-sieve ref-opt
#
# Traces: the synthetic ones of bench/policy_traces.py (zipf, hot set with
# scans, loop, issue 18's write-once flood over a re-read pack, issue 17's
# mixed load: 35 % writes, unaligned), and every
# *.trace in state/bench/traces: put public block traces there, converted
# with tiercache trace-convert (libCacheSim's samples, MSR Cambridge...),
# or traces captured with serve --trace; none can be downloaded here.
#
# Figures: the read miss ratio by request of each policy (the same in every
# repetition: replay is deterministic) and replay's speed in requests per
# second of CPU time (replay --json's requests_per_second), the default
# policy's against the reference LRU's and against 1M requests/s; the LRU
# miss-ratio curve of each trace (SHARDS, rate 0.01) as CSV and PNG in
# the results directory.

POLICY_SIZES="1 5 10 25"
POLICY_ENGINE="default lru fifo s3fifo"
POLICY_REF="ref-lru ref-arc ref-s3fifo ref-sieve ref-opt"

wl_policy() {
  wl_begin policy
  local traces=() t
  mapfile -t traces < <(python3 bench/policy_traces.py "$STATE/policy" "$SCALE")
  for t in "$STATE"/traces/*.trace; do [ -f "$t" ] && traces+=("$t"); done
  local policies=$POLICY_REF
  # The engine's policies when replay runs them (the engine replay is
  # built); else the reference ones alone, said so.
  if "$TC" replay --trace "${traces[0]}" --block-size 4K --cache-size 16M --policy default \
       >/dev/null 2>"$WORK/engine-check.txt"; then
    policies="$POLICY_ENGINE $POLICY_REF"
  else
    say "  engine replay unavailable ($(tail -n 1 "$WORK/engine-check.txt")): reference policies only"
    note policy "Engine policies left out: $(tail -n 1 "$WORK/engine-check.txt" | tr ',' ';')"
  fi
  local rep name fp sizes pct p
  for t in "${traces[@]}"; do
    name=$(basename "$t" .trace)
    fp=$("$TC" trace-info --json "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["footprint_bytes"])')
    sizes=""
    for pct in $POLICY_SIZES; do
      sizes+="${sizes:+,}$(( (fp * pct / 100 + 4095) / 4096 * 4096 ))"
    done
    say "  $name: footprint $(hsize "$fp"), caches of $sizes bytes"
    for rep in $(seq 1 "$REPS"); do
      for p in $(order "$rep" $policies); do
        # The engine needs a cache device of 1 MiB of superblocks and a
        # few segments: sizes below that are left out for its policies.
        local psizes="" sz
        for sz in ${sizes//,/ }; do
          case $p in ref-*) ;; *) [ "$sz" -lt $((8 << 20)) ] && continue ;; esac
          psizes+="${psizes:+,}$sz"
        done
        [ -n "$psizes" ] || continue
        "$TC" replay --trace "$t" --block-size 4K --cache-size "$psizes" --policy "$p" --json \
          >"$WORK/$name-$p-$rep.json" || die "policy: replay of $name with $p failed"
        python3 - "$WORK/$name-$p-$rep.json" "$fp" "$name" <<'PYEOF' | while read -r test cfg metric unit value; do
import json, sys
res, fp, name = json.load(open(sys.argv[1]))["results"], int(sys.argv[2]), sys.argv[3]
for r in res:
    pct = round(100 * r["cache_bytes"] / fp)
    print(f"{name}@{pct}% {r['policy']} miss_ratio fraction {r['miss_ratio']:.4f}")
    # Per second of CPU time (replay's own figure): the machine's other
    # load does not lower it as it lowers the rate by wall time.
    rate = r.get("requests_per_second") or r["requests"] / max(r["seconds"], 1e-9)
    print(f"{name}@{pct}% {r['policy']} speed requests/s {rate:.0f}")
PYEOF
          record policy "$test" "$cfg" "$metric" "$unit" "$rep" "$value"
        done
      done
    done
    "$TC" replay --trace "$t" --block-size 4K --mrc --max-size "$(( fp / 2 ))" --points 20 \
      --csv "$OUT/policy-$name-mrc.csv" >"$WORK/$name-mrc.txt" || die "policy: MRC of $name failed"
    say "  $name: LRU curve $(grep '^knee' "$WORK/$name-mrc.txt")"
    note policy "$name: LRU $(grep '^knee' "$WORK/$name-mrc.txt" | tr ',' ';'); curve in policy-$name-mrc.csv"
    plot policy "$name@10%" miss_ratio "$name at 10 % of its footprint: read miss ratio"
    case " $policies " in *" default "*)
      ratio policy "$name@10%: default ÷ OPT miss ratio" "$name@10%/default/miss_ratio" \
        "$name@10%/ref-opt/miss_ratio" "-"
      # Replay's speed: the engine's default policy against the reference
      # LRU simulator of the same repetition (the machine's load is much
      # the same for both), and in requests per second of CPU time against
      # issue 17's aim.
      ratio policy "$name@10%: default ÷ ref-lru replay speed" "$name@10%/default/speed" \
        "$name@10%/ref-lru/speed" "-"
      ratio policy "$name@10%: default replay speed (requests/s)" "$name@10%/default/speed" \
        1 ">=1000000" ;;
    esac
    ratio policy "$name@10%: ref-lru ÷ OPT miss ratio" "$name@10%/ref-lru/miss_ratio" \
      "$name@10%/ref-opt/miss_ratio" "-"
  done
  note policy "4 KiB blocks; sizes are 1/5/10/25 % of each trace's footprint (the engine's policies only from 8 MiB: a cache device holds 1 MiB of superblocks and whole segments); miss ratio by request (a read hits when all its blocks were cached)."
  wl_end
}
