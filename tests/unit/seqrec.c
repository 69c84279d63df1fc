/*
 * The sequence record (format/ondisk.h, format/seqrec.c): encode, decode
 * and check.  A version 4 record round-trips field by field, each
 * device's chunk and failure mark and the state token included; changing
 * any one byte makes seqrec_decode() refuse it; a version 1 record (448
 * bytes, no device chunks) is read, with every device's chunk 0 ("not
 * known"), a version 2 one (576 bytes) with its chunks, a version 3 one
 * (592) with its token; none has marks; a version 1 record of 576 bytes,
 * a version 2 one of 448 or 720, and versions 0 and 5 are refused; a
 * device chunk above the set's, or a chunk or a mark given for a slot
 * beyond the device count, is refused.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"
#include "util/misc.h"

#include "check.h"

static uint8_t buf[TC_SEQREC_BYTES];
static char err[256];

static struct tc_seqrec sample(void)
{
    struct tc_seqrec r;
    memset(&r, 0, sizeof r);
    for (unsigned i = 0; i < 16; i++)
        r.set_uuid[i] = (uint8_t)(i + 1);
    r.ndevs = 3;
    r.chunk_seq = 1000;
    r.written_ns = 1234567890123456789ull;
    r.origin_size = 8ull << 30;
    for (unsigned d = 0; d < r.ndevs; d++) {
        memset(r.dev_uuids[d], 0x40 + (int)d, 16);
        r.dev_chunk[d] = 998 + d;       /* the last one at the set's: allowed */
    }
    snprintf(r.origin_id, sizeof r.origin_id, "file:dev=2049,ino=12");
    memset(r.token, 0x7c, 16);
    r.dev_mark[1] = 4321;
    return r;
}

/* buf, re-checksummed over its first len bytes. */
static void reseal(size_t len)
{
    le32_put(buf + 12, tc_crc32c_skipping(buf, len, 12));
}

int main(void)
{
    struct tc_seqrec r = sample(), out;

    /* Version 4 round-trips. */
    seqrec_encode(buf, &r);
    CHECK(le32_get(buf + 8) == 4);
    CHECK(seqrec_decode(buf, sizeof buf, &out, err, sizeof err) == 0);
    CHECK(out.version == 4);
    CHECK(memcmp(out.token, r.token, 16) == 0);
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
        CHECK(out.dev_mark[d] == r.dev_mark[d]);
    CHECK(memcmp(out.set_uuid, r.set_uuid, 16) == 0);
    CHECK(out.ndevs == r.ndevs && out.chunk_seq == r.chunk_seq);
    CHECK(out.written_ns == r.written_ns && out.origin_size == r.origin_size);
    CHECK(strcmp(out.origin_id, r.origin_id) == 0);
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++) {
        CHECK(memcmp(out.dev_uuids[d], r.dev_uuids[d], 16) == 0);
        CHECK(out.dev_chunk[d] == r.dev_chunk[d]);
    }

    /* Any byte changed: refused. */
    for (size_t i = 0; i < sizeof buf; i++) {
        seqrec_encode(buf, &r);
        buf[i] ^= 0x5a;
        if (seqrec_decode(buf, sizeof buf, &out, err, sizeof err) == 0) {
            fprintf(stderr, "byte %zu changed, still decoded\n", i);
            CHECK(false);
        }
    }

    /* Version 3: the first 592 bytes, its token, no marks. */
    seqrec_encode(buf, &r);
    memset(buf + TC_SEQREC_BYTES_V3, 0, TC_SEQREC_BYTES - TC_SEQREC_BYTES_V3);
    le32_put(buf + 8, 3);
    reseal(TC_SEQREC_BYTES_V3);
    CHECK(seqrec_decode(buf, TC_SEQREC_BYTES_V3, &out, err, sizeof err) == 0);
    CHECK(out.version == 3 && memcmp(out.token, r.token, 16) == 0);
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
        CHECK(out.dev_mark[d] == 0);

    /* Version 2: the first 576 bytes, no token. */
    seqrec_encode(buf, &r);
    memset(buf + TC_SEQREC_BYTES_V2, 0, TC_SEQREC_BYTES - TC_SEQREC_BYTES_V2);
    le32_put(buf + 8, 2);
    reseal(TC_SEQREC_BYTES_V2);
    CHECK(seqrec_decode(buf, TC_SEQREC_BYTES_V2, &out, err, sizeof err) == 0);
    CHECK(out.version == 2 && out.dev_chunk[2] == r.dev_chunk[2]);
    for (unsigned i = 0; i < 16; i++)
        CHECK(out.token[i] == 0);
    reseal(TC_SEQREC_BYTES);
    CHECK(seqrec_decode(buf, TC_SEQREC_BYTES, &out, err, sizeof err) < 0);

    /* Version 1: the first 448 bytes, version 1, its own checksum. */
    seqrec_encode(buf, &r);
    memset(buf + TC_SEQREC_BYTES_V1, 0, TC_SEQREC_BYTES - TC_SEQREC_BYTES_V1);
    le32_put(buf + 8, 1);
    reseal(TC_SEQREC_BYTES_V1);
    CHECK(seqrec_decode(buf, TC_SEQREC_BYTES_V1, &out, err, sizeof err) == 0);
    CHECK(out.version == 1 && out.chunk_seq == r.chunk_seq && out.ndevs == r.ndevs);
    for (unsigned d = 0; d < TC_MAX_DEVICES; d++)
        CHECK(out.dev_chunk[d] == 0);
    CHECK(memcmp(out.dev_uuids[2], r.dev_uuids[2], 16) == 0);
    /* ... but not at version 2's length, nor version 2 at version 1's. */
    reseal(TC_SEQREC_BYTES);
    CHECK(seqrec_decode(buf, TC_SEQREC_BYTES, &out, err, sizeof err) < 0);
    seqrec_encode(buf, &r);
    reseal(TC_SEQREC_BYTES_V1);
    CHECK(seqrec_decode(buf, TC_SEQREC_BYTES_V1, &out, err, sizeof err) < 0);

    /* Versions 0 and 5: refused, saying which versions are read. */
    for (uint32_t v = 0; v <= 5; v += 5) {
        seqrec_encode(buf, &r);
        le32_put(buf + 8, v);
        reseal(TC_SEQREC_BYTES);
        CHECK(seqrec_decode(buf, sizeof buf, &out, err, sizeof err) < 0);
        CHECK(strstr(err, "versions 1 to 4") != NULL);
    }
    /* A mark for a slot past the count. */
    seqrec_encode(buf, &r);
    le64_put(buf + TC_SEQREC_BYTES_V3 + 8 * 5, 9);
    reseal(TC_SEQREC_BYTES);
    CHECK(seqrec_decode(buf, sizeof buf, &out, err, sizeof err) < 0);
    CHECK(strstr(err, "failure mark") != NULL);

    /* A device's chunk above the set's, or for a slot past the count. */
    struct tc_seqrec bad = sample();
    bad.dev_chunk[1] = bad.chunk_seq + 1;
    seqrec_encode(buf, &bad);
    CHECK(seqrec_decode(buf, sizeof buf, &out, err, sizeof err) < 0);
    CHECK(strstr(err, "device 1's chunk") != NULL);
    bad = sample();
    seqrec_encode(buf, &bad);
    le64_put(buf + TC_SEQREC_BYTES_V1 + 8 * 5, 7);
    reseal(TC_SEQREC_BYTES);
    CHECK(seqrec_decode(buf, sizeof buf, &out, err, sizeof err) < 0);
    CHECK(strstr(err, "no such device") != NULL);

    return check_exit("seqrec");
}
