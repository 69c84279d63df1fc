#!/usr/bin/env bash
# Build the initramfs of the kernel NBD client test, or reuse a cached one.
#
#   tests/kernel/mkinitramfs.sh KERNEL_DIR TIERCACHE INIT
#
# KERNEL_DIR is what tests/kernel/fetch-kernel.sh printed; INIT becomes
# /init.  The archive (uncompressed newc cpio: the guest unpacks it faster
# than it could decompress it) holds busybox-static, the modules of
# KERNEL_DIR/modules.load, nbd-client, mkfs.ext4, e2fsck, TIERCACHE, every
# shared library those need (their ldd closure and the dynamic loader) and
# INIT.  It is KERNEL_DIR/initrd-KEY.cpio, KEY covering the name, size and
# modification time of every input file, so a rebuilt binary or a changed
# script gives a new archive; the newest few are kept.  Prints the archive's path.
set -euo pipefail

kdir=${1:?usage: mkinitramfs.sh KERNEL_DIR TIERCACHE INIT}
tiercache=${2:?usage: mkinitramfs.sh KERNEL_DIR TIERCACHE INIT}
init=${3:?usage: mkinitramfs.sh KERNEL_DIR TIERCACHE INIT}
say() { echo "mkinitramfs: $*" >&2; }
die() { say "$*"; exit 1; }

[ -f "$kdir/complete" ] || die "$kdir is not a kernel fetched by fetch-kernel.sh"
tool() {  # the host's copy of a program, or an error naming its package
  local p
  p=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v "$1") || die "$1 not found (install $2; scripts/deps.sh test)"
  readlink -f "$p"
}
busybox=$(tool busybox busybox-static)
! ldd "$busybox" >/dev/null 2>&1 || die "$busybox is not static (install busybox-static)"

# Destination in the archive <TAB> source on the host.
files=()
add() { files+=("$1"$'\t'"$2"); }
add /bin/busybox "$busybox"
add /usr/sbin/nbd-client "$(tool nbd-client nbd-client)"
add /usr/sbin/mkfs.ext4 "$(tool mkfs.ext4 e2fsprogs)"
add /usr/sbin/e2fsck "$(tool e2fsck e2fsprogs)"
add /usr/bin/tiercache "$(readlink -f "$tiercache")"
[ -f /etc/mke2fs.conf ] && add /etc/mke2fs.conf /etc/mke2fs.conf
add /init "$init"
while read -r m; do
  add "/modules/$m.ko" "$kdir/modules/$m.ko"
done < "$kdir/modules.load"
add /modules/load "$kdir/modules.load"

# The shared libraries: ldd lists the whole closure, loader included.
declare -A seen
for entry in "${files[@]}"; do
  dst=${entry%%$'\t'*} src=${entry#*$'\t'}
  case $dst in /usr/sbin/*|/usr/bin/*) ;; *) continue ;; esac
  out=$(ldd "$src") || die "ldd $src failed"
  if grep -q 'not found' <<<"$out"; then die "$src: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ')"; fi
  while read -r lib; do
    if [ -n "$lib" ]; then seen[$lib]=1; fi
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done
libs=("${!seen[@]}")
mapfile -t real < <(readlink -f "${libs[@]}")
for i in "${!libs[@]}"; do add "${libs[$i]}" "${real[$i]}"; done

# One build at a time per kernel directory; the pruning below must not race
# with another run's build.
exec 9>"$kdir/.lock"
flock 9
rm -rf "$kdir"/.stage.*   # left by a run that was killed

# The key: this script, and each input's name, size and modification time
# (as make judges files; hashing 50 MiB of contents every run costs more).
key=$( {
  sha256sum < "$0"
  srcs=()
  for entry in "${files[@]}"; do srcs+=("${entry#*$'\t'}"); done
  paste <(printf '%s\n' "${files[@]}") <(stat -L -c '%s %.9Y' "${srcs[@]}") | LC_ALL=C sort
} | sha256sum | cut -c1-16)
out="$kdir/initrd-$key.cpio"
if [ -f "$out" ]; then
  touch "$out"
  echo "$out"
  exit 0
fi

stage=$(mktemp -d "$kdir/.stage.XXXXXX")
trap 'rm -rf "$stage" "$stage.cpio"' EXIT
mkdir -p "$stage"/{bin,dev,proc,sys,run,tmp,mnt,etc}
for entry in "${files[@]}"; do
  dst=${entry%%$'\t'*} src=${entry#*$'\t'}
  mkdir -p "$stage$(dirname "$dst")"
  cp -L "$src" "$stage$dst"
done
chmod 755 "$stage/init"
# /init links the busybox applets into /bin, so that the real e2fsprogs and
# nbd-client are the only ones in /usr/sbin, and there is no /sbin/modprobe
# for the kernel to call.
ln -s busybox "$stage/bin/sh"
ln -s /proc/mounts "$stage/etc/mtab"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
   cpio -o -H newc -R 0:0 --reproducible --quiet) > "$stage.cpio"
mv "$stage.cpio" "$out"
say "built $(basename "$out") ($(du -m "$out" | cut -f1) MiB)"

# Keep the three most recently used archives.
# shellcheck disable=SC2012
ls -1t "$kdir"/initrd-*.cpio | tail -n +4 | xargs -r rm -f
echo "$out"
