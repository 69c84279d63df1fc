#!/usr/bin/python3
"""The files a test left in the state files' default place, named after a
cache set of its own.

usage: set-leftovers.py snapshot DIR > LIST
       set-leftovers.py check TMP DIR LIST

A set whose device 0 is not a file (a loop device, a symlink to one) keeps
its state file and sequence record in DIR (/var/lib/tiercache) unless
serve is given --state-file, and nothing removes them; nor does anything
remove a stop record kept there.  tests/run writes the names in DIR to
LIST before a test ("snapshot") and afterwards ("check") prints one line
per name in DIR that is new since LIST and holds the set UUID of a cache
device superblock among the test's files in TMP.  Tests run side by side
make their own sets (format draws a random UUID), so another test's files
are never counted.  Exit status 0 when there are none, 1 otherwise.
"""
import os
import re
import sys

SB_MAGIC = (0x0142534352454954).to_bytes(8, "little")   # "TIERCSB\1", src/format/ondisk.h
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def names(d):
    try:
        return set(os.listdir(d))
    except FileNotFoundError:
        return set()


def set_uuids(top):
    """The set UUIDs of the superblocks at offset 0 of the files under top."""
    found = set()
    for root, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                with open(p, "rb") as fh:
                    head = fh.read(32)
            except OSError:
                continue
            if len(head) == 32 and head[:8] == SB_MAGIC:
                u = head[16:32].hex()
                found.add(f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}")
    return found


def main(argv):
    if len(argv) == 3 and argv[1] == "snapshot":
        for n in sorted(names(argv[2])):
            print(n)
        return 0
    if len(argv) != 5 or argv[1] != "check":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    tmp, d, listing = argv[2], argv[3], argv[4]
    with open(listing) as fh:
        before = set(fh.read().split("\n"))
    mine = set_uuids(tmp)
    left = []
    for n in sorted(names(d) - before):
        m = UUID_RE.search(n)
        if m and m.group(0) in mine:
            left.append(os.path.join(d, n))
    for p in left:
        print(p)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
