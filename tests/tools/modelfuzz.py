#!/usr/bin/python3
"""A model-checked random run of one daemon against its real clients:
writes (FUA too), write-zeroes (NO_HOLE, FAST_ZERO, FUA), trims, flushes
and prefetches from two connections, overlapping writes in flight on both,
reads racing writes, live mode switches, tiercache flush, detach and
attach (also with client I/O under way, and a kill in the middle), kill -9
and SIGTERM with restarts in a random mode.  Every 512-byte sector names
itself (offset, generation); the model keeps, per sector, the generations
a read may return now and after a crash.

usage: modelfuzz.py TIERCACHE DIR SEED STEPS

DIR must exist (the devices, ops.log and daemon.log are made there).  The
run passes when every read returned what the model allows, every request
the daemon answered succeeded (but for a FAST_ZERO it cannot do fast),
every SIGTERM stopped it with status 0, it never exited by itself and its
log has no sanitizer report or failed assertion.  Otherwise it prints
"modelfuzz FAIL: seed S step N (the step's operation): what was expected
and what was read", a line to replay the run, the last operations
(DIR/ops.log has them all) and the tail of DIR/daemon.log, and exits 1.

What a read may return: a write acknowledged sets its sectors to its
generation; two overlapping writes in flight together leave either one in
each sector.  After a kill -9 (and a power loss) a sector may read any
generation acknowledged since its last flush (or FUA write, or stop with
status 0), or the flushed one, and no other; a read pins what the sector
holds until the next write.  A trimmed sector's contents are unspecified
until it is written again (the NBD protocol; tiercache(8)): it may read
any generation it could hold at the trim, also after a crash, or zeroes,
in any order, and reads do not pin it; a crash that loses the writes
after a trim leaves it trimmed again.

Replaying a seed: the same SEED, STEPS and FZ_ variables make the same
requests in the same order (the choices the daemon's timing could steer
use a generator of their own), but the daemon's timing varies, so a failure
that depends on a race may need a few runs:
    tests/tools/modelfuzz.py build/tiercache "$(mktemp -d)" SEED STEPS
(with TIERCACHE_ORIGIN_RECORDS set as tests/run sets it, or left to the
default DIR/rec).  tests/crash/modelfuzz.test runs a few fixed seeds.

environment:
  FZ_POWER=1   origin and cache devices through testdev undo logs, applied
               at each kill: a power loss that keeps nothing unflushed
  FZ_POWER=2   as 1, but each device keeps a random part of its unflushed
               writes: the first K of them, or all but one (a volatile
               write cache keeps no order between flushes)
  FZ_POWER=3   as 2, and half the time the first write not kept is torn
               after its chunk header when it is a chunk (tests/tools/undo
               --torn): the header reached the device, the data did not
  FZ_CKPT=1    running checkpoints, small and frequent; FZ_CKPT=auto or
               a byte count: TIERCACHE_TEST_CKPT_BYTES as given
  FZ_MODES=a,b the modes a start or a mode switch picks from (default all
               four; writeback alone keeps the cleaner and writeback busy)
  FZ_COMMIT_MS the daemon's commit interval (TIERCACHE_TEST_COMMIT_MS)
  FZ_SEQREC_MS the sequence record's period while serving, and so the
               set's stop record's (TIERCACHE_TEST_SEQREC_PERIOD_MS): the
               runs between kills are short for the 2 s default
  FZ_CACHES=a,b  cache device files (default c0.img)
  FZ_CSIZE, FZ_SIZE  cache device and origin sizes (12 MiB, 8 MiB; a
               device of 9 MiB, 8 segments, is the smallest format takes)
  FZ_BS        block size (format --block-size)
  FZ_NBDKIT=DELAY  the origin behind nbdkit's delay filter (rdelay=DELAY);
               not with FZ_POWER or FZ_ORIGFAIL (testdev wraps files)
  FZ_NOFAST=1  no FAST_ZERO
  FZ_DEVFAIL=1 cache devices through testdev, and now and then (a
               generator of its own: the same requests as without) the
               next write to one of them fails with EIO, which fails the
               device (rescue, or drain to the origin); from the first such
               failure on, reads and FLUSH may fail with EIO (lost data),
               so may a write or write-zeroes covering only part of a
               4 KiB sector (it then changes nothing; unless racing
               another write, a 4 KiB sector it covers in part must read
               EIO: lost), a SIGTERM stop may exit 1 (then taken as a
               crash), but no read may return data the model does not
               allow
  FZ_DEVFAIL=enospc  the cache devices' file system filling up: now and
               then (FZ_DEVFAIL's generator) one device's writes, or every
               device's (one file system under them all), fail with
               ENOSPC, every write (chunks, headers, superblocks, marks)
               while the failure lasts, which is 1 to 60 steps (the run
               then makes room), restarts included: a start on a full
               file system may exit (not 0) before it serves; the run
               then makes room and starts again.  The model is
               FZ_DEVFAIL's: reads, FLUSH and partial writes of lost
               data may fail with EIO, a SIGTERM stop may exit 1; a
               client's request never fails with ENOSPC (a full cache is
               the device's failure, not the volume's), and no read may
               return data the model does not allow
  FZ_DEVFAIL=fullfs  the cache device files sparse (format --allow-sparse)
               on a tmpfs of their own (DIR/fs, mounted by the run:
               root), FZ_FSSIZE bytes (default three quarters of the
               files' sizes, so a start never allocates them whole): the
               log's writes into holes fail with ENOSPC once the file
               system is full -- as the log grows, or at once when now
               and then (FZ_DEVFAIL's generator) a filler file takes the
               room left, for 1 to 60 steps; the run then removes it, and
               a third of the time grows the file system by 4 MiB.  The
               state files and sequence records are on it too.
               FZ_DEVFAIL=1's failures of one write with EIO come as
               well (its generator draws first, each step).  A start
               may exit (not 0) on the full file system, twice in a row
               at most: the run removes the filler, or (none) grows the
               file system by 4 MiB, and starts again.  The model
               is FZ_DEVFAIL=enospc's, from the first step on; not with
               FZ_POWER (undoing a write into a hole needs room)
  FZ_ORIGFAIL=1  the origin through testdev, and now and then (a
               generator of its own) its next 1 to 20 writes (zeroes and
               trims too) fail with EIO: the origin's disk refusing
               writes for a moment.  From the first such failure on, a
               client's write, write-zeroes or trim may fail with EIO, and
               its sectors then read their older data or the new (either,
               also after a crash), so may a FLUSH (then nothing is taken
               as durable), and a SIGTERM stop may exit 1 (taken as a
               crash); every read must still succeed and return data the
               model allows.  FZ_ORIGFAIL=enospc: the writes fail with
               ENOSPC instead (the origin's file system full), and so may
               the client's requests
  FZ_EXTRA     more serve options ("--dirty-copies 2" with two FZ_CACHES)
  FZ_HANG      seconds without progress taken as a hang (default 180)
"""
import contextlib, io, os, re, sys, random, runpy, subprocess, signal, threading, time
HERE = os.path.dirname(os.path.abspath(__file__))
UNDO = f"{HERE}/undo"
sys.path.insert(0, os.path.dirname(HERE))
import nbd
from tclib import tagged_sector, tagged_gen, connect_when_up

