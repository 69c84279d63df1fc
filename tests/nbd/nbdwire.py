"""A minimal NBD client speaking the wire format itself, for the protocol
tests: it sends exactly the bytes it is told to (including wrong ones) and
checks every byte the server sends back.

    c = Conn(path)                      # connect, read and check the greeting
    c.client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
    c.structured_reply()                # NBD_OPT_STRUCTURED_REPLY, expects ACK
    c.set_meta(["base:allocation"])     # returns [(id, name), ...]
    size, flags = c.go()                # NBD_OPT_GO on the default export
    r = c.cmd(CMD_READ, 0, 4096)        # send one request, wait for its reply
    r.error, r.data, r.extents

Or all of that at once: open_export(path).  Every integer is big-endian
(proto.md).  A read that would block longer than the timeout raises
socket.timeout; the server closing the connection raises Closed.
"""
import json
import random
import socket
import struct

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x0003E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_MAGIC = 0x67446698
STRUCTURED_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE = 1 << 0
FLAG_NO_ZEROES = 1 << 1
FLAG_C_FIXED_NEWSTYLE = 1 << 0
FLAG_C_NO_ZEROES = 1 << 1

OPT_EXPORT_NAME = 1
OPT_ABORT = 2
OPT_LIST = 3
OPT_STARTTLS = 5
OPT_INFO = 6
OPT_GO = 7
OPT_STRUCTURED_REPLY = 8
OPT_LIST_META_CONTEXT = 9
OPT_SET_META_CONTEXT = 10

REP_ACK = 1
REP_SERVER = 2
REP_INFO = 3
REP_META_CONTEXT = 4
REP_ERR_UNSUP = 0x80000001
REP_ERR_POLICY = 0x80000002
REP_ERR_INVALID = 0x80000003
REP_ERR_PLATFORM = 0x80000004
REP_ERR_TLS_REQD = 0x80000005
REP_ERR_UNKNOWN = 0x80000006
REP_ERR_SHUTDOWN = 0x80000007
REP_ERR_BLOCK_SIZE_REQD = 0x80000008
REP_ERR_TOO_BIG = 0x80000009

INFO_EXPORT = 0
INFO_NAME = 1
INFO_DESCRIPTION = 2
INFO_BLOCK_SIZE = 3

TFLAG_HAS_FLAGS = 1 << 0
TFLAG_READ_ONLY = 1 << 1
TFLAG_SEND_FLUSH = 1 << 2
TFLAG_SEND_FUA = 1 << 3
TFLAG_SEND_TRIM = 1 << 5
TFLAG_SEND_WRITE_ZEROES = 1 << 6
TFLAG_SEND_DF = 1 << 7
TFLAG_CAN_MULTI_CONN = 1 << 8
TFLAG_SEND_CACHE = 1 << 10
TFLAG_SEND_FAST_ZERO = 1 << 11

CMD_READ = 0
CMD_WRITE = 1
CMD_DISC = 2
CMD_FLUSH = 3
CMD_TRIM = 4
CMD_CACHE = 5
CMD_WRITE_ZEROES = 6
CMD_BLOCK_STATUS = 7

CMD_FLAG_FUA = 1 << 0
CMD_FLAG_NO_HOLE = 1 << 1
CMD_FLAG_DF = 1 << 2
CMD_FLAG_REQ_ONE = 1 << 3
CMD_FLAG_FAST_ZERO = 1 << 4

REPLY_FLAG_DONE = 1 << 0
REPLY_TYPE_NONE = 0
REPLY_TYPE_OFFSET_DATA = 1
REPLY_TYPE_OFFSET_HOLE = 2
REPLY_TYPE_BLOCK_STATUS = 5
REPLY_TYPE_ERROR = (1 << 15) | 1
REPLY_TYPE_ERROR_OFFSET = (1 << 15) | 2

STATE_HOLE = 1 << 0
STATE_ZERO = 1 << 1

EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN = 1, 5, 12, 22, 28, 75, 95, 108
ERRNAMES = {0: "OK", 1: "EPERM", 5: "EIO", 12: "ENOMEM", 22: "EINVAL", 28: "ENOSPC",
            75: "EOVERFLOW", 95: "ENOTSUP", 108: "ESHUTDOWN"}


class Closed(Exception):
    """The server closed the connection."""


class ProtocolError(Exception):
    """The server sent something the protocol does not allow."""


def check(cond, what):
    if not cond:
        raise ProtocolError(what)


