/*
 * Checkpoint headers (format/ondisk.h, format/checkpoint.c): a header
 * round-trips field by field, and keeps 0xff where a chunk header has its
 * segment and position (a scan never takes it for a chunk of ours);
 * changing any one byte makes ckpt_decode() refuse it; a body length that
 * is not what the counts make, another version, sectors per block that
 * are no power of two up to 256, fewer fragments than blocks, and a
 * sequence number at TC_SEQ_LIMIT are refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"

#include "check.h"

static struct tc_ckpt sample(void)
{
    struct tc_ckpt ck = {
        .chunk_seq = 1234, .tail_seq = 77, .next_seq = 1300, .wt_stable_seq = 1200,
        .spb = 16, .total_segments = 4096, .nsegs = 12, .body_crc = 0xdeadbeef,
        .nchunks = 345, .nblocks = 1000, .nfrags = 1100, .nlost = 3,
    };
    for (unsigned i = 0; i < 16; i++)
        ck.set_uuid[i] = (uint8_t)(i * 7 + 1);
    ck.body_len = (uint64_t)ck.nsegs * tc_ckpt_seg_bytes(0) + 8 * ck.nchunks +
                  ck.nblocks * tc_ckpt_block_bytes(ck.spb) + ck.nfrags * tc_ckpt_frag_bytes(ck.spb) +
                  ck.nlost * tc_ckpt_lost_bytes(ck.spb);
    return ck;
}

static int decodes(const struct tc_ckpt *ck)
{
    uint8_t buf[TC_CKPT_HDR];
    struct tc_ckpt back;
    char err[160];
    ckpt_encode(buf, ck);
    return ckpt_decode(buf, &back, err, sizeof err);
}

int main(void)
{
    struct tc_ckpt ck = sample(), back;
    uint8_t buf[TC_CKPT_HDR];
    char err[160];
    ckpt_encode(buf, &ck);
    CHECK(ckpt_decode(buf, &back, err, sizeof err) == 0);
    CHECK(memcmp(&ck, &back, sizeof ck) == 0);
    CHECK(le64_get(buf + CK_OFF_MAGIC) != TC_CHUNK_MAGIC);
    CHECK(le32_get(buf + CH_OFF_SEGMENT) == UINT32_MAX);
    CHECK(le32_get(buf + CH_OFF_CHUNK_SECTOR) == UINT32_MAX);

    /* Any one byte changed is refused (the checksum, or the field). */
    unsigned refused = 0;
    for (unsigned i = 0; i < TC_CKPT_HDR; i++) {
        uint8_t b2[TC_CKPT_HDR];
        memcpy(b2, buf, sizeof b2);
        b2[i] ^= 0x01;
        refused += ckpt_decode(b2, &back, err, sizeof err) < 0;
    }
    CHECK(refused == TC_CKPT_HDR);

    /* Another version, with a right checksum. */
    uint8_t b3[TC_CKPT_HDR];
    memcpy(b3, buf, sizeof b3);
    le32_put(b3 + CK_OFF_VERSION, TC_CKPT_VERSION + 1);
    le32_put(b3 + CK_OFF_CRC, 0);
    le32_put(b3 + CK_OFF_CRC, tc_crc32c(0, b3, TC_CKPT_HDR));
    CHECK(ckpt_decode(b3, &back, err, sizeof err) < 0);
    CHECK(strstr(err, "version") != NULL);

    struct tc_ckpt x = sample();
    x.body_len++;
    CHECK(decodes(&x) < 0);
    x = sample();
    x.spb = 24;
    CHECK(decodes(&x) < 0);
    x = sample();
    x.spb = 512;
    CHECK(decodes(&x) < 0);
    x = sample();
    x.nfrags = x.nblocks - 1;
    x.body_len -= tc_ckpt_frag_bytes(x.spb);
    CHECK(decodes(&x) < 0);
    x = sample();
    x.next_seq = TC_SEQ_LIMIT;
    CHECK(decodes(&x) < 0);
    x = sample();
    x.next_seq = TC_SEQ_LIMIT - 1;
    CHECK(decodes(&x) == 0);
    x = sample();
    x.nsegs = x.total_segments + 1;
    x.body_len += tc_ckpt_seg_bytes(0) * (x.nsegs - sample().nsegs);
    CHECK(decodes(&x) < 0);
    /* Empty: no segment, block or lost record. */
    x = sample();
    x.nsegs = 0;
    x.nchunks = x.nblocks = x.nfrags = x.nlost = 0;
    x.body_len = 0;
    CHECK(decodes(&x) == 0);
    return check_exit("checkpoint");
}
