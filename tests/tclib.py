#!/usr/bin/python3
"""Shared helpers of the engine tests: a reference model of a volume's
contents, a random mixed workload over several NBD connections checked
against it, and whole-volume checks of an export or a file.

The model is the expected content (a file NAME.img) and a map of 512-byte
sectors that were trimmed and not written since (NAME.maybe): such a sector
may read back as its old data or as zeroes.

Used from the shell tests as
    tclib.py workload SOCK[,SOCK..] MODEL --seed N --ops N [--seconds S]
             [--lo B --hi B] [--hot LEN] [--mix F,R,W,T,Z] [--max-len B]
                                               (SIGUSR1: finish and end)
    tclib.py verify-export SOCK MODEL          every byte of the export
    tclib.py verify-file FILE MODEL            every byte of a file
    tclib.py absorb SOCK MODEL --lo B --hi B   take a range from the export
    tclib.py read SOCK --lo B --hi B [--bs N] [--passes N] [--depth N]
             [--shuffle] [--check FILE]
    tiercache status --json | tclib.py status PATH...   figures, one a line

The Python tests import it for connect_when_up(), ramp(), the tagged
sector patterns, the Serve base of their daemons and DevFail, a
two-device cache one of whose devices the test fails.
"""
import argparse
import atexit
import json
import mmap
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time

import nbd

SECTOR = 512
ZERO512 = bytes(SECTOR)


def connect(sock):
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_unix(sock)
    return h


_RAMP = bytes(range(256)) * 257


