#!/usr/bin/python3
"""Seed inputs for the fuzz harnesses, in each harness's input format (see
the comment at the top of tests/fuzz/fuzz_*.c).  Called by
tests/fuzz/mkcorpus, which captures real clients and makes real caches.

    seeds.py nbd CAPTURE NAME CORPUS        one captured client stream
    seeds.py nbd-synth CORPUS               hand-made NBD inputs
    seeds.py cache NAME CORPUS DEV [DEV...] superblocks and chunk headers of
                                            one cache set (after a workload)
    seeds.py statefiles CORPUS              state files and sequence records of
                                            every version, made by hand

CORPUS is tests/fuzz/corpus; each kind of seed goes to its harness's
folder.  Names are stable so that a rerun replaces rather than adds.
"""
import os
import struct
import sys

IHAVEOPT = 0x49484156454F5054
REQUEST_MAGIC = 0x25609513
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS, OPT_INFO, OPT_GO = 1, 2, 3, 5, 6, 7
OPT_STRUCTURED_REPLY, OPT_LIST_META, OPT_SET_META = 8, 9, 10
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM, CMD_CACHE, CMD_WZ, CMD_BS = range(8)
FUA, NO_HOLE, DF, REQ_ONE, FAST_ZERO = 1, 2, 4, 8, 16

# nbd_sim.h: byte 0 flags, byte 1 volume size (3: 2 MiB, the size of the
# volume the clients were captured on), bytes 2-5 seed.
SIZE_2M = 3
MAX_HANDSHAKE = 16384
MAX_TRANSMISSION = 65536
MAX_RECOVERY = 65536

TC_CHUNK_MAGIC = 0x014B4E5548434354
TC_SB_MAGIC = 0x0142534352454954


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC-32C as src/util/crc32c.c computes it."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# fuzz_recovery.c writes its own superblocks, for this set.
RECOVERY_SET_UUID = b"fuzz-cache-set!\0"


def as_recovery_set(hdr):
    """A chunk header moved to the recovery harness's set, its checksum
    made right again: valid as written, so no repair is needed."""
    h = bytearray(hdr)
    h[16:32] = RECOVERY_SET_UUID
    h[12:16] = bytes(4)
    h[12:16] = struct.pack("<I", crc32c(bytes(h)))
    return bytes(h)


def sim_hdr(flags=0, size=SIZE_2M, seed=1):
    return bytes([flags, size]) + struct.pack(">I", seed)


