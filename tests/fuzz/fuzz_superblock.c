/*
 * Fuzzing the superblock decoder, sb_decode() (src/format/superblock.c):
 * the first thing read from every cache device.
 *
 * Input: up to 4096 bytes, zero-padded to a whole superblock.  It is
 * decoded twice: as it is, and with its checksum made right (otherwise
 * almost nothing would get past the CRC to the geometry checks).
 *
 * For every superblock that decodes, the harness checks what the rest of
 * tiercache relies on (ondisk.h): the geometry is in range and
 * consistent, without arithmetic overflow; the strings are terminated;
 * and encoding it again gives a superblock that decodes to the same
 * values, and encodes to the same bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"
#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


/* Bytes after the terminating NUL of a string field are not part of it. */
static void normalize(struct tc_superblock *sb)
{
    size_t n = strnlen(sb->origin_id, TC_ORIGIN_ID_LEN);
    memset(sb->origin_id + n, 0, TC_ORIGIN_ID_LEN - n);
    n = strnlen(sb->origin_path, TC_ORIGIN_PATH_LEN);
    memset(sb->origin_path + n, 0, TC_ORIGIN_PATH_LEN - n);
    n = strnlen(sb->state_place, TC_STATE_PLACE_LEN);
    memset(sb->state_place + n, 0, TC_STATE_PLACE_LEN - n);
}

static void check_valid(const struct tc_superblock *sb)
{
    /* Version 2 is version 1 with the abandonment mark, version 3 the one
     * with device failure marks, and maybe the abandonment mark; version 4
     * the one with the clean-stop record, and maybe either mark; version 5
     * version 4 whose record names a checkpoint (ondisk.h); version 6 any
     * of them with a running checkpoint's slot full, judged as that one. */
    bool v6 = sb->version == TC_SB_VERSION_RUN_CKPT;
    CHECK(v6 == !!(sb->flags & TC_SB_RUN_CKPT));
    CHECK(v6 == sb_has_run_ckpt(sb));
    CHECK(!v6 || sb->run_ckpt[0].gen != sb->run_ckpt[1].gen);
    for (unsigned i = 0; i < TC_RUN_CKPT_SLOTS; i++) {
        const struct tc_run_ckpt *r = &sb->run_ckpt[i];
        CHECK(r->gen ? r->nsegs >= 1 && r->nsegs <= TC_RUN_CKPT_MAX_SEGS &&
                       r->len >= TC_CKPT_HDR &&
                       r->len <= (uint64_t)r->nsegs * sb->segment_size
                     : r->nsegs == 0 && r->len == 0 && r->cut == 0 && r->crc == 0);
        for (unsigned k = 0; k < TC_RUN_CKPT_MAX_SEGS; k++)
            CHECK(k < r->nsegs ? r->segs[k] < sb->total_segments : r->segs[k] == 0);
    }
    struct tc_superblock base = *sb;
    if (v6) {
        bool st = sb->flags & TC_SB_CLEAN_STOP;
        base.version = st && (sb->flags & TC_SB_CHECKPOINT) ? TC_SB_VERSION_CHECKPOINT
                       : st ? TC_SB_VERSION_STOP
                       : (sb->flags & TC_SB_DEV_FAILED) ? TC_SB_VERSION_DEVFAIL
                       : (sb->flags & TC_SB_ABANDONED) ? TC_SB_VERSION_ABANDONED
                       : TC_FORMAT_VERSION;
    }
    sb = &base;
    bool v5 = sb->version == TC_SB_VERSION_CHECKPOINT;
    bool v4 = sb->version == TC_SB_VERSION_STOP || v5;
    CHECK(sb->version == TC_FORMAT_VERSION || sb->version == TC_SB_VERSION_ABANDONED ||
          sb->version == TC_SB_VERSION_DEVFAIL || v4);
    CHECK(v5 == !!(sb->flags & TC_SB_CHECKPOINT));
    CHECK(v5 || (sb->ckpt_len == 0 && sb->ckpt_crc == 0 && sb->ckpt_nsegs == 0));
    CHECK(!v5 || (sb->ckpt_nsegs >= 1 && sb->ckpt_nsegs <= TC_CKPT_MAX_SEGS &&
                  sb->ckpt_len >= TC_CKPT_HDR &&
                  sb->ckpt_len <= (uint64_t)sb->ckpt_nsegs * sb->segment_size));
    for (unsigned i = 0; i < TC_CKPT_MAX_SEGS; i++)
        CHECK(i < sb->ckpt_nsegs ? sb->ckpt_segs[i] < sb->total_segments : sb->ckpt_segs[i] == 0);
    CHECK(sb->version == TC_SB_VERSION_DEVFAIL || v4 ||
          (sb->version == TC_SB_VERSION_ABANDONED) == !!(sb->flags & TC_SB_ABANDONED));
    CHECK(sb->version != TC_FORMAT_VERSION || !(sb->flags & TC_SB_ABANDONED));
    CHECK(v4 || (sb->version == TC_SB_VERSION_DEVFAIL) == !!(sb->flags & TC_SB_DEV_FAILED));
    CHECK(v4 == !!(sb->flags & TC_SB_CLEAN_STOP));
    bool any_mark = false;
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
        CHECK(sb->failed_seq[i] < TC_SEQ_LIMIT);
        CHECK(sb->failed_seq[i] == 0 || i < sb->dev_count);
        any_mark |= sb->failed_seq[i] != 0;
    }
    CHECK(any_mark == !!(sb->flags & TC_SB_DEV_FAILED));
    CHECK(v4 || (sb->stop_chunk_seq == 0 && sb->stop_tail_seq == 0 && sb->stop_chunks == 0));
    CHECK(sb->stop_chunk_seq < TC_SEQ_LIMIT && sb->stop_tail_seq < TC_SEQ_LIMIT);
    CHECK(sb->stop_chunks <= sb->stop_chunk_seq);
    CHECK(!(sb->flags & TC_SB_ABANDONED) ||
          (sb->abandoned_seq > 0 && sb->abandoned_seq < TC_SEQ_LIMIT));
    CHECK(sb->block_size >= TC_MIN_BLOCK_SIZE && sb->block_size <= TC_MAX_BLOCK_SIZE);
    CHECK((sb->block_size & (sb->block_size - 1)) == 0);
    CHECK(sb->segment_size >= TC_MIN_SEGMENT_SIZE && sb->segment_size <= TC_MAX_SEGMENT_SIZE);
    CHECK(sb->segment_size % sb->block_size == 0);
    CHECK(sb->dev_count >= 1 && sb->dev_count <= TC_MAX_DEVICES);
    CHECK(sb->dev_index < sb->dev_count);
    CHECK(sb->data_offset >= 2 * TC_SB_SIZE && sb->data_offset % 4096 == 0);
    CHECK(sb->segment_count >= 1);
    /* The segments lie inside the device: computed without overflow. */
    CHECK(sb->data_offset <= sb->dev_size);
    CHECK((unsigned __int128)sb->segment_count * sb->segment_size <=
          sb->dev_size - sb->data_offset);
    CHECK(sb->dev_segments[sb->dev_index] == sb->segment_count);
    CHECK(sb->origin_size > 0 && sb->origin_size % 4096 == 0);
    uint64_t total = 0, first = 0;
    for (unsigned i = 0; i < sb->dev_count; i++) {
        if (i == sb->dev_index)
            first = total;
        total += sb->dev_segments[i];
    }
    CHECK(total == sb->total_segments && first == sb->first_segment);
    CHECK(sb->total_segments <= UINT32_MAX / 2);
    /* Segment numbers of this device fit the set's. */
    CHECK((uint64_t)sb->first_segment + sb->segment_count <= sb->total_segments);
    CHECK(strnlen(sb->origin_id, TC_ORIGIN_ID_LEN) < TC_ORIGIN_ID_LEN);
    CHECK(strnlen(sb->origin_path, TC_ORIGIN_PATH_LEN) < TC_ORIGIN_PATH_LEN);
}

