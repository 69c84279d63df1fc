/* Encoding, decoding and checking of a checkpoint's header (see ondisk.h). */
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"

void ckpt_encode(uint8_t *buf, const struct tc_ckpt *ck)
{
    memset(buf, 0, TC_CKPT_HDR);
    le64_put(buf + CK_OFF_MAGIC, TC_CKPT_MAGIC);
    le32_put(buf + CK_OFF_VERSION, TC_CKPT_VERSION);
    memcpy(buf + CK_OFF_SET_UUID, ck->set_uuid, 16);
    le64_put(buf + CK_OFF_CHUNK_SEQ, ck->chunk_seq);
    le64_put(buf + CK_OFF_TAIL_SEQ, ck->tail_seq);
    le64_put(buf + CK_OFF_NEXT_SEQ, ck->next_seq);
    le64_put(buf + CK_OFF_WT_STABLE, ck->wt_stable_seq);
    le32_put(buf + CK_OFF_NOT_CHUNK, UINT32_MAX);
    le32_put(buf + CK_OFF_NOT_CHUNK + 4, UINT32_MAX);
    le32_put(buf + CK_OFF_SPB, ck->spb);
    le32_put(buf + CK_OFF_TOTAL_SEGMENTS, ck->total_segments);
    le32_put(buf + CK_OFF_NSEGS, ck->nsegs);
    le32_put(buf + CK_OFF_BODY_CRC, ck->body_crc);
    le64_put(buf + CK_OFF_NCHUNKS, ck->nchunks);
    le64_put(buf + CK_OFF_NBLOCKS, ck->nblocks);
    le64_put(buf + CK_OFF_NFRAGS, ck->nfrags);
    le64_put(buf + CK_OFF_NLOST, ck->nlost);
    le64_put(buf + CK_OFF_BODY_LEN, ck->body_len);
    le32_put(buf + CK_OFF_CRC, tc_crc32c(0, buf, TC_CKPT_HDR));
}

int ckpt_decode(const uint8_t *buf, struct tc_ckpt *ck, char *err, size_t errlen)
{
    if (le64_get(buf + CK_OFF_MAGIC) != TC_CKPT_MAGIC) {
        snprintf(err, errlen, "no checkpoint header");
        return -1;
    }
    uint32_t version = le32_get(buf + CK_OFF_VERSION);
    if (version != TC_CKPT_VERSION) {
        snprintf(err, errlen, "checkpoint version %u is not supported (this build reads %u)",
                 version, TC_CKPT_VERSION);
        return -1;
    }
    uint8_t tmp[TC_CKPT_HDR];
    memcpy(tmp, buf, TC_CKPT_HDR);
    uint32_t want = le32_get(tmp + CK_OFF_CRC);
    le32_put(tmp + CK_OFF_CRC, 0);
    if (tc_crc32c(0, tmp, TC_CKPT_HDR) != want) {
        snprintf(err, errlen, "checkpoint header checksum mismatch");
        return -1;
    }
    memset(ck, 0, sizeof *ck);
    memcpy(ck->set_uuid, buf + CK_OFF_SET_UUID, 16);
    ck->chunk_seq = le64_get(buf + CK_OFF_CHUNK_SEQ);
    ck->tail_seq = le64_get(buf + CK_OFF_TAIL_SEQ);
    ck->next_seq = le64_get(buf + CK_OFF_NEXT_SEQ);
    ck->wt_stable_seq = le64_get(buf + CK_OFF_WT_STABLE);
    ck->spb = le32_get(buf + CK_OFF_SPB);
    ck->total_segments = le32_get(buf + CK_OFF_TOTAL_SEGMENTS);
    ck->nsegs = le32_get(buf + CK_OFF_NSEGS);
    ck->body_crc = le32_get(buf + CK_OFF_BODY_CRC);
    ck->nchunks = le64_get(buf + CK_OFF_NCHUNKS);
    ck->nblocks = le64_get(buf + CK_OFF_NBLOCKS);
    ck->nfrags = le64_get(buf + CK_OFF_NFRAGS);
    ck->nlost = le64_get(buf + CK_OFF_NLOST);
    ck->body_len = le64_get(buf + CK_OFF_BODY_LEN);
    const char *bad = NULL;
    if (ck->chunk_seq >= TC_SEQ_LIMIT || ck->tail_seq >= TC_SEQ_LIMIT ||
        ck->next_seq >= TC_SEQ_LIMIT || ck->wt_stable_seq >= TC_SEQ_LIMIT)
        bad = "a sequence number out of range";
    else if (ck->spb == 0 || ck->spb > TC_MAX_BLOCK_SIZE / 4096 || (ck->spb & (ck->spb - 1)))
        bad = "sectors per block";
    else if (ck->nsegs > ck->total_segments || ck->nchunks > (1ull << 40) ||
             ck->nblocks > (1ull << 48) || ck->nfrags > 8 * ck->nblocks ||
             ck->nfrags < ck->nblocks || ck->nlost > (1ull << 48))
        bad = "a count out of range";
    else if (ck->body_len != (uint64_t)ck->nsegs * tc_ckpt_seg_bytes(0) + 8 * ck->nchunks +
                            ck->nblocks * tc_ckpt_block_bytes(ck->spb) +
                            ck->nfrags * tc_ckpt_frag_bytes(ck->spb) +
                            ck->nlost * tc_ckpt_lost_bytes(ck->spb))
        bad = "a body length that is not what its counts make";
    if (bad) {
        snprintf(err, errlen, "checkpoint header: %s", bad);
        return -1;
    }
    return 0;
}
