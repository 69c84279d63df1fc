#!/bin/sh
# Install the Debian packages tiercache needs, only those missing.
#   scripts/deps.sh build   compiler and libraries
#   scripts/deps.sh test    + the real NBD clients, peers and tools the tests drive
#   scripts/deps.sh bench   + what the benchmarks need (gnuplot, kernel sources)
set -eu
what=${1:-build}

pkgs="gcc make pkg-config liburing-dev libnbd-dev libgnutls28-dev"
case $what in
  test|bench)
    pkgs="$pkgs libnbd-bin python3-libnbd qemu-utils fio nbdkit fuse3 e2fsprogs
          util-linux nbd-client busybox-static qemu-system-x86 cpio xz-utils
          clang valgrind kmod gnutls-bin"
    ;;
esac
case $what in
  bench) pkgs="$pkgs gnuplot-nox git" ;;
esac

missing=
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

echo "deps: installing:$missing" >&2
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "deps: not root; run: apt-get update && apt-get install -y$missing" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