def write(corpus, harness, name, data):
    d = os.path.join(corpus, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def split_handshake(stream):
    """(how byte of fuzz_nbd_transmission.c, requests) of a client stream
    that reaches the transmission phase, or None."""
    if len(stream) < 4:
        return None
    (cflags,) = struct.unpack(">I", stream[:4])
    how = 8 if cflags & 2 else 0
    pos = 4
    while pos + 16 <= len(stream):
        magic, opt, ln = struct.unpack(">QII", stream[pos:pos + 16])
        if magic != IHAVEOPT:
            return None
        data = stream[pos + 16:pos + 16 + ln]
        pos += 16 + ln
        if opt == OPT_STRUCTURED_REPLY:
            how |= 1
        elif opt == OPT_SET_META:
            how |= 2
        elif opt == OPT_EXPORT_NAME:
            return how | 4 | (16 if data else 0), stream[pos:]
        elif opt == OPT_GO:
            (nl,) = struct.unpack(">I", data[:4])
            return how | (16 if nl else 0), stream[pos:]
    return None


def cmd_nbd(capture, name, corpus):
    stream = open(capture, "rb").read()
    if not stream:
        return
    write(corpus, "nbd_handshake", name, sim_hdr() + stream[:MAX_HANDSHAKE - 6])
    s = split_handshake(stream)
    if s:
        how, reqs = s
        write(corpus, "nbd_transmission", name,
              sim_hdr() + bytes([how]) + reqs[:MAX_TRANSMISSION - 7])


def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data


def go_data(name=b"", infos=()):
    return struct.pack(">I", len(name)) + name + struct.pack(">H", len(infos)) + \
        b"".join(struct.pack(">H", i) for i in infos)


def meta_data(name=b"", queries=()):
    return struct.pack(">I", len(name)) + name + struct.pack(">I", len(queries)) + \
        b"".join(struct.pack(">I", len(q)) + q for q in queries)


def req(t, cookie, off=0, ln=0, flags=0, payload=b""):
    return struct.pack(">IHHQQI", REQUEST_MAGIC, flags, t, cookie, off, ln) + payload


def cmd_nbd_synth(corpus):
    fixed = struct.pack(">I", 3)
    hs = {
        "options-all": fixed + opt(OPT_LIST) + opt(OPT_STRUCTURED_REPLY) +
        opt(OPT_LIST_META, meta_data(b"", [b"base:"])) +
        opt(OPT_LIST_META, meta_data(b"")) +
        opt(OPT_SET_META, meta_data(b"", [b"base:allocation", b"qemu:dirty-bitmap:x"])) +
        opt(OPT_INFO, go_data(b"", [0, 1, 2, 3])) + opt(OPT_STARTTLS) + opt(99) +
        opt(OPT_GO, go_data(b"fuzz", [1, 2])) + req(CMD_BS, 1, 0, 1 << 20, REQ_ONE) +
        req(CMD_DISC, 2),
        "options-malformed": fixed + opt(OPT_LIST, b"x") + opt(OPT_STRUCTURED_REPLY, b"x") +
        opt(OPT_SET_META, meta_data(b"", [b"base:allocation"])) +
        opt(OPT_INFO, b"\0\0\0") + opt(OPT_GO, struct.pack(">I", 5000) + b"\0\0") +
        opt(OPT_GO, go_data(b"", [1])[:-1]) + opt(OPT_GO, go_data(b"nope")) +
        opt(OPT_LIST_META, meta_data(b"", [b"base:"])[:-2]) + opt(OPT_ABORT),
        "option-oversized": fixed + struct.pack(">QII", IHAVEOPT, OPT_INFO, 70000) +
        bytes(200) + opt(OPT_ABORT),
        "export-name": struct.pack(">I", 1) + opt(OPT_EXPORT_NAME, b"") +
        req(CMD_READ, 7, 0, 512) + req(CMD_DISC, 8),
        "export-name-zeroes": struct.pack(">I", 0) + opt(OPT_EXPORT_NAME, b"fuzz") +
        req(CMD_FLUSH, 1),
        "export-name-unknown": fixed + opt(OPT_EXPORT_NAME, b"other"),
        "not-fixed-unknown-option": struct.pack(">I", 0) + opt(42),
        "bad-client-flags": struct.pack(">I", 0x80),
        "bad-option-magic": fixed + b"IHAVEOPX" + struct.pack(">II", OPT_GO, 0),
    }
    for name, s in hs.items():
        write(corpus, "nbd_handshake", "synth-" + name, sim_hdr(0x20) + s)

    payload = bytes(range(256)) * 16
    tx = {
        "every-command": req(CMD_READ, 1, 4096, 4096) +
        req(CMD_WRITE, 2, 8192, 4096, FUA, payload) + req(CMD_FLUSH, 3) +
        req(CMD_TRIM, 4, 0, 65536, FUA) + req(CMD_CACHE, 5, 0, 1 << 20) +
        req(CMD_WZ, 6, 65536, 65536, NO_HOLE | FUA) + req(CMD_WZ, 7, 0, 4096, FAST_ZERO) +
        req(CMD_BS, 8, 0, 1 << 20) + req(CMD_BS, 9, 4096, 8192, REQ_ONE) +
        req(CMD_READ, 10, 512, 1000, DF) + req(CMD_DISC, 11),
        "refused": req(CMD_READ, 1, (2 << 20) - 4096, 8192) + req(CMD_READ, 2, 0, 0) +
        req(9, 3) + req(CMD_READ, 4, 0, 4096, NO_HOLE) + req(CMD_WRITE, 5, 2 << 20, 4096,
                                                            0, payload) +
        req(CMD_WRITE, 6, 0, 4096, REQ_ONE, payload) + req(CMD_READ, 7, 0, 33 << 20) +
        req(CMD_TRIM, 8, 0xFFFFFFFFFFFFF000, 8192) + req(CMD_FLUSH, 9),
        "unaligned": req(CMD_WRITE, 1, 100, 300, 0, payload[:300]) +
        req(CMD_READ, 2, 1, 5000) + req(CMD_WZ, 3, 4095, 2),
        "write-pieces": b"".join(req(CMD_WRITE, i, i * 4096, 4096, 0, payload)
                                 for i in range(8)) + req(CMD_FLUSH, 99),
        "bad-magic": req(CMD_READ, 1, 0, 4096) + b"\x25\x60\x95\x14" + bytes(24),
        "oversized-write": req(CMD_WRITE, 1, 0, 64 << 20),
        "disc-then-more": req(CMD_READ, 1, 0, 4096) + req(CMD_DISC, 2) +
        req(CMD_READ, 3, 0, 4096),
        "same-cookie": req(CMD_READ, 5, 0, 4096) + req(CMD_WRITE, 5, 0, 4096, 0, payload) +
        req(CMD_READ, 5, 4096, 8192),
    }
    for name, s in tx.items():
        write(corpus, "nbd_transmission", "synth-" + name, sim_hdr() + bytes([3]) + s)
    write(corpus, "nbd_transmission", "synth-errors-stop",
          sim_hdr(0x5c, SIZE_2M, 7) + bytes([1]) + tx["every-command"])
    write(corpus, "nbd_transmission", "synth-read-only",
          sim_hdr(0x01) + bytes([0]) + tx["every-command"])


def log2(n):
    return n.bit_length() - 1


def cmd_cache(name, corpus, devs):
    """Superblocks, chunk headers and recovery images of one cache set."""
    images = []
    for i, path in enumerate(devs):
        img = open(path, "rb").read()
        sb = img[:4096]
        assert struct.unpack("<Q", sb[:8])[0] == TC_SB_MAGIC, path
        write(corpus, "superblock", "%s-dev%d" % (name, i), sb)
        block, segsize = struct.unpack("<II", sb[64:72])
        data_offset, nsegs = struct.unpack("<QI", sb[72:84])
        index, = struct.unpack("<I", sb[48:52])
        origin_size, = struct.unpack("<Q", sb[96:104])
        images.append((index, img, block, segsize, data_offset, nsegs, origin_size))
    images.sort()
    block, segsize, origin_size = images[0][2], images[0][3], images[0][6]
    spb = block // 4096
    seg_sectors = segsize // 4096
    chunk_seeds = []
    records = []
    for dev, img, _, _, data_offset, nsegs, _ in images:
        for s in range(nsegs):
            base = data_offset + s * segsize
            at = 0
            while at + 1 < seg_sectors:
                h = img[base + at * 4096:base + (at + 8) * 4096]
                if len(h) < 128 or struct.unpack("<Q", h[:8])[0] != TC_CHUNK_MAGIC:
                    break
                hs, flags, ds, ne = struct.unpack("<HHII", h[72:84])
                if not 1 <= hs <= 8:
                    break
                hdr = h[:hs * 4096]
                chunk_seeds.append((ne, ds, hs, hdr))
                records.append((dev, s, at, hdr))
                at += hs + ds
                if flags & 1:
                    break
    # A few chunk headers: different entry counts and sizes.
    chunk_seeds.sort(key=lambda c: (c[0], c[1]))
    picked = chunk_seeds[::max(1, len(chunk_seeds) // 6)][:6]
    for i, (ne, ds, hs, hdr) in enumerate(picked):
        seed = bytes([log2(spb), log2(seg_sectors // 256), hs << 2]) + hdr.rstrip(b"\0")
        write(corpus, "chunk", "%s-%d-entries%d-data%d" % (name, i, ne, ds), seed)
    # Recovery: the whole set's chunk headers, as records.
    if len(images) > 2 or segsize > (4 << 20) or origin_size // block > 65536:
        return
    nsegs = [img[5] for img in images] + [1]
    if max(nsegs) > 40:
        return
    for repair in (2, 0):
        hdr = bytes([repair | (4 if len(images) == 2 else 0), log2(spb), log2(segsize >> 20),
                     (nsegs[0] - 1) % 40, (nsegs[1] - 1) % 40]) + \
            struct.pack("<H", origin_size // block - 1)
        out = bytearray(hdr)
        for dev, s, at, data in records:
            if repair == 0:
                data = as_recovery_set(data)
            data = data.rstrip(b"\0")
            rec = struct.pack("<BIH", (dev << 7) | s, at * 4096, len(data)) + data
            if len(out) + len(rec) > MAX_RECOVERY:
                break
            out += rec
        write(corpus, "recovery", "%s-repair%d" % (name, repair), bytes(out))


TC_STATE_MAGIC = 0x0145544154534354
TC_SEQREC_MAGIC = 0x0143525145534354
TC_MAX_DEVICES = 16
TC_ORIGIN_ID_LEN = 128


def with_crc(buf):
    """The file with its CRC-32C (bytes 12..15, zero while computed) set."""
    buf = bytearray(buf)
    buf[12:16] = b"\0\0\0\0"
    buf[12:16] = struct.pack("<I", crc32c(bytes(buf)))
    return bytes(buf)


def state_file(version, flags, spb, entries, abandoned_seq=0, stop_seq=0):
    """A state file (ondisk.h); entries: (block, lost mask, extra), extra
    being the proofs [(sector, where, crc)] of version 3 or the (marks,
    digest) of version 4."""
    words = (spb + 63) // 64
    out = bytearray(struct.pack("<QII16sIIQQQ", TC_STATE_MAGIC, version, 0, b"fuzz-cache-set!\0",
                                flags, spb, abandoned_seq, 1800000000 * 10**9, len(entries)))
    if version >= 2:
        out += struct.pack("<Q", stop_seq)
    for block, mask, extra in entries:
        out += struct.pack("<Q", block)
        out += b"".join(struct.pack("<Q", (mask >> (64 * w)) & (2**64 - 1)) for w in range(words))
        if version == 3:
            proofs = bytearray(12 * spb)
            for sector, where, crc in extra:
                proofs[12 * sector:12 * sector + 12] = struct.pack("<QI", where, crc)
            out += proofs
        elif version == 4:
            marks, digest = extra
            out += b"".join(struct.pack("<Q", (marks >> (64 * w)) & (2**64 - 1))
                            for w in range(words))
            out += struct.pack("<II", digest, 0)
    return with_crc(out)


def seqrec(version, ndevs, chunk_seq, dev_chunks=(), token=b"", marks=()):
    """A sequence record (ondisk.h) of the given version."""
    out = bytearray(struct.pack("<QII16sIIQQQ", TC_SEQREC_MAGIC, version, 0, b"fuzz-cache-set!\0",
                                ndevs, 0, chunk_seq, 1800000000 * 10**9, 1 << 30))
    for i in range(TC_MAX_DEVICES):
        out += (b"dev-uuid-%02d....." % i)[:16] if i < ndevs else bytes(16)
    out += b"file:/srv/origin.img".ljust(TC_ORIGIN_ID_LEN, b"\0")
    if version >= 2:
        out += b"".join(struct.pack("<Q", dev_chunks[i] if i < len(dev_chunks) else 0)
                        for i in range(TC_MAX_DEVICES))
    if version >= 3:
        out += token.ljust(16, b"\0")
    if version >= 4:
        out += b"".join(struct.pack("<Q", marks[i] if i < len(marks) else 0)
                        for i in range(TC_MAX_DEVICES))
    return with_crc(out)


def cmd_statefiles(corpus):
    """Seeds of the statefiles harness: byte 0 bit 0 picks the sequence
    record, bit 1 repairs the checksum (fuzz_statefiles.c)."""
    abandoned, stop_lost, stop_drops = 1, 2, 4
    where = (1 << 56) | 4096
    seeds = {
        "state-v1-abandoned": state_file(1, abandoned, 16, [(7, 0xffff, None), (9, 0x1, None)],
                                         abandoned_seq=120),
        "state-v1-empty": state_file(1, abandoned, 16, [], abandoned_seq=5),
        "state-v2-stop-lost": state_file(2, stop_lost, 16, [(3, 0xf0, None)], stop_seq=300),
        "state-v2-stop-drops": state_file(2, abandoned | stop_lost | stop_drops, 128,
                                          [(1, (1 << 128) - 1, None), (2, 0, None)],
                                          abandoned_seq=10, stop_seq=400),
        "state-v3-proofs": state_file(3, abandoned, 16,
                                      [(5, 0x3, [(0, where, 0x1234), (1, where + 1, 0x5678)])],
                                      abandoned_seq=77),
        "state-v3-4k": state_file(3, abandoned, 1, [(0, 1, [(0, where, 9)])], abandoned_seq=2),
        "state-v4-marks": state_file(4, abandoned, 16, [(11, 0xff, (0x0f, 0xdeadbeef)),
                                                        (12, 0x1, (0, 0))], abandoned_seq=50),
        "state-v4-256": state_file(4, abandoned | stop_lost, 256,
                                   [(4, (1 << 256) - 1, ((1 << 200) - 1, 42))],
                                   abandoned_seq=60, stop_seq=90),
    }
    for name, data in seeds.items():
        write(corpus, "statefiles", name, bytes([2]) + data)
    records = {
        "seqrec-v1": seqrec(1, 1, 500),
        "seqrec-v2": seqrec(2, 2, 900, dev_chunks=(900, 850)),
        "seqrec-v3": seqrec(3, 3, 1000, dev_chunks=(1000, 0, 990), token=b"state-token-0001"),
        "seqrec-v4": seqrec(4, 2, 2000, dev_chunks=(2000, 1500), token=b"state-token-0002",
                            marks=(0, 1700)),
    }
    for name, data in records.items():
        write(corpus, "statefiles", name, bytes([3]) + data)


def main():
    cmd = sys.argv[1]
    if cmd == "nbd":
        cmd_nbd(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "nbd-synth":
        cmd_nbd_synth(sys.argv[2])
    elif cmd == "cache":
        cmd_cache(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "statefiles":
        cmd_statefiles(sys.argv[2])
    else:
        sys.exit("seeds.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
