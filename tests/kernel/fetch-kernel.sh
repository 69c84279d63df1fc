#!/usr/bin/env bash
# Fetch a Debian bookworm kernel that has nbd.ko, without installing it, into
# a cache directory, and print the directory of that kernel on stdout.
#
#   tests/kernel/fetch-kernel.sh CACHE_DIR [MODULE...]
#
# The newest linux-image-6.1.0-N-amd64 that apt knows is downloaded with
# `apt-get download` and unpacked with `dpkg -x`; only the kernel image and
# the modules the guest needs are kept:
#
#   CACHE_DIR/PACKAGE_VERSION/vmlinuz
#   CACHE_DIR/PACKAGE_VERSION/release        the kernel release (uname -r)
#   CACHE_DIR/PACKAGE_VERSION/modules/*.ko   uncompressed
#   CACHE_DIR/PACKAGE_VERSION/modules.load   module names in load order
#
# MODULE... (default: crc32c_generic nbd ext4) plus everything they need
# (`depends=` of modinfo, and `softdep pre:` names that are modules) are kept,
# each module after the ones it depends on.
#
# Exit status 0: the directory is on stdout.  77: no kernel package can be
# downloaded (no network, or apt knows none) and none is cached; the reason is
# on stderr.  Anything else: a real error.
set -euo pipefail

cache=${1:?usage: fetch-kernel.sh CACHE_DIR [MODULE...]}
shift
# ext4 and jbd2 ask for "crypto-crc32c" (softdep pre:), an alias that the
# generic C implementation provides on any CPU, so it is listed by name.
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(crc32c_generic nbd ext4)

pattern='^linux-image-6\.1\.0-[0-9]+-amd64$'
say() { echo "fetch-kernel: $*" >&2; }

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One fetch at a time per cache (two test runs may share the checkout).
exec 9>"$cache/lock"
flock 9
rm -rf "$cache"/.fetch.*   # left by a run that was killed

newest_known() {  # "PACKAGE VERSION" of the newest one that apt can download
  local names
  names=$(apt-cache pkgnames linux-image-6.1.0- 2>/dev/null | grep -E "$pattern") || return 0
  # shellcheck disable=SC2086
  apt-cache policy $names 2>/dev/null |
    awk '/^[^ ]/ {p=$1; sub(/:$/, "", p)} /Candidate:/ && $2 != "(none)" {print p, $2}' |
    sort -V | tail -n 1
}
newest_cached() {  # the most recently used complete cache entry
  local d best=
  for d in "$cache"/linux-image-*/; do
    [ -f "$d/complete" ] || continue
    if [ -z "$best" ] || [ "$d" -nt "$best" ]; then best=$d; fi
  done
  [ -n "$best" ] && echo "${best%/}"
}
unavailable() {  # reason: use a cached kernel if there is one, else exit 77
  local d
  if d=$(newest_cached); then
    say "$1; using the cached $(basename "$d")"
    echo "$d"
    exit 0
  fi
  say "$1"
  exit 77
}

found=$(newest_known)
if [ -z "$found" ] && [ "$(id -u)" = 0 ]; then
  say "apt knows no $pattern package; running apt-get update"
  apt-get update -qq >&2 || true
  found=$(newest_known)
fi
[ -n "$found" ] || unavailable "apt knows no package matching $pattern to download (no network for apt-get update, or no bookworm apt source)"

pkg=${found% *} ver=${found#* }
key="${pkg}_${ver}"
dir="$cache/$key"
if [ -f "$dir/complete" ]; then
  touch "$dir"   # newest_cached() picks the most recently used
  echo "$dir"
  exit 0
fi

work=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "downloading $pkg $ver"
aptopts=()
# As root, apt would try to drop to the _apt user, who cannot write here.
[ "$(id -u)" = 0 ] && aptopts=(-o APT::Sandbox::User=root)
if ! (cd "$work" && apt-get download -q "${aptopts[@]}" "$pkg=$ver" >"$work/apt.log" 2>&1); then
  sed 's/^/  apt: /' "$work/apt.log" >&2
  unavailable "cannot download $pkg $ver (no network?)"
fi
deb=$(ls "$work"/*.deb)
dpkg -x "$deb" "$work/root"
rm -f "$deb"

release=$(ls "$work/root/lib/modules")
[ "$(echo "$release" | wc -l)" = 1 ] || { say "expected one module directory in $pkg: $release"; exit 1; }
moddir="$work/root/lib/modules/$release"
vmlinuz="$work/root/boot/vmlinuz-$release"
[ -f "$vmlinuz" ] || { say "$pkg has no boot/vmlinuz-$release"; exit 1; }

# Every module of the package by name ('-' and '_' are the same to the kernel).
# Some 4,000 files: no process per file (a basename for each took minutes on
# a busy machine).
declare -A path
while IFS= read -r f; do
  n=${f##*/}; n=${n%%.ko*}; path[${n//-/_}]=$f
done < <(find "$moddir" -name '*.ko' -o -name '*.ko.xz')

declare -A state   # visiting | done
order=()
resolve() {  # NAME [WHY]: NAME's dependencies first, then NAME
  local n=${1//-/_} f d deps pre
  case ${state[$n]:-} in
    done) return 0 ;;
    visiting) say "module dependency cycle at $n"; exit 1 ;;
  esac
  f=${path[$n]:-}
  [ -n "$f" ] || { say "module $n${2:+ (needed by $2)} is not in $pkg"; exit 1; }
  state[$n]=visiting
  deps=$(modinfo -F depends "$f" | tr ',' ' ')
  # "softdep: pre: a b post: c" -> a b, where those are module names; aliases
  # (crypto-crc32c) are covered by naming their provider in MODULE...
  pre=$(modinfo -F softdep "$f" | awk '{p=0; for (i=1;i<=NF;i++) { if ($i=="pre:") p=1; else if ($i=="post:") p=0; else if (p) print $i }}')
  for d in $pre; do
    d=${d//-/_}
    [ -n "${path[$d]:-}" ] && resolve "$d" "$n"
  done
  for d in $deps; do resolve "$d" "$n"; done
  state[$n]="done"
  order+=("$n")
}
for m in "${want[@]}"; do resolve "$m"; done

out="$work/out"
mkdir -p "$out/modules"
for n in "${order[@]}"; do
  f=${path[$n]}
  case $f in
    *.ko.xz) xz -dc "$f" ;;
    *) cat "$f" ;;
  esac > "$out/modules/$n.ko"
done
printf '%s\n' "${order[@]}" > "$out/modules.load"
cp "$vmlinuz" "$out/vmlinuz"
echo "$release" > "$out/release"
echo "$key" > "$out/package"
touch "$out/complete"
rm -rf "$dir"
mv "$out" "$dir"
say "cached $key (release $release; modules: ${order[*]})"

# Older kernels are of no further use; keep the cache to one entry.
for d in "$cache"/linux-image-*; do
  [ "$d" = "$dir" ] || rm -rf "$d"
done
echo "$dir"