class OptReply:
    def __init__(self, opt, rtype, data):
        self.opt, self.type, self.data = opt, rtype, data

    @property
    def is_error(self):
        return bool(self.type & 0x80000000)

    def __repr__(self):
        return "OptReply(opt=%d, type=0x%x, %d bytes)" % (self.opt, self.type, len(self.data))


class Reply:
    """The whole reply to one request."""

    def __init__(self, cookie):
        self.cookie = cookie
        self.kind = None            # "simple" or "structured"
        self.error = 0
        self.message = b""
        self.data = None            # READ: the bytes, assembled
        self.extents = {}           # BLOCK_STATUS: context id -> [(length, flags)]
        self.chunks = []            # structured: [(flags, type, payload)]

    def __repr__(self):
        return "Reply(%s, error=%s, message=%r)" % (self.kind, ERRNAMES.get(self.error,
                                                    self.error), self.message)


class Conn:
    def __init__(self, path, timeout=10.0, greet=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.pending = {}           # cookie -> (type, offset, length)
        self.next_cookie = 1
        self.structured = False
        self.no_zeroes = False
        self.size = None
        self.tflags = None
        self.gflags = None
        if greet:
            self.read_greeting()

    # ---- bytes ----

    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise Closed("server closed the connection after %d of %d bytes" % (got, n))
            got += k
        return bytes(buf)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def expect_closed(self, timeout=5.0):
        """The server ends the connection (EOF or reset) within timeout,
        sending nothing more than the bytes it returns."""
        self.sock.settimeout(timeout)
        got = bytearray()
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return bytes(got)
                got += chunk
        except ConnectionResetError:
            return bytes(got)

    # ---- handshake ----

    def read_greeting(self):
        magic, opt, gflags = struct.unpack(">QQH", self.recv_exact(18))
        check(magic == NBDMAGIC, "bad NBDMAGIC 0x%x" % magic)
        check(opt == IHAVEOPT, "not a newstyle server: 0x%x" % opt)
        check(gflags & FLAG_FIXED_NEWSTYLE, "server is not fixed newstyle")
        self.gflags = gflags
        return gflags

    def client_flags(self, flags=FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES):
        self.no_zeroes = bool(flags & FLAG_C_NO_ZEROES)
        self.send(struct.pack(">I", flags))

    def send_option(self, opt, data=b"", length=None):
        if length is None:
            length = len(data)
        self.send(struct.pack(">QII", IHAVEOPT, opt, length) + data)

    def read_opt_reply(self, opt):
        magic, ropt, rtype, length = struct.unpack(">QIII", self.recv_exact(20))
        check(magic == REP_MAGIC, "bad option reply magic 0x%x" % magic)
        check(ropt == opt, "reply for option %d, expected %d" % (ropt, opt))
        data = self.recv_exact(length)
        return OptReply(ropt, rtype, data)

    def option(self, opt, data=b""):
        """Send one option; return every reply up to and including the
        final one (ACK or an error)."""
        self.send_option(opt, data)
        replies = []
        while True:
            r = self.read_opt_reply(opt)
            replies.append(r)
            if r.type == REP_ACK or r.is_error:
                return replies

    def structured_reply(self):
        r = self.option(OPT_STRUCTURED_REPLY)
        check(len(r) == 1 and r[0].type == REP_ACK, "STRUCTURED_REPLY not acknowledged: %r" % r)
        self.structured = True

    @staticmethod
    def meta_data(export, queries):
        d = struct.pack(">I", len(export)) + export + struct.pack(">I", len(queries))
        for q in queries:
            q = q.encode() if isinstance(q, str) else q
            d += struct.pack(">I", len(q)) + q
        return d

    def meta(self, opt, queries, export=b""):
        """LIST or SET_META_CONTEXT: ([(id, name)], final reply)."""
        replies = self.option(opt, self.meta_data(export, queries))
        out = []
        for r in replies[:-1]:
            check(r.type == REP_META_CONTEXT, "unexpected reply type 0x%x" % r.type)
            check(len(r.data) >= 4, "short META_CONTEXT reply")
            out.append((struct.unpack(">I", r.data[:4])[0], r.data[4:].decode()))
        return out, replies[-1]

    def set_meta(self, queries, export=b""):
        ctx, final = self.meta(OPT_SET_META_CONTEXT, queries, export)
        check(final.type == REP_ACK, "SET_META_CONTEXT failed: 0x%x" % final.type)
        return ctx

    @staticmethod
    def info_data(export, requests=()):
        return (struct.pack(">I", len(export)) + export + struct.pack(">H", len(requests)) +
                b"".join(struct.pack(">H", t) for t in requests))

    def info(self, opt, export=b"", requests=()):
        """INFO or GO: (dict of information by type, final reply).  On
        success after GO the connection is in the transmission phase."""
        replies = self.option(opt, self.info_data(export, requests))
        infos = {}
        for r in replies[:-1]:
            check(r.type == REP_INFO, "unexpected reply type 0x%x" % r.type)
            check(len(r.data) >= 2, "short INFO reply")
            t = struct.unpack(">H", r.data[:2])[0]
            body = r.data[2:]
            if t == INFO_EXPORT:
                check(len(body) == 10, "NBD_INFO_EXPORT of %d bytes" % len(body))
                infos[t] = struct.unpack(">QH", body)
            elif t == INFO_BLOCK_SIZE:
                check(len(body) == 12, "NBD_INFO_BLOCK_SIZE of %d bytes" % len(body))
                infos[t] = struct.unpack(">III", body)
            elif t in (INFO_NAME, INFO_DESCRIPTION):
                infos[t] = body.decode()
            else:
                infos[t] = body
        final = replies[-1]
        if final.type == REP_ACK:
            check(INFO_EXPORT in infos, "no NBD_INFO_EXPORT before the ACK")
            if opt == OPT_GO:
                self.size, self.tflags = infos[INFO_EXPORT]
        return infos, final

    def go(self, export=b"", requests=()):
        infos, final = self.info(OPT_GO, export, requests)
        check(final.type == REP_ACK, "GO failed: 0x%x %r" % (final.type, final.data))
        return self.size, self.tflags

    def export_name(self, export=b""):
        """NBD_OPT_EXPORT_NAME: no option reply, straight to the export's
        size and flags (and 124 zeroes unless NO_ZEROES was agreed)."""
        self.send_option(OPT_EXPORT_NAME, export)
        self.size, self.tflags = struct.unpack(">QH", self.recv_exact(10))
        if not self.no_zeroes:
            pad = self.recv_exact(124)
            check(pad == bytes(124), "the 124 bytes after the export flags are not zero")
        return self.size, self.tflags

    # ---- transmission ----

    def request(self, cmd, offset=0, length=0, flags=0, data=None, cookie=None):
        if cookie is None:
            cookie = self.next_cookie
            self.next_cookie += 1
        if data is None:
            data = b""
        self.send(struct.pack(">IHHQQI", REQUEST_MAGIC, flags, cmd, cookie, offset, length) + data)
        self.pending[cookie] = (cmd, offset, length)
        return cookie

    def reply(self):
        """Read one complete reply (all chunks of a structured one)."""
        magic = struct.unpack(">I", self.recv_exact(4))[0]
        if magic == SIMPLE_MAGIC:
            error, cookie = struct.unpack(">IQ", self.recv_exact(12))
            check(cookie in self.pending, "reply for unknown cookie %d" % cookie)
            cmd, offset, length = self.pending.pop(cookie)
            r = Reply(cookie)
            r.kind = "simple"
            r.error = error
            if self.structured:
                check(cmd != CMD_READ, "simple reply to a READ after structured replies")
                check(cmd != CMD_BLOCK_STATUS or error, "simple success reply to BLOCK_STATUS")
            if cmd == CMD_READ and error == 0:
                r.data = self.recv_exact(length)
            return r
        check(magic == STRUCTURED_MAGIC, "bad reply magic 0x%08x" % magic)
        check(self.structured, "structured reply without negotiating it")
        first = True
        r = None
        while True:
            if not first:
                magic = struct.unpack(">I", self.recv_exact(4))[0]
                check(magic == STRUCTURED_MAGIC, "bad chunk magic 0x%08x" % magic)
            first = False
            flags, rtype, cookie, length = struct.unpack(">HHQI", self.recv_exact(16))
            payload = self.recv_exact(length)
            check(cookie in self.pending, "chunk for unknown cookie %d" % cookie)
            if r is None:
                r = Reply(cookie)
                r.kind = "structured"
                cmd, offset, rlen = self.pending[cookie]
                pieces = []             # READ: (offset in the request, bytes)
            else:
                check(cookie == r.cookie, "chunks of two replies interleaved (fine by the "
                      "protocol, but this client does not expect it here)")
            r.chunks.append((flags, rtype, payload))
            if rtype == REPLY_TYPE_ERROR or rtype == REPLY_TYPE_ERROR_OFFSET:
                check(len(payload) >= 6, "short error chunk")
                err, mlen = struct.unpack(">IH", payload[:6])
                check(err != 0, "error chunk with error 0")
                check(6 + mlen <= len(payload), "error message longer than the chunk")
                r.error = err
                r.message = payload[6:6 + mlen]
            elif rtype == REPLY_TYPE_OFFSET_DATA:
                check(cmd == CMD_READ, "data chunk for command %d" % cmd)
                o = struct.unpack(">Q", payload[:8])[0]
                d = payload[8:]
                check(offset <= o and o + len(d) <= offset + rlen, "data chunk outside the request")
                pieces.append((o - offset, d))
            elif rtype == REPLY_TYPE_OFFSET_HOLE:
                check(cmd == CMD_READ, "hole chunk for command %d" % cmd)
                o, hl = struct.unpack(">QI", payload)
                check(offset <= o and o + hl <= offset + rlen, "hole chunk outside the request")
                pieces.append((o - offset, bytes(hl)))
            elif rtype == REPLY_TYPE_BLOCK_STATUS:
                check(cmd == CMD_BLOCK_STATUS, "block status chunk for command %d" % cmd)
                check(len(payload) >= 12 and (len(payload) - 4) % 8 == 0,
                      "block status chunk of %d bytes" % len(payload))
                ctx = struct.unpack(">I", payload[:4])[0]
                check(ctx not in r.extents, "two block status chunks for context %d" % ctx)
                r.extents[ctx] = [struct.unpack(">II", payload[i:i + 8])
                                  for i in range(4, len(payload), 8)]
            elif rtype == REPLY_TYPE_NONE:
                check(length == 0, "NONE chunk with a payload")
            else:
                raise ProtocolError("unknown chunk type %d" % rtype)
            if flags & REPLY_FLAG_DONE:
                break
        del self.pending[r.cookie]
        if cmd == CMD_READ:
            if r.error == 0:
                # The chunks must cover the range exactly once.
                pieces.sort(key=lambda p: p[0])
                pos = 0
                for o, d in pieces:
                    check(o == pos, "READ reply chunks leave a gap or overlap at %d" % pos)
                    pos += len(d)
                check(pos == rlen, "READ reply covers %d of %d bytes" % (pos, rlen))
                r.data = b"".join(d for _, d in pieces)
            else:
                r.data = None
        return r

    def cmd(self, cmd, offset=0, length=0, flags=0, data=None):
        """One request, then its reply."""
        if cmd == CMD_WRITE and data is not None and length == 0:
            length = len(data)
        cookie = self.request(cmd, offset, length, flags, data)
        r = self.reply()
        check(r.cookie == cookie, "reply for cookie %d, expected %d" % (r.cookie, cookie))
        return r

    def read(self, offset, length, flags=0):
        r = self.cmd(CMD_READ, offset, length, flags)
        if r.error:
            raise ProtocolError("READ %d+%d failed: %r" % (offset, length, r))
        return r.data

    def write(self, offset, data, flags=0):
        r = self.cmd(CMD_WRITE, offset, len(data), flags, data)
        if r.error:
            raise ProtocolError("WRITE %d+%d failed: %r" % (offset, len(data), r))

    def disconnect(self):
        self.send(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_DISC, 0, 0, 0))
        self.close()


def ctl_status(ctl_path):
    """The daemon's figures, straight from its control socket (what
    `tiercache status --json` prints), without starting a process."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(ctl_path)
    s.sendall(b"status\n")
    out = bytearray()
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    text = out.decode()
    if text.startswith("error: "):
        raise RuntimeError(text.strip())
    return json.loads(text)


def open_export(path, structured=True, meta=True, export=b"", timeout=10.0):
    """A connection in the transmission phase, negotiated the modern way."""
    c = Conn(path, timeout)
    c.client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
    if structured:
        c.structured_reply()
        if meta:
            ctx = c.set_meta(["base:allocation"], export)
            check(len(ctx) == 1 and ctx[0][1] == "base:allocation", "no base:allocation: %r" % ctx)
            c.meta_id = ctx[0][0]
    c.go(export)
    return c


def pattern(seed, n):
    """n reproducible pseudo-random bytes."""
    return random.Random(seed).randbytes(n)
