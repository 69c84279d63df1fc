# stateproofs.py STATEFILE DEVICE [BLOCK:SECTOR ...]: overwrite with 0x5a
# the data that the state file's proofs (version 3, format/ondisk.h) name
# on DEVICE (device index 0) -- of the sectors listed, or of every one --,
# as damage after an abandonment would; prints how many.  Exit 1 if a
# listed sector has no proof, or the file is not version 3.
import struct, sys
b = open(sys.argv[1], "rb").read()
ver, = struct.unpack_from("<I", b, 8)
if ver != 3:
    sys.exit("state file version %d, 3 expected (proofs)" % ver)
spb, = struct.unpack_from("<I", b, 36)
count, = struct.unpack_from("<Q", b, 56)
words = (spb + 63) // 64
es = 8 + 8 * words + 12 * spb
want = {tuple(int(x) for x in a.split(":")) for a in sys.argv[3:]}
done = 0
with open(sys.argv[2], "r+b") as dev:
    for i in range(count):
        p = 72 + i * es
        ob, = struct.unpack_from("<Q", b, p)
        for s in range(spb):
            where, crc = struct.unpack_from("<QI", b, p + 8 + 8 * words + 12 * s)
            if where and (not want or (ob, s) in want):
                if where >> 56 != 1:
                    sys.exit("a proof names device %d" % ((where >> 56) - 1))
                dev.seek((where & ((1 << 56) - 1)) * 4096)
                dev.write(b"\x5a" * 4096)
                done += 1
print(done, "proven sectors damaged")
if want and done != len(want):
    sys.exit("found %d of the %d sectors' proofs" % (done, len(want)))