if len(sys.argv) != 5:
    sys.exit(__doc__.split("\n\n")[1])
ARGV0, BIN, D, SEED, STEPS = sys.argv[0], sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
EXTRA = os.environ.get("FZ_EXTRA", "").split()
FZENV = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("FZ_"))
rng = random.Random(SEED)
# Choices whose range depends on what the daemon did (how many writes a
# device holds unflushed at a power loss): a generator of their own, so
# that rng makes the same requests in every replay of a seed.
prng = random.Random(SEED * 7919 + 1)
MAGIC = b"TCHUNT\x00\x01"
S = 512
SIZE = int(os.environ.get("FZ_SIZE", 8 << 20))
CSIZE = int(os.environ.get("FZ_CSIZE", 12 << 20))
NS = SIZE // S
POWER = int(os.environ.get("FZ_POWER") or 0)
HANG = float(os.environ.get("FZ_HANG") or 180)
DEVFAIL = bool(os.environ.get("FZ_DEVFAIL"))
DEV_ENOSPC = os.environ.get("FZ_DEVFAIL") == "enospc"
FULLFS = os.environ.get("FZ_DEVFAIL") == "fullfs"
frng = random.Random(SEED * 104729 + 3)   # FZ_DEVFAIL's choices
devfailed = [False]                       # a device failure was armed
# FZ_DEVFAIL=enospc: the devices whose file system is full now (their
# full{i} file exists), and the steps left until the run makes room.
full_devs, full_left = set(), [0]
ORIGFAIL = bool(os.environ.get("FZ_ORIGFAIL"))
ORIG_ERRNO = 28 if os.environ.get("FZ_ORIGFAIL") == "enospc" else 5
ORIG_MAY = (5, ORIG_ERRNO)                # the errors it lets clients see
orng = random.Random(SEED * 15485863 + 5)  # FZ_ORIGFAIL's choices
origfailed = [False]                      # an origin write failure was armed
env = dict(os.environ)
env.setdefault("TIERCACHE_ORIGIN_RECORDS", f"{D}/rec")
os.makedirs(env["TIERCACHE_ORIGIN_RECORDS"], exist_ok=True)
if os.environ.get("FZ_COMMIT_MS"):
    env["TIERCACHE_TEST_COMMIT_MS"] = os.environ["FZ_COMMIT_MS"]
if os.environ.get("FZ_SEQREC_MS"):
    env["TIERCACHE_TEST_SEQREC_PERIOD_MS"] = os.environ["FZ_SEQREC_MS"]
