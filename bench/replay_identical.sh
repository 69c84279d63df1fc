#!/usr/bin/env bash
# bench/replay_identical.sh OLD NEW [DIR]: do two tiercache binaries replay
# alike?  Every engine policy (default, lru, fifo, s3fifo) at two cache
# sizes, 4 KiB blocks, over the synthetic traces of bench/policy_traces.py
# (zipf, hotscan, loop, writeonce, mixed; 1M requests each, made once in
# DIR, default /tmp/tc-replay-identical), plus the mixed trace at the
# default 64 KiB block: 48 results.  Each replay's --json output, less its
# timings (seconds, cpu_seconds, requests_per_second), must be byte for
# byte the same.  For changes that must not change a decision (speed-ups of
# replay or of the engine code it runs); exits 1 on any difference.
set -euo pipefail
old=$1 new=$2 dir=${3:-/tmp/tc-replay-identical}
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t traces < <(python3 "$here/policy_traces.py" "$dir" default)
strip() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
def walk(x):
    if isinstance(x, dict):
        for k in ("seconds", "cpu_seconds", "requests_per_second"):
            x.pop(k, None)
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
walk(d)
json.dump(d, sys.stdout, indent=1, sort_keys=True)
print()'
}
fail=0 n=0
run() {  # NAME TRACE ARGS...
  local name=$1 t=$2; shift 2
  "$old" replay --trace "$t" --policy default,lru,fifo,s3fifo --json "$@" 2>/dev/null | strip >"$dir/$name.old"
  "$new" replay --trace "$t" --policy default,lru,fifo,s3fifo --json "$@" 2>/dev/null | strip >"$dir/$name.new"
  local k
  k=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["results"]))' "$dir/$name.new")
  n=$((n + k))
  if cmp -s "$dir/$name.old" "$dir/$name.new"; then
    echo "same       $name ($k results)"
  else
    echo "DIFFERENT  $name: diff $dir/$name.old $dir/$name.new"
    fail=1
  fi
}
for t in "${traces[@]}"; do
  run "$(basename "$t" .trace)" "$t" --block-size 4K --cache-size 16M,64M
done
run mixed-64K "$dir/mixed-1000000.trace" --cache-size 16M,64M
echo "$n results compared"
exit $fail
