#!/bin/sh
# make run: serve a built-in default volume from ./state until Ctrl-C.
#   origin: state/origin.img (1 GiB, sparse)
#   socket: state/tiercache.sock   control: state/tiercache.ctl
set -eu
cd "$(dirname "$0")/.."
BIN=${TIERCACHE:-build/tiercache}
STATE=${STATE:-state}
mkdir -p "$STATE"
[ -e "$STATE/origin.img" ] || truncate -s 1G "$STATE/origin.img"
SOCK=$(pwd)/$STATE/tiercache.sock
cat <<TXT
tiercache is serving $STATE/origin.img on $SOCK
Connect from another terminal with any of:
  nbdinfo 'nbd+unix:///?socket=$SOCK'
  mkdir -p /tmp/tc && nbdfuse /tmp/tc/disk --unix $SOCK &    # then losetup /tmp/tc/disk
  nbd-client -unix $SOCK /dev/nbd0                            # with the kernel nbd driver
  qemu-img info 'nbd:unix:$SOCK'   (qemu: -drive file=nbd:unix:$SOCK,format=raw)
  $BIN status --socket $SOCK
Stop with Ctrl-C.
TXT
exec "$BIN" serve --origin "$STATE/origin.img" --socket "$SOCK" --foreground