ORIGIN = f"{D}/origin.img"
ORIGIN_FILE = ORIGIN
CACHES = os.environ.get("FZ_CACHES", "c0.img").split(",")
CDIR = D
FS = f"{D}/fs"
fs_size = [int(os.environ.get("FZ_FSSIZE") or len(CACHES) * CSIZE * 3 // 4 >> 20 << 20)]
if FULLFS:
    if POWER:
        sys.exit("modelfuzz: FZ_DEVFAIL=fullfs does not go with FZ_POWER")
    os.makedirs(FS, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={fs_size[0]}", "tmpfs", FS], check=True)
    import atexit
    atexit.register(lambda: subprocess.run(["umount", "-l", FS]))
    CDIR = FS
    devfailed[0] = True
CACHE = ",".join(f"{CDIR}/{c}" for c in CACHES)
for p in [ORIGIN] + CACHE.split(","):
    with open(p, "wb") as f:
        f.truncate(SIZE if p == ORIGIN else CSIZE)
LOG = open(f"{D}/ops.log", "w")
DLOG = f"{D}/daemon.log"
step, op = -1, "setup"
progress = [time.monotonic()]
d = None                               # the daemon serving now


T0 = time.monotonic()


def log(*a):
    print(f"{time.monotonic() - T0:8.3f} {step:4d}", *a, file=LOG, flush=True)


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def fail(what):
    """The end of a failed run: what went wrong, where, how to replay it."""
    # The verdict last: a runner shows the tail of the output.
    print(f"--- the tail of {DLOG}:\n{tail(DLOG, 30)}"
          f"--- the last operations ({D}/ops.log):\n{tail(f'{D}/ops.log', 12)}", end="")
    print(f"modelfuzz FAIL: seed {SEED} step {step} of {STEPS} ({op}): {what}")
    print(f"replay: {FZENV} {ARGV0} TIERCACHE \"$(mktemp -d)\" {SEED} {STEPS}", flush=True)
    if d is not None and d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()
    if FULLFS:
        subprocess.run(["umount", "-l", FS])
    os._exit(1)


def watchdog():
    """Bounds against a hang only: a step that makes no progress for HANG
    seconds (the daemon not answering) ends the run."""
    while True:
        time.sleep(1)
        if time.monotonic() - progress[0] > HANG:
            fail(f"no progress for {HANG:.0f} s: the daemon does not answer")


threading.Thread(target=watchdog, daemon=True).start()

NBDKIT = os.environ.get("FZ_NBDKIT")
if NBDKIT:
    if POWER:
        sys.exit("modelfuzz: FZ_POWER wants the origin as a file, not behind FZ_NBDKIT")
    if ORIGFAIL:
        sys.exit("modelfuzz: FZ_ORIGFAIL wants the origin as a file (testdev), not behind FZ_NBDKIT")
    ksock = f"{D}/k.sock"
    kp = subprocess.Popen(["nbdkit", "-f", "-U", ksock, "--filter=delay", "file", ORIGIN,
                           "rdelay=" + NBDKIT, "wdelay=2ms"])
    import atexit
    atexit.register(lambda: kp.kill())
    while not os.path.exists(ksock):
        time.sleep(0.1)
    ORIGIN = f"nbd+unix:///?socket={ksock}"
fmt = [BIN, "format", "--cache", CACHE, "--origin", ORIGIN, "--segment-size", "1M"]
if FULLFS:
    fmt.append("--allow-sparse")
if os.environ.get("FZ_BS"):
    fmt += ["--block-size", os.environ["FZ_BS"]]
r = subprocess.run(fmt, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
if r.returncode != 0:
    fail(f"format exited {r.returncode}: {r.stderr.strip()}")

ZERO = 0  # gen 0 = zeroes
cur = [{ZERO} for _ in range(NS)]      # allowed now
crash = [{ZERO} for _ in range(NS)]    # allowed after a crash
# A trimmed sector reads unspecified contents until it is written again:
# its contents at the trim (any version a crash could have left then) or
# zeroes, in any order from read to read (tiercache(8)).  ctrim[s] is the
# set a trimmed sector may read now, or None if it is not trimmed: its
# reads do not pin it.  crash_trim[s] is the same after a crash: a write
# after the trim that the crash loses leaves the sector trimmed again.
ctrim = [None] * NS
crash_trim = [None] * NS
gen = [1]
gen_step = {ZERO: "never written"}     # generation -> the step that wrote it
# FZ_DEVFAIL=enospc and fullfs: a full file system fails the devices'
# writes, never their reads, so a read may fail with EIO only where data
# could be lost: in a 4 KiB sector holding a write no FLUSH (or FUA, or
# stop with status 0) has acknowledged yet -- unfl[s] --, or one whose
# write was unflushed at a FLUSH that failed or at a crash (sticky[s]:
# lost data reads EIO until written again; kept for good here).
STRICT = DEV_ENOSPC or FULLFS
unfl = [False] * NS
sticky = [False] * NS


def new_gen(what):
    g = gen[0]
    gen[0] += 1
    gen_step[g] = f"step {step} {what}"
    return g


def sec_data(s, g):
    return bytes(S) if g == ZERO else tagged_sector(MAGIC, s * S, g, S)


def classify(s, data):
    if data == bytes(S):
        return ZERO
    g = tagged_gen(MAGIC, s * S, data)
    return -1 if g is None else g


def describe_gens(gs):
    return ", ".join(f"gen {g} ({gen_step.get(g, '?')})" if g != ZERO else "zeroes"
                     for g in sorted(gs))


def describe_data(s, data):
    """What a sector read that the model did not expect holds."""
    g = classify(s, data)
    if g == ZERO:
        return "zeroes"
    if g >= 0:
        return f"gen {g} ({gen_step.get(g, '?')})"
    if data[:8] == MAGIC:
        o = int.from_bytes(data[8:16], "little")
        gg = int.from_bytes(data[16:24], "little")
        if o != s * S:
            return f"the data of another sector: {o // S} (byte {o}) gen {gg} ({gen_step.get(gg, '?')})"
        return f"gen {gg} damaged"
    return f"unknown data {bytes(data[:24]).hex()}..."


def op_failed(e, what, may=()):
    """A request the daemon failed: the run fails unless its errno is one
    of may (a FAST_ZERO the daemon cannot do fast fails ENOTSUP)."""
    errnum = getattr(e, "errnum", None)
    if errnum in may:
        log(f"  {what} failed (allowed)", e)
        return
    if d.proc.poll() is not None:
        fail(f"the daemon exited with status {d.proc.returncode} ({what}: {e})")
    fail(f"{what} failed: {e}")


def check_sector(s, data, allowed, how):
    if classify(s, data) not in allowed:
        fail(f"{how}: sector {s} (byte {s * S}, 64 KiB block {s * S >> 16}) read "
             f"{describe_data(s, data)}; expected {describe_gens(allowed)} "
             f"(after a crash {describe_gens(crash[s])}); mode {d.mode}")


def undo(*args):
    """tests/tools/undo ARGS run in this process (a Python start per device
    and power loss slowed the suite's runs): its exit status and output."""
    out = io.StringIO()
    argv = sys.argv
    sys.argv = [UNDO, *args]
    rc = 0
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(UNDO, run_name="__main__")
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            out.write(e.code)
    finally:
        sys.argv = argv
    return rc, out.getvalue()


class Daemon:
    def __init__(self, mode, extra_env=None):
        self.sock = f"{D}/s.sock"
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        e = dict(env)
        if extra_env:
            e.update(extra_env)
        self.mode = mode
        lf = open(DLOG, "a")
        lf.write(f"==== step {step}: start mode {mode} {extra_env or ''}\n")
        lf.flush()
        o, cs = ORIGIN, CACHE.split(",")
        if POWER:
            o = f"testdev:{ORIGIN}?undo={ORIGIN}.undo"
            cs = [f"testdev:{x}?undo={x}.undo" for x in cs]
        if ORIGFAIL:
            # As FZ_DEVFAIL's boom files: none left armed from before.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{D}/oboom")
            o = ((o + "&") if o.startswith("testdev:") else f"testdev:{o}?") + \
                f"eio_when={D}/oboom&eio_count={ORIGFAIL_COUNT[0]}&eio_ops=write&eio_errno={ORIG_ERRNO}"
        if DEV_ENOSPC:
            # Every write fails while full{i} exists: the file system
            # stays full across a restart until the run makes room.
            cs = [(x + "&" if x.startswith("testdev:") else f"testdev:{x}?")
                  + f"eio_when={D}/full{i}&eio_ops=write&eio_errno=28" for i, x in enumerate(cs)]
        elif DEVFAIL:
            # A boom file left armed by a daemon killed before its next
            # write would fail this start's first write: not the point.
            for i in range(len(cs)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{D}/boom{i}")
            cs = [(x + "&" if x.startswith("testdev:") else f"testdev:{x}?")
                  + f"eio_when={D}/boom{i}&eio_once&eio_ops=write" for i, x in enumerate(cs)]
        c = ",".join(cs)
        tries = 0
        while True:
            self.proc = subprocess.Popen([BIN, "serve", "--origin", o, "--cache", c, "--mode", mode,
                                          "--socket", self.sock, "--foreground", "--sequential-cutoff", "0",
                                          *EXTRA], stdout=lf, stderr=subprocess.STDOUT, env=e)
            try:
                h = connect_when_up(f"nbd+unix:///?socket={self.sock}", self.proc, timeout=HANG)
            except SystemExit as e:
                fail(f"the daemon did not start: {e}")
            if h is not None:
                break
            self.proc.wait()
            tries += 1
            # FZ_DEVFAIL=fullfs: the file system may be full without a
            # filler (the sparse files grown into it); twice at most.
            if not full_devs and not (FULLFS and tries <= 2):
                fail(f"the daemon exited with status {self.proc.returncode} at its start in {mode}")
            # FZ_DEVFAIL=enospc: a start may refuse to serve on a full
            # file system; with room made, it must start.
            log(f"  the start on a full file system exited with status {self.proc.returncode} "
                "(allowed): room made")
            lf.write(f"==== step {step}: room made, start again\n")
            lf.flush()
            if FULLFS:
                fullfs_room()
            else:
                make_room()
        lf.close()
        h.set_strict_mode(0)
        self.h = [h, self.connect()]

    def connect(self):
        h = nbd.NBD()
        h.set_strict_mode(0)
        h.connect_unix(self.sock)
        return h

    def ctl(self, *args):
        try:
            r = subprocess.run([BIN, *args, "--socket", self.sock], capture_output=True, text=True,
                               env=env, timeout=HANG)
        except subprocess.TimeoutExpired:
            fail(f"tiercache {' '.join(args)} did not end within {HANG:.0f} s")
        log("ctl", args, r.returncode, r.stdout.strip()[-200:], r.stderr.strip()[-300:])
        return r.returncode

    def ctl_async(self, *args):
        log("ctl_async", args)
        return subprocess.Popen([BIN, *args, "--socket", self.sock], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, text=True)

    def close(self):
        for h in self.h:
            try:
                h.shutdown()
            except nbd.Error:
                pass
        self.h = []

    def kill(self):
        """kill -9 first: the connections end with the daemon, not before."""
        if self.proc.poll() is not None:
            fail(f"the daemon exited by itself with status {self.proc.returncode}")
        self.proc.kill()
        self.proc.wait()
        self.close()

    def powerloss(self):
        self.kill()
        if not POWER:
            return
        for x in [ORIGIN_FILE] + CACHE.split(","):
            how = "all"
            if POWER >= 2:
                rc, out = undo("--list", f"{x}.undo", x)
                n = len(out.splitlines())
                if n and prng.random() < 0.3:
                    i = prng.randrange(n)
                    rc, out = undo("--drop", str(i), f"{x}.undo", x)
                    if rc == 0:
                        log(f"  power loss {os.path.basename(x)}: write {i} of {n} lost, the others kept")
                        continue
                k = prng.randint(0, n)
                if POWER == 3 and k < n and prng.random() < 0.5:
                    rc, out = undo("--keep", str(k), "--torn", f"{x}.undo", x)
                    how = f"the first {k} of {n} kept, the next torn after its chunk header"
                else:
                    rc, out = undo("--keep", str(k), f"{x}.undo", x)
                    how = f"the first {k} of {n} kept"
            else:
                rc, out = undo(f"{x}.undo", x)
            if rc != 0:
                fail(f"undo {x}: {out}")
            log(f"  power loss {os.path.basename(x)}: {how}: {out.strip()}")

    def stop(self):
        self.close()
        if self.proc.poll() is not None:
            fail(f"the daemon exited by itself with status {self.proc.returncode}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            fail(f"the daemon did not stop within {HANG:.0f} s of SIGTERM")
        if rc != 0 and not (rc == 1 and (devfailed[0] or origfailed[0])):
            fail(f"the daemon stopped with status {rc} after SIGTERM")
        return rc


def check_range(d, s0, n, pin=True):
    h = rng.choice(d.h)
    log("read", s0, n)
    try:
        data = h.pread(n * S, s0 * S)
    except nbd.Error as e:
        if devfailed[0] and getattr(e, "errnum", None) == 5:
            # Each sector alone, to check those that still read (on the
            # first connection: no choice of rng's that a replay's timing
            # could change).
            log(f"  read of sectors {s0}+{n} failed after a device failure (allowed)", e)
            for i in range(n):
                try:
                    sd = d.h[0].pread(S, (s0 + i) * S)
                except nbd.Error as e:
                    if getattr(e, "errnum", None) != 5:
                        op_failed(e, f"read of sector {s0 + i}")
                    if STRICT and not may_eio(s0 + i):
                        fail(f"read of sector {s0 + i} (byte {(s0 + i) * S}) failed with EIO: a "
                             "full file system fails writes, not reads, and its 4 KiB sector "
                             "holds no write that a FLUSH did not acknowledge; expected "
                             f"{describe_gens(cur[s0 + i])}; mode {d.mode}")
                    continue
                check_sector(s0 + i, sd, cur[s0 + i], "read")
                if pin:
                    pin_sector(s0 + i, sd)
            return
        op_failed(e, f"read of sectors {s0}+{n}")
        return
    for i in range(n):
        s = s0 + i
        sd = data[i * S:(i + 1) * S]
        check_sector(s, sd, cur[s], "read")
        if pin:
            pin_sector(s, sd)


def pin_sector(s, sd):
    """What a sector read stays until the next write, unless it may be
    trimmed."""
    v = classify(s, sd)
    if ctrim[s] is not None and v in ctrim[s]:
        cur[s] = set(ctrim[s])     # still maybe trimmed: not pinned
    else:
        cur[s] = {v}
        ctrim[s] = None


def check_all(d):
    for s0 in range(0, NS, 2048):
        progress[0] = time.monotonic()
        check_range(d, s0, 2048)


def pick():
    blk = rng.choice([S, 4096, 65536])
    n = rng.choice([1, 1, 2, 3, 8, 16])
    if rng.random() < 0.2:
        n = rng.randint(1, 256)
        blk = S
    length = min(n * blk, SIZE)
    off = rng.randrange(0, SIZE - length + 1) // blk * blk
    # concentrate on a few hot spots
    if rng.random() < 0.6:
        hot = rng.choice([0, 65536 * 3, 1 << 20, SIZE - 65536 * 2])
        off = min(SIZE - length, hot + rng.randrange(0, 4) * 4096)
    return off // S, length // S


# The daemon's sector: lost data is kept per 4 KiB sector (tiercache(8)).
LOST_UNIT = 4096 // S


def partial_units(s0, n):
    """The first sectors of the lost units (4 KiB sectors) a request of
    sectors s0+n covers only in part: a write or write-zeroes of them is
    a read-modify-write that reads the rest of the unit first."""
    units = []
    if s0 % LOST_UNIT:
        units.append(s0 - s0 % LOST_UNIT)
    e = s0 + n
    if e % LOST_UNIT and e - e % LOST_UNIT not in units:
        units.append(e - e % LOST_UNIT)
    return units


def partial_lost_eio(e, s0, n, verify=True):
    """Whether a write's (or write-zeroes') EIO is one the manual allows:
    after a device failure, a write covering only part of a 4 KiB sector
    whose data was lost fails with EIO and changes nothing (the rest of
    that sector cannot be read to merge it with; it stays lost until
    written whole).  With verify, a unit it covers in part must read EIO
    now (nothing else wrote it meanwhile: only for requests that race no
    other write)."""
    units = partial_units(s0, n)
    if not (devfailed[0] and getattr(e, "errnum", None) == 5 and units):
        return False
    if not verify:
        return True
    for u in units:
        try:
            d.h[0].pread(LOST_UNIT * S, u * S)
        except nbd.Error as e2:
            if getattr(e2, "errnum", None) == 5:
                log(f"  sectors {u}+{LOST_UNIT} read EIO: lost, covered in part (allowed)")
                return True
            op_failed(e2, f"read of sectors {u}+{LOST_UNIT}")
    return False


def do_write(d, fua=False, h=None):
    s0, n = pick()
    g = new_gen(f"write {s0}+{n}" + (" FUA" if fua else ""))
    buf = b"".join(sec_data(s0 + i, g) for i in range(n))
    h = h or rng.choice(d.h)
    log("write", s0, n, g, "fua" if fua else "")
    try:
        h.pwrite(buf, s0 * S, nbd.CMD_FLAG_FUA if fua else 0)
    except nbd.Error as e:
        if partial_lost_eio(e, s0, n):
            log(f"  write of sectors {s0}+{n} failed: a lost 4 KiB sector covered in part "
                "(allowed)", e)
            return
        if origin_eio(e, f"write of sectors {s0}+{n}"):
            maybe_written(s0, n, g)
            return
        op_failed(e, f"write of sectors {s0}+{n}")
    for i in range(n):
        s = s0 + i
        cur[s] = {g}
        ctrim[s] = None
        if fua:
            crash[s] = {g}
            crash_trim[s] = None
            unfl[s] = False
        else:
            crash[s].add(g)
            unfl[s] = True


def origin_eio(e, what):
    """Whether a write's (write-zeroes', trim's) EIO is one FZ_ORIGFAIL
    allows: the origin failed writes since the run began."""
    if origfailed[0] and getattr(e, "errnum", None) in ORIG_MAY:
        log(f"  {what} failed after an origin write failure (allowed)", e)
        return True
    return False


def maybe_written(s0, n, g):
    """A write that failed may have changed its sectors or not: each
    reads either, now and after a crash."""
    for i in range(n):
        s = s0 + i
        if ctrim[s] is not None:
            ctrim[s].add(g)
        cur[s] = cur[s] | {g}
        crash[s].add(g)
        unfl[s] = True
        if crash_trim[s] is not None:
            crash_trim[s].add(g)


def do_zero(d):
    s0, n = pick()
    flags = 0
    if rng.random() < 0.5:
        flags |= nbd.CMD_FLAG_NO_HOLE
    if rng.random() < 0.3 and not os.environ.get("FZ_NOFAST"):
        flags |= nbd.CMD_FLAG_FAST_ZERO
    if rng.random() < 0.2:
        flags |= nbd.CMD_FLAG_FUA
    h = rng.choice(d.h)
    log("zero", s0, n, flags)
    try:
        h.zero(n * S, s0 * S, flags)
    except nbd.Error as e:
        if partial_lost_eio(e, s0, n):
            log(f"  write-zeroes of sectors {s0}+{n} failed: a lost 4 KiB sector covered in "
                "part (allowed)", e)
            return
        if origin_eio(e, f"write-zeroes of sectors {s0}+{n}"):
            maybe_written(s0, n, ZERO)
            return
        op_failed(e, f"write-zeroes of sectors {s0}+{n} flags {flags:#x}",
                  (95,) if flags & nbd.CMD_FLAG_FAST_ZERO else ())  # ENOTSUP
        return
    for i in range(n):
        s = s0 + i
        cur[s] = {ZERO}
        ctrim[s] = None
        if flags & nbd.CMD_FLAG_FUA:
            crash[s] = {ZERO}
            crash_trim[s] = None
            unfl[s] = False
        else:
            crash[s].add(ZERO)
            unfl[s] = True


def do_trim(d):
    s0, n = pick()
    h = rng.choice(d.h)
    log("trim", s0, n)
    try:
        h.trim(n * S, s0 * S)
    except nbd.Error as e:
        if not origin_eio(e, f"trim of sectors {s0}+{n}"):
            op_failed(e, f"trim of sectors {s0}+{n}")
    for i in range(n):
        s = s0 + i
        cur[s] = cur[s] | {ZERO}
        ctrim[s] = set(cur[s])
        crash[s] = crash[s] | cur[s]
        crash_trim[s] = set(crash[s])
        unfl[s] = True


def do_flush(d):
    h = rng.choice(d.h)
    log("flush")
    try:
        h.flush()
    except nbd.Error as e:
        if ((devfailed[0] and getattr(e, "errnum", None) == 5) or
                (origfailed[0] and getattr(e, "errnum", None) in ORIG_MAY)):
            log("  flush failed after a device or origin failure (allowed)", e)
            lost_maybe()
            return
        op_failed(e, "flush")
    durable()


def durable():
    """A flush (or a stop with status 0): what a read may return now is
    what it may return after a crash."""
    for s in range(NS):
        crash[s] = set(cur[s])
        crash_trim[s] = None if ctrim[s] is None else set(ctrim[s])
        unfl[s] = False


def lost_maybe():
    """A FLUSH failed, or a crash: the writes no FLUSH covered may be lost
    for good (EIO)."""
    for s in range(NS):
        sticky[s] = sticky[s] or unfl[s]


def may_eio(s):
    """FZ_DEVFAIL=enospc, fullfs: whether sector s may read EIO."""
    u = s - s % LOST_UNIT
    return any(unfl[x] or sticky[x] for x in range(u, min(NS, u + LOST_UNIT)))


def wait_aio(pairs, what, eio_ok=(), writes=()):
    """Waits for each (handle, cookie); the run fails if one fails, but
    for an EIO of the (handle, cookie) pairs in eio_ok after a device
    failure (cookies are numbered per handle), or of the writes after an
    origin write failure (FZ_ORIGFAIL).  Returns the pairs that failed
    so."""
    failed = set()
    for h, c in pairs:
        while True:
            try:
                if h.aio_command_completed(c):
                    break
            except nbd.Error as e:
                errnum = getattr(e, "errnum", None)
                if ((h, c) in eio_ok and devfailed[0] and errnum == 5 or
                        (h, c) in writes and origfailed[0] and errnum in ORIG_MAY):
                    log(f"  {what}: a request failed after a device or origin failure (allowed)", e)
                    failed.add((h, c))
                    break
                op_failed(e, what)
            h.poll(100)
    return failed


def race_eio_ok(pair, s0, n):
    """A racing write may fail as partial_lost_eio() allows, unverified
    (the other write may have written the lost unit since)."""
    return [pair] if partial_units(s0, n) else []


def do_race(d):
    """two overlapping writes from two connections in flight at once"""
    s0, n = pick()
    g1 = new_gen(f"race write {s0}+{n}")
    s1 = max(0, min(NS - n, s0 + rng.randint(-n // 2, n // 2)))
    g2 = new_gen(f"race write {s1}+{n}")
    b1 = b"".join(sec_data(s0 + i, g1) for i in range(n))
    b2 = b"".join(sec_data(s1 + i, g2) for i in range(n))
    log("race", s0, s1, n, g1, g2)
    c1 = d.h[0].aio_pwrite(b1, s0 * S)
    c2 = d.h[1].aio_pwrite(b2, s1 * S)
    p1, p2 = (d.h[0], c1), (d.h[1], c2)
    failed = wait_aio([p1, p2], f"racing writes of sectors {s0}+{n} and {s1}+{n}",
                      eio_ok=race_eio_ok(p1, s0, n) + race_eio_ok(p2, s1, n), writes=[p1, p2])
    both = {}
    for base, g, p in ((s0, g1, p1), (s1, g2, p2)):
        if p in failed:
            if origfailed[0]:
                maybe_written(base, n, g)
            continue    # a failed write changes nothing (partial_lost_eio())
        for i in range(n):
            both.setdefault(base + i, set()).add(g)
    for s, gs in both.items():
        if origfailed[0] and failed:
            gs = gs | cur[s]    # the other write failed: it may have left its data
        cur[s] = gs
        ctrim[s] = None
        crash[s] |= gs
        unfl[s] = True


def do_race_rw(d):
    """a read (or a prefetch) racing an overlapping write on the other connection"""
    s0, n = pick()
    s1 = max(0, min(NS - n, s0 + rng.randint(-n // 2, n // 2)))
    g = new_gen(f"write {s1}+{n} racing a read")
    b = b"".join(sec_data(s1 + i, g) for i in range(n))
    before = [set(cur[s]) for s in range(s0, s0 + n)]
    pre = rng.random() < 0.3
    log("race_rw", s0, s1, n, g, "cache" if pre else "read")
    rbuf = nbd.Buffer(n * S)
    if pre:
        c1 = d.h[0].aio_cache(n * S, s0 * S)
    else:
        c1 = d.h[0].aio_pread(rbuf, s0 * S)
    c2 = d.h[1].aio_pwrite(b, s1 * S)
    failed = wait_aio([(d.h[0], c1), (d.h[1], c2)], f"{'prefetch' if pre else 'read'} of sectors "
                      f"{s0}+{n} racing a write of {s1}+{n}",
                      eio_ok=[(d.h[0], c1)] + race_eio_ok((d.h[1], c2), s1, n),
                      writes=[(d.h[1], c2)])
    read_ok = (d.h[0], c1) not in failed
    write_ok = (d.h[1], c2) not in failed
    if not write_ok and origfailed[0]:
        maybe_written(s1, n, g)
    if not pre and read_ok:
        data = rbuf.to_bytearray()
        for i in range(n):
            s = s0 + i
            allowed = before[i] | ({g} if s1 <= s < s1 + n else set())
            check_sector(s, data[i * S:(i + 1) * S], allowed, "read racing a write")
    for i in range(n if write_ok else 0):
        s = s1 + i
        cur[s] = {g}
        ctrim[s] = None
        crash[s].add(g)
        unfl[s] = True
    s2, n2 = min(s0, s1), max(s0, s1) + n - min(s0, s1)
    check_range(d, s2, n2)


def check_daemon_log():
    with open(DLOG, errors="replace") as f:
        for line in f:
            if ("ERROR: AddressSanitizer" in line or "ERROR: LeakSanitizer" in line
                    or "runtime error:" in line or "assertion failed:" in line):
                fail(f"the daemon's log has: {line.strip()}")


def make_room():
    """FZ_DEVFAIL=enospc: the full file systems have room again."""
    log("ROOM", sorted(full_devs))
    for i in full_devs:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{D}/full{i}")
    full_devs.clear()


def fullfs_room():
    """FZ_DEVFAIL=fullfs: room for a start that found none: the filler
    removed, or (none) the file system grown by 4 MiB."""
    if os.path.exists(f"{FS}/filler"):
        os.unlink(f"{FS}/filler")
        log("ROOM: filler removed (a start found no room)")
    else:
        fs_size[0] += 4 << 20
        subprocess.run(["mount", "-o", f"remount,size={fs_size[0]}", FS], check=True)
        log("ROOM: the file system grown to", fs_size[0], "(a start found no room)")
    full_devs.clear()


def crashed():
    """After a kill: a sector may read what survives a crash."""
    lost_maybe()
    for s in range(NS):
        cur[s] = set(crash[s])
        ctrim[s] = None if crash_trim[s] is None else set(crash_trim[s])


def restart(was_detached=False):
    """A new daemon after a kill or a stop.  was_detached: the one before
    was detached (no attach under way): the detach emptied the log
    durably, so the start recovers no cached block (one would be older
    than what the origin received while detached)."""
    global d
    check_daemon_log()
    d = Daemon(rng.choice(MODES), ckenv)
    if was_detached:
        last = open(DLOG).read().rsplit("==== step", 1)[-1]
        found = re.findall(r"recovered (\d+) blocks", last)
        if found and int(found[-1]) > 0:
            fail(f"the start after a detach recovered {found[-1]} cached blocks: the detach "
                 f"did not empty the log durably")
    check_all(d)


ORIGFAIL_COUNT = [5]
MODES = (os.environ.get("FZ_MODES") or "writeback,writethrough,writearound,passthrough").split(",")
ckenv = None
if os.environ.get("FZ_CKPT") == "1":
    ckenv = {"TIERCACHE_TEST_CKPT_BYTES": str(256 << 10), "TIERCACHE_TEST_CKPT_TICK_MS": "5"}
elif os.environ.get("FZ_CKPT"):
    ckenv = {"TIERCACHE_TEST_CKPT_BYTES": os.environ["FZ_CKPT"]}
d = Daemon("writeback", ckenv)
detached = False
for step in range(STEPS):
    progress[0] = time.monotonic()
    if d.proc.poll() is not None:
        fail(f"the daemon exited by itself with status {d.proc.returncode}")
    if DEVFAIL and not DEV_ENOSPC and frng.random() < 0.02:
        i = frng.randrange(len(CACHES))
        log("DEVFAIL", i)
        open(f"{D}/boom{i}", "w").close()
        devfailed[0] = True
    if DEV_ENOSPC:
        if full_devs:
            full_left[0] -= 1
            if full_left[0] <= 0:
                make_room()
        elif frng.random() < 0.02:
            # One file system under every device, or one device's alone.
            if frng.random() < 0.5:
                full_devs.update(range(len(CACHES)))
            else:
                full_devs.add(frng.randrange(len(CACHES)))
            full_left[0] = frng.randint(1, 60)
            log("DEVFULL", sorted(full_devs), "for", full_left[0], "steps")
            for i in full_devs:
                open(f"{D}/full{i}", "w").close()
            devfailed[0] = True
    if FULLFS:
        if full_devs:
            full_left[0] -= 1
            if full_left[0] <= 0:
                log("ROOM: filler removed")
                os.unlink(f"{FS}/filler")
                full_devs.clear()
                if frng.random() < 0.33:
                    fs_size[0] += 4 << 20
                    subprocess.run(["mount", "-o", f"remount,size={fs_size[0]}", FS], check=True)
                    log("ROOM: the file system grown to", fs_size[0])
        elif frng.random() < 0.02:
            full_left[0] = frng.randint(1, 60)
            n = 0
            fd = os.open(f"{FS}/filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            for chunk in (65536, 4096):
                with contextlib.suppress(OSError):
                    while True:
                        n += os.write(fd, bytes(chunk))
            os.close(fd)
            full_devs.add(0)
            log("DEVFULL: a filler of", n, "bytes for", full_left[0], "steps")
    if ORIGFAIL and orng.random() < 0.03:
        ORIGFAIL_COUNT[0] = orng.randint(1, 20)
        log("ORIGFAIL", ORIGFAIL_COUNT[0])
        # eio_count is read at the daemon's start: the boom file arms
        # the count it was started with (the next start takes this one).
        open(f"{D}/oboom", "w").close()
        origfailed[0] = True
    r = rng.random()
    if r < 0.35:
        op = "write"
        do_write(d, fua=rng.random() < 0.15)
    elif r < 0.45:
        op = "write-zeroes"
        do_zero(d)
    elif r < 0.52:
        op = "trim"
        do_trim(d)
    elif r < 0.58:
        op = "flush"
        do_flush(d)
    elif r < 0.60:
        op = "racing writes"
        do_race(d)
    elif r < 0.66:
        op = "a read racing a write"
        do_race_rw(d)
    elif r < 0.67:
        op = "prefetch"
        s0, n = pick()
        log("cache", s0, n)
        try:
            rng.choice(d.h).cache(n * S, s0 * S)
        except nbd.Error as e:
            op_failed(e, f"prefetch of sectors {s0}+{n}")
    elif r < 0.78:
        op = "read"
        s0, n = pick()
        check_range(d, s0, n)
    elif r < 0.83:
        m = rng.choice(MODES)
        op = f"mode {m}"
        if d.ctl("mode", m) == 0:
            d.mode = m
    elif r < 0.85:
        op = "tiercache flush"
        d.ctl("flush")
    elif r < 0.87:
        if not detached:
            op = "detach"
            if d.ctl("detach") == 0:
                detached = True
        else:
            op = "attach"
            if d.ctl("attach") == 0:
                detached = False
    elif r < 0.93:
        op = "kill -9" + (" and power loss" if POWER else "")
        log("KILL")
        d.powerloss()
        crashed()
        was, detached = detached, False
        restart(was)
    elif r < 0.97:
        op = "SIGTERM"
        log("STOP")
        rc = d.stop()
        log("  stopped")
        if rc == 0 and not DEVFAIL:
            # A clean stop of a healthy set: its tool finds nothing wrong
            # (the checkpoint is what the log gives, and so on).
            r = subprocess.run([BIN, "check", "--cache", CACHE, "--origin", ORIGIN_FILE],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                fail(f"tiercache check after a clean stop exited {r.returncode}:\n"
                     f"{r.stdout}{r.stderr}")
        if rc == 0:
            durable()
        else:
            crashed()    # exit 1 after a device failure: what was durable
        was, detached = detached, False
        restart(was)
    elif r < 0.985:
        # a control command with client I/O going on while it runs, maybe
        # a kill in it (as many requests whether it ended or not: the same
        # requests in every replay)
        cmd = rng.choice([("mode", rng.choice(MODES)), ("flush",), ("detach",), ("attach",), ("mode", "writeback")])
        killit = rng.random() < 0.4
        op = f"tiercache {' '.join(cmd)} with client I/O" + (", then kill -9" if killit else "")
        p = d.ctl_async(*cmd)
        nops = rng.randint(1, 30)
        for i in range(nops):
            progress[0] = time.monotonic()
            x = rng.random()
            if x < 0.5:
                do_write(d, fua=rng.random() < 0.1)
            elif x < 0.6:
                do_zero(d)
            elif x < 0.65:
                do_trim(d)
            elif x < 0.75:
                do_flush(d)
            else:
                s0, n = pick()
                check_range(d, s0, n)
        if killit:
            log("KILL during", cmd)
            d.powerloss()
            p.wait()
            crashed()
            was = detached and cmd[0] not in ("attach", "detach")
            detached = False
            restart(was)
        else:
            try:
                out = p.communicate(timeout=HANG)[0]
            except subprocess.TimeoutExpired:
                fail(f"tiercache {' '.join(cmd)} did not end within {HANG:.0f} s")
            log("  ctl_async rc", p.returncode, out.strip()[-300:])
            if p.returncode == 0:
                if cmd[0] == "detach":
                    detached = True
                elif cmd[0] == "attach":
                    detached = False
                elif cmd[0] == "mode":
                    d.mode = cmd[1]
    else:
        pol = rng.choice(["default", "lru", "fifo", "s3fifo"])
        op = f"set policy={pol}"
        d.ctl("set", "policy=" + pol)
step, op = STEPS, "the last check"
check_all(d)
d.stop()
check_daemon_log()
print(f"seed {SEED}: {STEPS} steps ok, {gen[0] - 1} writes")