def ramp(start, n):
    """bytes((start + i) & 0xFF for i in range(n)), the body of the test
    patterns, cut from a precomputed cycle: the same bytes, without a
    Python loop per byte (that loop took 5 s for a 48 MiB origin)."""
    s = start & 0xFF
    if n <= len(_RAMP) - s:
        return _RAMP[s:s + n]
    return (_RAMP[s:] + _RAMP * (n // len(_RAMP) + 1))[:n]


# How long a test waits for a daemon it started to answer.  A restart after
# a crash may wait up to 10 s for the dead daemon's claim on the cache to
# clear (CLAIM_RELEASE_WAIT_MS in src/io/claim.c); a loaded machine adds to
# that.
START_TIMEOUT = 30


def connect_when_up(uri, proc, timeout=START_TIMEOUT):
    """A handle connected to uri, served by the daemon proc, as soon as it
    answers; None if proc exits first.  After timeout seconds the daemon is
    killed and the test ends."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            return None
        h = nbd.NBD()
        try:
            h.connect_uri(uri)
            return h
        except nbd.Error:
            del h
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            sys.exit(f"the daemon did not answer on {uri} within {timeout} s")
        time.sleep(0.01)


def tagged_sector(magic, off, gen, size):
    """size bytes (a test's sector) that name themselves: 8 bytes of magic,
    their byte offset and generation, then a ramp from off + gen."""
    head = magic + struct.pack("<QQ", off, gen)
    return head + ramp(off + gen, size - len(head))


def tagged_gen(magic, off, data):
    """The generation of sector data written by tagged_sector() for off,
    or None if it is anything else (another offset, damage, zeroes)."""
    if data[:8] != magic:
        return None
    o, g = struct.unpack("<QQ", data[8:24])
    return g if o == off and data == tagged_sector(magic, off, g, len(data)) else None


class Serve:
    """tiercache serve in the foreground on DIR/s.sock, its output appended
    to DIR/daemon.log, with a connected handle self.h.  Killed if the test
    ends early; stop() wants a clean exit after SIGTERM."""

    def __init__(self, binary, directory, args, env=None):
        self.bin = binary
        self.sock = f"{directory}/s.sock"
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.log = f"{directory}/daemon.log"
        with open(self.log, "a") as lf:
            self.logstart = lf.tell()
            self.proc = proc = subprocess.Popen(
                [binary, "serve", *args, "--socket", self.sock, "--foreground"],
                stdout=lf, stderr=subprocess.STDOUT, env=env)
        atexit.register(lambda: proc.poll() is None and proc.kill())
        self.h = connect_when_up(f"nbd+unix:///?socket={self.sock}", self.proc)
        if self.h is None:
            sys.exit(f"daemon exited at start:\n{open(self.log).read()[-3000:]}")

    def logtext(self):
        """What the daemon logged since this start."""
        with open(self.log) as f:
            f.seek(self.logstart)
            return f.read()

    def status(self):
        """Status volume.cache, as JSON (from the control socket: see
        ctl_status())."""
        return ctl_status(self.sock)["volume"]["cache"]

    def stop(self):
        self.h.shutdown()
        del self.h
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait() != 0:
            sys.exit(f"daemon exit status {self.proc.returncode} after SIGTERM")


def make_file(path, size):
    """A sparse file of size bytes at path (made anew)."""
    with open(path, "wb") as f:
        f.truncate(size)


def block_pattern(b, gen, block=64 << 10):
    """The data of block b at generation gen: names both, then a ramp."""
    return (b.to_bytes(8, "little") + gen.to_bytes(8, "little") + ramp(b + gen, 4080)) * (block // 4096)


class DevFail(Serve):
    """A device failure of a two-device cache: DIR/origin.img of origin
    bytes, cache devices DIR/a.img (a bytes, made to fail: testdev while
    DIR/boom exists, eio_ops as given) and DIR/b.img (b bytes, the
    survivor), formatted with 1 MiB segments and served in writeback with
    no sequential cutoff (every write cached).  fail() makes a fail;
    wait_for() polls status; aio_wait() waits for a request, naming what
    was waited for, and the cache's state if it does not complete within
    WAIT seconds (a wedge, not a slow machine: the waits are generous)."""

    WAIT = 120

    def __init__(self, binary, directory, origin, a, b, eio_ops="write", args=(), env=None):
        d = directory
        make_file(f"{d}/origin.img", origin)
        make_file(f"{d}/a.img", a)
        make_file(f"{d}/b.img", b)
        subprocess.run([binary, "format", "--cache", f"{d}/a.img,{d}/b.img", "--origin",
                        f"{d}/origin.img", "--segment-size", "1M"], check=True,
                       stdout=subprocess.DEVNULL)
        self.boom = f"{d}/boom"
        ops = f"&eio_ops={eio_ops}" if eio_ops else ""
        super().__init__(binary, d, ["--origin", f"{d}/origin.img", "--cache",
                                     f"testdev:{d}/a.img?eio_when={self.boom}{ops},{d}/b.img",
                                     "--mode", "writeback", "--sequential-cutoff", "0", *args],
                         env=env)

    def status(self):
        out = subprocess.run([self.bin, "status", "--socket", self.sock, "--json"],
                             capture_output=True, text=True, check=True,
                             timeout=self.WAIT).stdout
        return json.loads(out)["volume"]["cache"]

    def fail(self):
        open(self.boom, "w").close()

    def wait_for(self, what, cond):
        """The status once cond(status) holds; the test ends after WAIT s."""
        deadline = time.monotonic() + self.WAIT
        while True:
            st = self.status()
            if cond(st):
                return st
            if time.monotonic() > deadline:
                sys.exit(f"{what}: not within {self.WAIT} s\n{json.dumps(st)}")
            time.sleep(0.05)

    def wait_failed(self, dev=0):
        return self.wait_for(f"device {dev}'s failure",
                             lambda s: s["devices"][dev]["state"] != "ok")

    def wedged(self, what):
        st = self.status()
        k = st["cleaner"]
        sys.exit(f"WEDGED: {what} did not complete within {self.WAIT} s: "
                 f"{k['appends_waiting_for_room']} appends waiting for room, segments free "
                 f"{[x['segments_free'] for x in st['devices']]}, reserve "
                 f"{st['segments_reserve']}, groups retired {k['groups_retired']}, "
                 f"copies refused {k.get('copies_refused')}\n{json.dumps(st)}")

    def aio_wait(self, what, cookie, may_fail=False):
        """Wait for the request cookie of self.h: True if it succeeded,
        False if it failed and may_fail (else the test ends)."""
        deadline = time.monotonic() + self.WAIT
        while True:
            try:
                if self.h.aio_command_completed(cookie):
                    return True
            except nbd.Error as e:
                if may_fail:
                    return False
                sys.exit(f"{what} failed: {e}")
            if time.monotonic() > deadline:
                self.wedged(what)
            self.h.poll(100)


class Model:
    """NAME.img and NAME.maybe, mapped: changes go straight to the files."""

    def __init__(self, path):
        self.files = []
        self.data = self._map(path + ".img")
        if not os.path.exists(path + ".maybe"):
            with open(path + ".maybe", "wb") as f:
                f.truncate(len(self.data) // SECTOR)
        self.maybe = self._map(path + ".maybe")

    def _map(self, name):
        f = open(name, "r+b")
        self.files.append(f)
        return mmap.mmap(f.fileno(), 0)

    @classmethod
    def load(cls, path):
        return cls(path)

    def save(self, path):
        self.data.flush()
        self.maybe.flush()

    def write(self, off, buf):
        self.data[off:off + len(buf)] = buf
        self._known(off, len(buf))

    def zero(self, off, n):
        self.data[off:off + n] = bytes(n)
        self._known(off, n)

    def _known(self, off, n):
        # Every 512-byte sector touched is now known: writes are 512-granular.
        self.maybe[off // SECTOR:(off + n + SECTOR - 1) // SECTOR] = bytes(
            (off + n + SECTOR - 1) // SECTOR - off // SECTOR)

    def trim(self, off, n):
        # The whole sectors inside the range may now read as zeroes.
        a = (off + SECTOR - 1) // SECTOR
        b = (off + n) // SECTOR
        if b > a:
            self.maybe[a:b] = b"\x01" * (b - a)

    def mismatch(self, off, got):
        """None if got matches the model at off, else a description."""
        want = self.data[off:off + len(got)]
        if got == want:
            return None
        for i in range(0, len(got), SECTOR):
            g = got[i:i + SECTOR]
            if g == want[i:i + SECTOR]:
                continue
            if self.maybe[(off + i) // SECTOR] and g == ZERO512:
                continue
            # Describe the first differing byte.
            j = next(k for k in range(len(g)) if g[k] != want[i + k])
            return ("byte %d (sector %d): got %02x expected %02x; got %s... expected %s...%s"
                    % (off + i + j, (off + i) // SECTOR, g[j], want[i + j], bytes(g[j:j + 8]).hex(),
                       bytes(want[i + j:i + j + 8]).hex(),
                       " (trimmed: old data or zeroes allowed)" if self.maybe[(off + i) // SECTOR] else ""))
        return None


class Conn:
    def __init__(self, sock):
        self.h = connect(sock)
        self.fd = self.h.aio_get_fd()
        self.inflight = {}      # cookie -> (kind, off, len, payload)


class Workload:
    """Random reads, writes, trims, write-zeroes and flushes from several
    connections with requests in flight on each, none overlapping another
    in flight; each read is checked against the model when it completes,
    and each write enters the model when it completes."""

    def __init__(self, socks, model, lo, hi, seed, depth, hot=None, mix=(3, 45, 36, 8, 8),
                 max_len=0):
        self.conns = [Conn(s) for s in socks]
        self.model = model
        self.lo, self.hi = lo, hi
        self.rnd = random.Random(seed)
        self.depth = depth
        self.hot = hot          # (start, len) of a zone that gets most requests
        self.busy = []          # (start, end) of requests in flight
        self.stats = dict(read=0, write=0, trim=0, zero=0, flush=0, unaligned=0,
                          read_bytes=0, write_bytes=0)
        self.errors = []
        self.max_len = max_len
        # cumulative thresholds of flush, read, write, trim, write-zeroes
        t, acc = sum(mix), 0
        self.cuts = []
        for x in mix:
            acc += x
            self.cuts.append(acc / t)

    def pick_range(self):
        r = self.rnd
        x = r.random()
        if x < 0.35:                        # unaligned, 512-byte granular
            gran, n = SECTOR, SECTOR * r.randint(1, 64)
        elif x < 0.85:
            gran, n = 4096, 4096 * r.randint(1, 16)
        elif x < 0.99:
            gran, n = 65536, 65536 * r.randint(1, 4)
        else:
            gran, n = 65536, 65536 * r.randint(8, 16)
        if self.hot and r.random() < 0.6:
            lo, hi = self.hot[0], self.hot[0] + self.hot[1]
        else:
            lo, hi = self.lo, self.hi
        n = min(n, hi - lo)
        if self.max_len:
            n = max(gran, min(n, self.max_len) // gran * gran) if gran <= self.max_len else SECTOR
            gran = min(gran, SECTOR if n % 4096 else 4096)
        off = lo + r.randrange(0, (hi - lo - n) // gran + 1) * gran
        if gran == 4096 and r.random() < 0.1:
            off = min(off + SECTOR * r.randint(1, 7), hi - n) // SECTOR * SECTOR
        return off, n

    def overlaps(self, off, n):
        for a, b in self.busy:
            if off < b and a < off + n:
                return True
        return False

    def submit(self, c):
        r = self.rnd
        x = r.random()
        if x < self.cuts[0]:
            cookie = c.h.aio_flush()
            c.inflight[cookie] = ("flush", 0, 0, None)
            self.stats["flush"] += 1
            return True
        off, n = self.pick_range()
        if self.overlaps(off, n):
            return False
        if off % 4096 or n % 4096:
            self.stats["unaligned"] += 1
        if x < self.cuts[1]:
            buf = nbd.Buffer(n)
            cookie = c.h.aio_pread(buf, off)
            c.inflight[cookie] = ("read", off, n, buf)
            self.stats["read_bytes"] += n
        elif x < self.cuts[2]:
            data = r.randbytes(n)
            flags = nbd.CMD_FLAG_FUA if r.random() < 0.05 else 0
            cookie = c.h.aio_pwrite(data, off, flags=flags)
            c.inflight[cookie] = ("write", off, n, data)
            self.stats["write_bytes"] += n
        elif x < self.cuts[3]:
            cookie = c.h.aio_trim(n, off)
            c.inflight[cookie] = ("trim", off, n, None)
        else:
            flags = nbd.CMD_FLAG_NO_HOLE if r.random() < 0.3 else 0
            cookie = c.h.aio_zero(n, off, flags=flags)
            c.inflight[cookie] = ("zero", off, n, None)
        self.busy.append((off, off + n))
        return True

    def complete(self, c, cookie):
        kind, off, n, payload = c.inflight.pop(cookie)
        try:
            c.h.aio_command_completed(cookie)
        except nbd.Error as e:
            self.errors.append("%s of %d bytes at %d failed: %s" % (kind, n, off, e))
            if kind != "flush":
                self.busy.remove((off, off + n))
            return
        self.stats[kind] += 1
        if kind == "flush":
            return
        self.busy.remove((off, off + n))
        m = self.model
        if kind == "read":
            bad = m.mismatch(off, payload.to_bytearray())
            if bad:
                self.errors.append("read of %d bytes at %d: %s" % (n, off, bad))
        elif kind == "write":
            m.write(off, payload)
        elif kind == "trim":
            m.trim(off, n)
        else:
            m.zero(off, n)

    def pump(self, timeout):
        rl, wl = [], []
        for c in self.conns:
            d = c.h.aio_get_direction()
            if d & nbd.AIO_DIRECTION_READ:
                rl.append(c.fd)
            if d & nbd.AIO_DIRECTION_WRITE:
                wl.append(c.fd)
        rr, ww, _ = select.select(rl, wl, [], timeout)
        for c in self.conns:
            if c.fd in rr:
                c.h.aio_notify_read()
            if c.fd in ww:
                c.h.aio_notify_write()
            while c.inflight:
                cookie = c.h.aio_peek_command_completed()
                if cookie <= 0:
                    break
                self.complete(c, cookie)

    def run(self, ops, deadline=None):
        issued = 0
        stop = []
        # SIGUSR1: stop issuing, finish what is in flight, end normally.
        signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
        while issued < ops or any(c.inflight for c in self.conns):
            if stop or (deadline and time.monotonic() > deadline):
                ops = issued          # stop issuing; drain
            for c in self.conns:
                tries = 0
                while issued < ops and len(c.inflight) < self.depth and tries < 4:
                    if self.submit(c):
                        issued += 1
                    else:
                        tries += 1
            self.pump(1.0)
            if len(self.errors) > 20:
                break
        for c in self.conns:
            c.h.flush()
            c.h.shutdown()
        return issued


def cmd_workload(a):
    m = Model.load(a.model)
    hi = a.hi or len(m.data)
    hot = None
    if a.hot:
        hot = (a.lo + a.hot_at, a.hot)
    mix = tuple(int(x) for x in a.mix.split(","))
    w = Workload(a.sock.split(","), m, a.lo, hi, a.seed, a.depth, hot, mix, a.max_len)
    t0 = time.monotonic()
    deadline = t0 + a.seconds if a.seconds else None
    n = w.run(a.ops, deadline)
    dt = time.monotonic() - t0
    print("workload: %d requests in %.1f s over %d connections: %s"
          % (n, dt, len(w.conns), " ".join("%s=%d" % kv for kv in w.stats.items())))
    m.save(a.model)
    if w.errors:
        for e in w.errors[:20]:
            print("MISMATCH:", e, file=sys.stderr)
        sys.exit(1)


def read_all(sock, lo, hi, bs, depth, check=None, order=None):
    """Read [lo, hi) in bs pieces with depth in flight, in ascending order
    or in the order of the piece numbers given; check(off, data)."""
    h = connect(sock)
    if order is None:
        order = range((hi - lo + bs - 1) // bs)
    pieces = iter(order)
    inflight = {}
    bad = []
    more = True
    while more or inflight:
        while more and len(inflight) < depth:
            k = next(pieces, None)
            if k is None:
                more = False
                break
            off = lo + k * bs
            n = min(bs, hi - off)
            buf = nbd.Buffer(n)
            inflight[h.aio_pread(buf, off)] = (off, buf)
        if not inflight:
            break
        h.poll(-1)
        while inflight:
            cookie = h.aio_peek_command_completed()
            if cookie <= 0:
                break
            o, buf = inflight.pop(cookie)
            h.aio_command_completed(cookie)
            if check:
                msg = check(o, buf.to_bytearray())
                if msg:
                    bad.append(msg)
    h.shutdown()
    return bad


def cmd_verify_export(a):
    m = Model.load(a.model)
    hi = a.hi or len(m.data)
    bad = read_all(a.sock, a.lo, hi, 4 << 20, 4, m.mismatch)
    if bad:
        for b in bad[:10]:
            print("MISMATCH:", b, file=sys.stderr)
        sys.exit(1)
    print("export matches the model: %d bytes" % (hi - a.lo))


def cmd_verify_file(a):
    m = Model.load(a.model)
    bad = []
    with open(a.sock, "rb") as f:
        off = 0
        while off < len(m.data):
            got = f.read(4 << 20)
            if not got:
                bad.append("file ends at %d, model is %d bytes" % (off, len(m.data)))
                break
            msg = m.mismatch(off, got)
            if msg:
                bad.append(msg)
            off += len(got)
    if bad:
        for b in bad[:10]:
            print("MISMATCH:", b, file=sys.stderr)
        sys.exit(1)
    print("%s matches the model" % a.sock)


def cmd_absorb(a):
    m = Model.load(a.model)

    def take(off, data):
        m.write(off, data)
    read_all(a.sock, a.lo, a.hi, 4 << 20, 4, take)
    m.save(a.model)


def cmd_read(a):
    """Read a range, in order or shuffled, optionally checked against a
    file holding what the export should hold."""
    check = None
    if a.check:
        f = open(a.check, "rb")
        ref = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

        def check(off, data):
            if data != ref[off:off + len(data)]:
                return "read at %d differs from %s" % (off, a.check)
    rnd = random.Random(a.seed)
    bad = []
    for _ in range(a.passes):
        order = None
        if a.shuffle:
            order = list(range((a.hi - a.lo + a.bs - 1) // a.bs))
            rnd.shuffle(order)
        bad += read_all(a.sock, a.lo, a.hi, a.bs, a.depth, check, order)
    if bad:
        for b in bad[:10]:
            print("MISMATCH:", b, file=sys.stderr)
        sys.exit(1)


def cmd_status(a):
    """Values from 'tiercache status --json' output on stdin, one a line
    (figures.py, which the shell helpers call directly: it starts faster)."""
    import json
    from figures import figures
    for line in figures(json.load(sys.stdin), a.paths):
        print(line)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("workload")
    w.add_argument("sock")
    w.add_argument("model")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--ops", type=int, default=5000)
    w.add_argument("--seconds", type=float, default=0)
    w.add_argument("--depth", type=int, default=8)
    w.add_argument("--lo", type=int, default=0)
    w.add_argument("--hi", type=int, default=0)
    w.add_argument("--hot", type=int, default=0)
    w.add_argument("--hot-at", type=int, default=0)
    w.add_argument("--max-len", type=int, default=0, help="longest request in bytes")
    w.add_argument("--mix", default="3,45,36,8,8",
                   help="weights of flush,read,write,trim,write-zeroes")
    w.set_defaults(fn=cmd_workload)
    for name, fn in (("verify-export", cmd_verify_export), ("verify-file", cmd_verify_file)):
        v = sub.add_parser(name)
        v.add_argument("sock")
        v.add_argument("model")
        v.add_argument("--lo", type=int, default=0)
        v.add_argument("--hi", type=int, default=0)
        v.set_defaults(fn=fn)
    b = sub.add_parser("absorb")
    b.add_argument("sock")
    b.add_argument("model")
    b.add_argument("--lo", type=int, required=True)
    b.add_argument("--hi", type=int, required=True)
    b.set_defaults(fn=cmd_absorb)
    r = sub.add_parser("read")
    r.add_argument("sock")
    r.add_argument("--lo", type=int, required=True)
    r.add_argument("--hi", type=int, required=True)
    r.add_argument("--bs", type=int, default=65536)
    r.add_argument("--depth", type=int, default=8)
    r.add_argument("--passes", type=int, default=1)
    r.add_argument("--shuffle", action="store_true", help="random order (no sequential stream)")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--check", help="a file with the expected content")
    r.set_defaults(fn=cmd_read)
    st = sub.add_parser("status")
    st.add_argument("paths", nargs="+")
    st.set_defaults(fn=cmd_status)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()


# ---- The daemons of the cleaner's bound tests (cleanerbound.py,
# recordbound.py): a small cache over an origin file of tagged blocks,
# requests each waited for with a bound (a request that never completes is
# a wedged cleaner: the status is printed and the test ends). ----

BOUND_WAIT = 120                # seconds a request may take (a loaded machine)


def ctl_status(sock, timeout=BOUND_WAIT):
    """The status JSON of the daemon serving on sock (x.sock: its control
    socket is x.ctl, src/ctl/ctl.h), read from the control socket as
    'tiercache status --json' does -- without a process per call, which
    under the sanitizer build took a tenth of a second or more each, and
    these tests poll the status between requests."""
    import socket
    path = sock[:-len(".sock")] + ".ctl" if sock.endswith(".sock") else sock + ".ctl"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(b"status\n")
        parts = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            parts.append(b)
    text = b"".join(parts).decode()
    if text.startswith("error: "):
        raise RuntimeError(f"status: {text.strip()}")
    return json.loads(text)


def magic_block_pattern(magic, b, gen, block, sector=4096):
    """Block b's data of generation gen: each sector 8 bytes of magic, b
    and gen, then a ramp."""
    head = magic + struct.pack("<QQ", b, gen)
    return (head + ramp(b * 7 + gen, sector - len(head))) * (block // sector)


def make_bound_set(binary, directory, pattern, nblocks, block, devices, segment=1 << 20):
    """origin.img of nblocks blocks, pattern(b, 1) each, and a cache set of
    the devices ((name, MiB), ...) in directory, formatted; returns the
    generations {block: 1}."""
    with open(f"{directory}/origin.img", "wb") as f:
        for b in range(nblocks):
            f.write(pattern(b, 1))
    for name, mib in devices:
        with open(f"{directory}/{name}", "wb") as f:
            f.truncate(mib << 20)
    subprocess.run([binary, "format", "--cache",
                    ",".join(f"{directory}/{name}" for name, _ in devices),
                    "--origin", f"{directory}/origin.img",
                    "--segment-size", str(segment), "--block-size", str(block)],
                   check=True, stdout=subprocess.DEVNULL)
    return {b: 1 for b in range(nblocks)}


BOUND_DAEMONS = []              # killed at exit if still running


def kill_bound_daemons():
    for p in BOUND_DAEMONS:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(kill_bound_daemons)


class BoundDaemon(Serve):
    """tiercache serve in the foreground over DIR/origin.img and the cache
    given, policy lru, no sequential cutoff, on DIR/s.sock, its output
    appended to DIR/daemon.log; self.h a connected handle."""

    def __init__(self, binary, directory, cache, mode="writeback", extra=(), env=None):
        super().__init__(binary, directory,
                         ["--origin", f"{directory}/origin.img", "--cache", cache, "--mode", mode,
                          "--policy", "lru", "--sequential-cutoff", "0", *extra],
                         env=dict(os.environ, **(env or {})))
        BOUND_DAEMONS.append(self.proc)

    def wedged(self, what):
        try:
            st = json.dumps(self.status(), indent=1)
        except Exception as e:          # noqa: BLE001
            st = f"(no status: {e})"
        self.proc.kill()
        self.proc.wait()
        sys.exit(f"WEDGED: {what} did not complete within {BOUND_WAIT} s\nstatus:\n{st}\n"
                 f"daemon log:\n{self.logtext()[-3000:]}")

    def wait_request(self, what, cookie):
        """Wait for the request (its cookie) for BOUND_WAIT seconds at
        most: True if it succeeded, False if it failed."""
        deadline = time.monotonic() + BOUND_WAIT
        while True:
            try:
                if self.h.aio_command_completed(cookie):
                    return True
            except nbd.Error:
                return False
            if time.monotonic() > deadline:
                self.wedged(what)
            self.h.poll(1000)

    def wait_status(self, what, cond):
        """The status once cond(status) holds, polled; wedged after
        BOUND_WAIT seconds."""
        deadline = time.monotonic() + BOUND_WAIT
        while True:
            st = self.status()
            if cond(st):
                return st
            if time.monotonic() > deadline:
                self.wedged(what)
            time.sleep(0.02)

    def stop(self):
        """SIGTERM after the handle's disconnect; a clean exit within
        BOUND_WAIT seconds, or the test ends."""
        self.h.shutdown()
        del self.h
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(BOUND_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            sys.exit(f"WEDGED: the daemon did not stop within {BOUND_WAIT} s\n"
                     f"{self.logtext()[-3000:]}")
        if rc != 0:
            sys.exit(f"daemon exit status {rc} after SIGTERM\n{self.logtext()[-3000:]}")
