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
environment: FZ_POWER=1 (origin and cache devices through testdev undo
logs, applied at each kill: a power loss; FUA is not used, as the undo
log does not honour it), FZ_CKPT=1 (running checkpoints), FZ_CACHES=a,b
(device files), FZ_CSIZE, FZ_SIZE, FZ_BS (block size), FZ_NBDKIT=DELAY
(the origin behind nbdkit's delay filter), FZ_NOFAST=1 (no FAST_ZERO),
FZ_EXTRA (more serve options)."""
import os, sys, random, subprocess, signal, time, struct, json
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import nbd
from tclib import tagged_sector, tagged_gen, connect_when_up

BIN, D, SEED, STEPS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
EXTRA = os.environ.get("FZ_EXTRA", "").split()
rng = random.Random(SEED)
MAGIC = b"TCHUNT\x00\x01"
S = 512
SIZE = int(os.environ.get("FZ_SIZE", 8 << 20))
CSIZE = int(os.environ.get("FZ_CSIZE", 12 << 20))
NS = SIZE // S
env = dict(os.environ)
env["TIERCACHE_ORIGIN_RECORDS"] = f"{D}/rec"
os.makedirs(f"{D}/rec", exist_ok=True)
ORIGIN = f"{D}/origin.img"
CACHES = os.environ.get("FZ_CACHES", "c0.img").split(",")
CACHE = ",".join(f"{D}/{c}" for c in CACHES)
for p in [ORIGIN] + CACHE.split(","):
    with open(p, "wb") as f:
        f.truncate(SIZE if p == ORIGIN else CSIZE)
NBDKIT = os.environ.get("FZ_NBDKIT")
if NBDKIT:
    ksock = f"{D}/k.sock"
    kp = subprocess.Popen(["nbdkit", "-f", "-U", ksock, "--filter=delay", "file", ORIGIN,
                           "rdelay=" + NBDKIT, "wdelay=2ms"])
    import atexit
    atexit.register(lambda: kp.kill())
    for i in range(100):
        if os.path.exists(ksock):
            break
        time.sleep(0.1)
    ORIGIN = f"nbd+unix:///?socket={ksock}"
fmt = [BIN, "format", "--cache", CACHE, "--origin", ORIGIN, "--segment-size", "1M"]
if os.environ.get("FZ_BS"):
    fmt += ["--block-size", os.environ["FZ_BS"]]
subprocess.run(fmt, check=True, env=env, stdout=subprocess.DEVNULL)

ZERO = 0  # gen 0 = zeroes
cur = [{ZERO} for _ in range(NS)]      # allowed now
crash = [{ZERO} for _ in range(NS)]    # allowed after a crash
trimmed = [False] * NS
gen = [1]
LOG = open(f"{D}/ops.log", "w")


def log(*a):
    print(*a, file=LOG, flush=True)


def sec_data(s, g):
    return bytes(S) if g == ZERO else tagged_sector(MAGIC, s * S, g, S)


def classify(s, data):
    if data == bytes(S):
        return ZERO
    g = tagged_gen(MAGIC, s * S, data)
    return -1 if g is None else g


class Daemon:
    def __init__(self, mode, extra_env=None):
        self.sock = f"{D}/s.sock"
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        e = dict(env)
        if extra_env:
            e.update(extra_env)
        self.mode = mode
        lf = open(f"{D}/daemon.log", "a")
        lf.write(f"==== start mode {mode} {extra_env}\n"); lf.flush()
        if POWER:
            o = f"testdev:{ORIGIN}?undo={ORIGIN}.undo"
            c = ",".join(f"testdev:{x}?undo={x}.undo" for x in CACHE.split(","))
        else:
            o, c = ORIGIN, CACHE
        self.proc = subprocess.Popen([BIN, "serve", "--origin", o, "--cache", c, "--mode", mode,
                                      "--socket", self.sock, "--foreground", "--sequential-cutoff", "0", *EXTRA],
                                     stdout=lf, stderr=subprocess.STDOUT, env=e)
        h = connect_when_up(f"nbd+unix:///?socket={self.sock}", self.proc)
        if h is None:
            raise SystemExit(f"daemon exited at start (seed {SEED})")
        self.h = [h, self.connect()]

    def connect(self):
        h = nbd.NBD()
        h.set_strict_mode(0)
        h.connect_unix(self.sock)
        return h

    def ctl(self, *args):
        r = subprocess.run([BIN, *args, "--socket", self.sock], capture_output=True, text=True, env=env, timeout=120)
        log("ctl", args, r.returncode, r.stdout.strip()[-200:], r.stderr.strip()[-300:])
        return r.returncode

    def ctl_async(self, *args):
        log("ctl_async", args)
        return subprocess.Popen([BIN, *args, "--socket", self.sock], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)

    def kill(self):
        for h in self.h:
            try:
                h.shutdown()
            except Exception:
                pass
        self.proc.kill(); self.proc.wait()

    def powerloss(self):
        self.kill()
        if POWER:
            for x in [ORIGIN] + CACHE.split(","):
                subprocess.run([f"{HERE}/undo", f"{x}.undo", x], check=True)
            log("  power loss applied")

    def stop(self):
        for h in self.h:
            try:
                h.shutdown()
            except Exception:
                pass
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait()
        return rc


def check_range(d, s0, n, pin=True):
    h = rng.choice(d.h)
    log("read", s0, n)
    data = h.pread(n * S, s0 * S)
    for i in range(n):
        s = s0 + i
        g = classify(s, data[i * S:(i + 1) * S])
        if g not in cur[s]:
            raise SystemExit(f"MISMATCH seed {SEED} sector {s} (block64k {s*S>>16}) got gen {g}, allowed {sorted(cur[s])} "
                             f"crash-allowed {sorted(crash[s])} mode {d.mode}")
        if pin and not trimmed[s]:
            cur[s] = {g}


def check_all(d):
    for s0 in range(0, NS, 2048):
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


def do_write(d, fua=False, h=None):
    if POWER:
        fua = False  # testdev's undo does not honour FUA writes
    s0, n = pick()
    g = gen[0]; gen[0] += 1
    buf = b"".join(sec_data(s0 + i, g) for i in range(n))
    h = h or rng.choice(d.h)
    log("write", s0, n, g, "fua" if fua else "")
    try:
        h.pwrite(buf, s0 * S, nbd.CMD_FLAG_FUA if fua else 0)
    except nbd.Error as e:
        log("  write failed", e)
        # failed write: sectors may hold old or new?  rule: last acknowledged.  Keep old.
        return
    for i in range(n):
        s = s0 + i
        cur[s] = {g}; trimmed[s] = False
        if fua and not POWER:  # testdev's undo does not honour FUA writes
            crash[s] = {g}
        else:
            crash[s].add(g)


def do_zero(d):
    s0, n = pick()
    flags = 0
    if rng.random() < 0.5:
        flags |= nbd.CMD_FLAG_NO_HOLE
    if rng.random() < 0.3 and not os.environ.get("FZ_NOFAST"):
        flags |= nbd.CMD_FLAG_FAST_ZERO
    if rng.random() < 0.2 and not POWER:
        flags |= nbd.CMD_FLAG_FUA
    h = rng.choice(d.h)
    log("zero", s0, n, flags)
    try:
        h.zero(n * S, s0 * S, flags)
    except nbd.Error as e:
        log("  zero failed", e)
        return
    for i in range(n):
        s = s0 + i
        cur[s] = {ZERO}; trimmed[s] = False
        if flags & nbd.CMD_FLAG_FUA and not POWER:
            crash[s] = {ZERO}
        else:
            crash[s].add(ZERO)


def do_trim(d):
    s0, n = pick()
    h = rng.choice(d.h)
    log("trim", s0, n)
    try:
        h.trim(n * S, s0 * S)
    except nbd.Error as e:
        log("  trim failed", e)
        return
    for i in range(n):
        s = s0 + i
        cur[s] = cur[s] | {ZERO}; trimmed[s] = True
        crash[s] = crash[s] | cur[s]


def do_flush(d):
    h = rng.choice(d.h)
    log("flush")
    try:
        h.flush()
    except nbd.Error as e:
        log("  flush failed", e)
        return
    for s in range(NS):
        crash[s] = set(cur[s])


def do_race(d):
    """two overlapping writes from two connections in flight at once"""
    s0, n = pick()
    g1 = gen[0]; g2 = gen[0] + 1; gen[0] += 2
    b1 = b"".join(sec_data(s0 + i, g1) for i in range(n))
    s1 = max(0, min(NS - n, s0 + rng.randint(-n // 2, n // 2)))
    b2 = b"".join(sec_data(s1 + i, g2) for i in range(n))
    log("race", s0, s1, n, g1, g2)
    c1 = d.h[0].aio_pwrite(b1, s0 * S)
    c2 = d.h[1].aio_pwrite(b2, s1 * S)
    ok = {}
    for h, c, k in ((d.h[0], c1, 1), (d.h[1], c2, 2)):
        while True:
            try:
                if h.aio_command_completed(c):
                    ok[k] = True
                    break
            except nbd.Error as e:
                log("  race write failed", e); ok[k] = False; break
            h.poll(100)
    both = {}
    for k, base, g in ((1, s0, g1), (2, s1, g2)):
        if not ok[k]:
            continue
        for i in range(n):
            both.setdefault(base + i, set()).add(g)
    for s, gs in both.items():
        cur[s] = gs; trimmed[s] = False
        crash[s] |= gs


POWER = bool(os.environ.get("FZ_POWER"))
def do_race_rw(d):
    """a read (or a prefetch) racing an overlapping write on the other connection"""
    s0, n = pick()
    g = gen[0]; gen[0] += 1
    s1 = max(0, min(NS - n, s0 + rng.randint(-n // 2, n // 2)))
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
    res = {}
    for h, c, k in ((d.h[0], c1, 1), (d.h[1], c2, 2)):
        while True:
            try:
                if h.aio_command_completed(c):
                    res[k] = True
                    break
            except nbd.Error as e:
                log("  race_rw op failed", k, e); res[k] = False; break
            h.poll(100)
    if res.get(1) and not pre:
        data = rbuf.to_bytearray()
        for i in range(n):
            s = s0 + i
            gg = classify(s, data[i * S:(i + 1) * S])
            allowed = before[i] | ({g} if s1 <= s < s1 + n and res.get(2) else set()) | ({g} if s1 <= s < s1 + n else set())
            if gg not in allowed:
                raise SystemExit(f"MISMATCH(race read) seed {SEED} sector {s} got {gg} allowed {sorted(allowed)}")
    if res.get(2):
        for i in range(n):
            s = s1 + i
            cur[s] = {g}; trimmed[s] = False; crash[s].add(g)
    else:
        for i in range(n):
            s = s1 + i
            cur[s] |= {g}; crash[s].add(g)
    s2, n2 = min(s0, s1), max(s0, s1) + n - min(s0, s1)
    check_range(d, s2, n2)


MODES = ["writeback", "writethrough", "writearound", "passthrough"]
ckenv = None
if os.environ.get("FZ_CKPT"):
    ckenv = {"TIERCACHE_TEST_CKPT_BYTES": str(256 << 10), "TIERCACHE_TEST_CKPT_TICK_MS": "5"}
mode = "writeback"
d = Daemon(mode, ckenv)
detached = False
for step in range(STEPS):
    r = rng.random()
    if r < 0.35:
        do_write(d, fua=rng.random() < 0.15)
    elif r < 0.45:
        do_zero(d)
    elif r < 0.52:
        do_trim(d)
    elif r < 0.58:
        do_flush(d)
    elif r < 0.60:
        do_race(d)
    elif r < 0.66:
        do_race_rw(d)
    elif r < 0.67:
        s0, n = pick(); log("cache", s0, n); rng.choice(d.h).cache(n * S, s0 * S)
    elif r < 0.78:
        s0, n = pick(); check_range(d, s0, n)
    elif r < 0.83:
        m = rng.choice(MODES)
        rc = d.ctl("mode", m)
        if rc == 0:
            d.mode = m
    elif r < 0.85:
        d.ctl("flush")
    elif r < 0.87:
        if not detached:
            if d.ctl("detach") == 0:
                detached = True
        else:
            if d.ctl("attach") == 0:
                detached = False
    elif r < 0.93:
        log("KILL")
        d.powerloss()
        for s in range(NS):
            cur[s] = set(crash[s])
        mode = rng.choice(MODES)
        d = Daemon(mode, ckenv)
        detached = False
        check_all(d)
    elif r < 0.97:
        log("STOP")
        rc = d.stop()
        log("  stop rc", rc)
        if rc == 0:
            for s in range(NS):
                crash[s] = set(cur[s])
        else:
            for s in range(NS):
                cur[s] = set(crash[s])
        mode = rng.choice(MODES)
        d = Daemon(mode, ckenv)
        detached = False
        check_all(d)
    elif r < 0.985:
        # a control command with client I/O going on while it runs, maybe a kill in it
        cmd = rng.choice([("mode", rng.choice(MODES)), ("flush",), ("detach",), ("attach",), ("mode", "writeback")])
        p = d.ctl_async(*cmd)
        killit = rng.random() < 0.4
        nops = rng.randint(1, 30)
        for i in range(nops):
            if p.poll() is not None and not killit:
                break
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
                s0, n = pick(); check_range(d, s0, n)
        if killit:
            log("KILL during", cmd)
            d.powerloss()
            p.wait()
            for s in range(NS):
                cur[s] = set(crash[s])
            mode = rng.choice(MODES)
            d = Daemon(mode, ckenv)
            detached = False
            check_all(d)
        else:
            out = p.communicate()[0]
            log("  ctl_async rc", p.returncode, out.strip()[-300:])
            if p.returncode == 0:
                if cmd[0] == "detach":
                    detached = True
                elif cmd[0] == "attach":
                    detached = False
                elif cmd[0] == "mode":
                    d.mode = cmd[1]
    else:
        d.ctl("set", "policy=" + rng.choice(["default", "lru", "fifo", "s3fifo"]))
check_all(d)
rc = d.stop()
print(f"seed {SEED} ok, stop rc {rc}")
