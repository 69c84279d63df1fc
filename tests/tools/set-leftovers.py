#!/usr/bin/python3
"""What a test left outside its directory for a cache set of its own: files
in the state files' default place, lock files in the run directory.

usage: set-leftovers.py snapshot DIR > LIST
       set-leftovers.py check TMP DIR LIST
       set-leftovers.py unlock TMP DIR RUNDIR

A set whose device 0 is not a file (a loop device, a symlink to one) keeps
its state file and sequence record in DIR (/var/lib/tiercache) unless
serve is given --state-file, and nothing removes them; nor does anything
remove a stop record kept there.  tests/run writes the names in DIR to
LIST before a test ("snapshot") and afterwards ("check") prints one line
per name in DIR that is new since LIST and holds the UUID of a set the
test's files in TMP name (a cache device's superblock, a state file or
sequence record kept there, an origin or stop record).  Tests run side by
side make their own sets (format draws a random UUID), so another test's
files are never counted.  Exit status 0 when there are none, 3 otherwise.
A set the test formatted over later and kept nothing of in TMP is not
seen.

"unlock" removes the lock files a daemon or command of the test that was
killed left in RUNDIR (/run/tiercache; io/claim.c): set-UUID.lock of the
test's sets, and state-CRC.lock of the state files they had in TMP (a
file there, FILE.tcstate beside a device, or the one beside a sequence
record, *.tcseq) or in DIR; and every origin-HASH.lock no one holds (the
origins' locks: a test's origin is not always known from its files -- an
NBD export served without a cache leaves none -- and a lock file no one
holds is a killed holder's, whoever's).  Each only when no one holds it: locked first,
as its holder removes it (claim_set_release()), so a process opening it
meanwhile finds the name gone and makes a new one.  Prints the files
removed.
"""
import fcntl
import os
import re
import sys

# CRC-32C as util/crc32c.c computes it: the fuzz seeds' copy.
sys.dont_write_bytecode = True     # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz"))
from seeds import crc32c  # noqa: E402

# Files that name their set at byte 16 (src/format/ondisk.h): a cache
# device's superblock, a state file, a sequence record.
MAGICS = {m.to_bytes(8, "little") for m in (0x0142534352454954,     # "TIERCSB\1"
                                            0x0145544154534354,     # "TCSTATE\1"
                                            0x0143525145534354)}    # "TCSEQRC\1"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def names(d):
    try:
        return set(os.listdir(d))
    except OSError:         # none there, or not this user's to read
        return set()


def files(top):
    """The regular files under top (no symlinks)."""
    for root, dirs, fs in os.walk(top):
        for f in fs:
            p = os.path.join(root, f)
            if not os.path.islink(p) and os.path.isfile(p):
                yield p


def set_uuids(top):
    """The sets the files under top name: cache devices, state files and
    sequence records (byte 16), stop and origin records (io/originrec.c:
    the name, the "set" line)."""
    found = set()
    for p in files(top):
        found.update(UUID_RE.findall(os.path.basename(p)))
        try:
            with open(p, "rb") as fh:
                head = fh.read(4096 if p.endswith(".tcorigin") else 32)
        except OSError:
            continue
        if len(head) >= 32 and head[:8] in MAGICS:
            u = head[16:32].hex()
            found.add(f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}")
        elif p.endswith(".tcorigin"):
            found.update(re.findall(rb"^set (" + UUID_RE.pattern.encode() + rb")$",
                                    head, re.M))
    return {u.decode() if isinstance(u, bytes) else u for u in found}


def remove_unheld(path):
    """Remove the lock file at path if no one holds it; True if removed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # conflicts with OFD locks
        st, cur = os.fstat(fd), os.stat(path)
        if (st.st_dev, st.st_ino) != (cur.st_dev, cur.st_ino):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def unlock(tmp, d, rundir):
    uuids = set_uuids(tmp)
    locks = {f"set-{u}.lock" for u in uuids}
    states = {os.path.join(d, u + ".tcstate") for u in uuids}
    for p in files(tmp):
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        states |= {p, p + ".tcstate"}
        if p.endswith(".tcseq"):
            states |= {p[:-len(".tcseq")], p[:-len(".tcseq")] + ".tcstate"}
    locks |= {"state-%08x.lock" % crc32c(s.encode()) for s in states}
    locks |= {n for n in names(rundir) if n.startswith("origin-") and n.endswith(".lock")}
    for n in sorted(locks):
        p = os.path.join(rundir, n)
        if os.path.lexists(p) and remove_unheld(p):
            print(p)
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "snapshot":
        for n in sorted(names(argv[2])):
            print(n)
        return 0
    if len(argv) == 5 and argv[1] == "unlock":
        return unlock(argv[2], argv[3], argv[4])
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
    return 3 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