static void one(const uint8_t *buf)
{
    struct tc_superblock sb;
    char err[160];
    err[0] = 'x';
    bool magic = sb_has_magic(buf);
    if (sb_decode(buf, &sb, err, sizeof err) < 0) {
        CHECK(strnlen(err, sizeof err) > 0 && strnlen(err, sizeof err) < sizeof err);
        /* A short message buffer is cut, never overrun. */
        char tiny[8];
        CHECK(sb_decode(buf, &sb, tiny, sizeof tiny) < 0);
        CHECK(strnlen(tiny, sizeof tiny) < sizeof tiny);
        return;
    }
    CHECK(magic);
    check_valid(&sb);

    /* Round trip: encode, decode, compare. */
    uint8_t *enc = malloc(TC_SB_SIZE), *enc2 = malloc(TC_SB_SIZE);
    CHECK(enc && enc2);
    sb_encode(&sb, enc);
    struct tc_superblock back;
    if (sb_decode(enc, &back, err, sizeof err) < 0) {
        fprintf(stderr, "re-encoded superblock refused: %s\n", err);
        abort();
    }
    normalize(&sb);
    normalize(&back);
    CHECK(memcmp(&sb, &back, sizeof sb) == 0);
    sb_encode(&back, enc2);
    CHECK(memcmp(enc, enc2, TC_SB_SIZE) == 0);
    free(enc);
    free(enc2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact allocation: a read past the superblock is caught. */
    uint8_t *buf = calloc(1, TC_SB_SIZE);
    CHECK(buf);
    if (size)
        memcpy(buf, data, size < TC_SB_SIZE ? size : TC_SB_SIZE);
    one(buf);
    /* The same with a correct checksum. */
    le32_put(buf + SB_OFF_CRC, 0);
    le32_put(buf + SB_OFF_CRC, tc_crc32c(0, buf, TC_SB_SIZE));
    one(buf);
    free(buf);
    return 0;
}
