#!/bin/sh
# make run: serve a built-in default volume from ./state until Ctrl-C.
#   origin: state/origin.img (1 GiB, sparse)
#   cache:  state/cache.img (256 MiB), formatted on first use
#   socket: state/tiercache.sock   control: state/tiercache.ctl
set -eu
cd "$(dirname "$0")/.."
BIN=${TIERCACHE:-build/tiercache}
STATE=${STATE:-state}
MODE=${MODE:-writethrough}
mkdir -p "$STATE"
[ -e "$STATE/origin.img" ] || truncate -s 1G "$STATE/origin.img"
if [ ! -e "$STATE/cache.img" ]; then
  truncate -s 256M "$STATE/cache.img"
  "$BIN" format --cache "$STATE/cache.img" --origin "$STATE/origin.img"
fi
SOCK=$(pwd)/$STATE/tiercache.sock
cat <<TXT
tiercache is serving $STATE/origin.img, cached on $STATE/cache.img ($MODE),
on $SOCK.  Connect from another terminal with any of:
  nbdinfo 'nbd+unix:///?socket=$SOCK'
  mkdir -p /tmp/tc && nbdfuse /tmp/tc/disk --unix $SOCK &    # then losetup /tmp/tc/disk
  nbd-client -unix $SOCK /dev/nbd0 -b 4096                    # with the kernel nbd driver
  qemu-img info 'nbd:unix:$SOCK'   (qemu: -drive file=nbd:unix:$SOCK,format=raw)
  $BIN status --socket $SOCK
Stop with Ctrl-C.
TXT
exec "$BIN" serve --origin "$STATE/origin.img" --cache "$STATE/cache.img" --mode "$MODE" \
    --socket "$SOCK" --foreground
