/*
 * Fuzzing the two files a cache set keeps beside its devices: the state
 * file (state_decode(), src/format/statefile.c) and the sequence record
 * (seqrec_decode(), src/format/seqrec.c).  Both are read at every start,
 * and `tiercache check` reads them; a damaged, truncated, foreign or
 * hostile one must be refused with a message, never read past its end,
 * and never accepted with values the engine cannot use (ondisk.h).
 *
 * Input: one byte, then the file.  Bit 0 of the byte chooses the decoder
 * (0: state file, 1: sequence record); bit 1 makes the checksum right
 * before decoding (otherwise almost nothing would get past the CRC to the
 * checks behind it).  The file is copied to an exact allocation, so that
 * a read past its end is an ASan report.
 *
 * For every file that decodes, the harness checks what the rest of
 * tiercache relies on:
 *   state file   the version, flags, sequences and sectors per block are in
 *                range; the length is exactly the header and the entries;
 *                every entry's lost mask lies inside its block; a version
 *                3 proof is only on a lost sector and names a device slot
 *                of a set; a version 4 mark is only on a lost sector; and
 *                encoding the header again gives the same bytes.
 *   sequence     the device count is 1..TC_MAX_DEVICES; the flags are
 *   record       zero; no device's chunk is above the set's, and none is
 *                named beyond the device count; the failure marks are in
 *                range; the origin identity is terminated; and encoding it
 *                again (always the newest version) decodes to the same
 *                values.
 * A refused file must come with a message, and a short message buffer is
 * cut, never overrun.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"
#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


/* Where both files keep their CRC-32C (ondisk.h). */
#define CRC_OFF 12

static void refused(int (*decode)(const uint8_t *, size_t, char *, size_t), const uint8_t *buf,
                    size_t len, const char *err, size_t errlen)
{
    CHECK(strnlen(err, errlen) > 0 && strnlen(err, errlen) < errlen);
    char tiny[8];
    CHECK(decode(buf, len, tiny, sizeof tiny) < 0);
    CHECK(strnlen(tiny, sizeof tiny) < sizeof tiny);
}

/* ---- state file ---- */

static int state_try(const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    struct tc_state st;
    return state_decode(buf, len, &st, err, errlen);
}

static void state_one(const uint8_t *buf, size_t len)
{
    struct tc_state st;
    char err[160];
    err[0] = 'x';
    if (state_decode(buf, len, &st, err, sizeof err) < 0) {
        refused(state_try, buf, len, err, sizeof err);
        return;
    }
    CHECK(st.version >= 1 && st.version <= TC_STATE_VERSION);
    CHECK(st.spb >= 1 && st.spb <= 256 && (st.spb & (st.spb - 1)) == 0);
    CHECK(len >= tc_state_hdr(st.version));
    CHECK(st.count <= (len - tc_state_hdr(st.version)) / tc_state_entry_size(st.version, st.spb));
    CHECK(tc_state_bytes(st.version, st.spb, st.count) == len);
    CHECK((st.flags & ~(uint32_t)(TC_STATE_ABANDONED | TC_STATE_STOP_LOST |
                                  TC_STATE_STOP_DROPS)) == 0);
    CHECK(st.version >= 2 || !(st.flags & (TC_STATE_STOP_LOST | TC_STATE_STOP_DROPS)));
    CHECK(!(st.flags & TC_STATE_STOP_DROPS) || (st.flags & TC_STATE_STOP_LOST));
    CHECK(!(st.flags & TC_STATE_STOP_LOST) || (st.stop_seq > 0 && st.stop_seq < TC_SEQ_LIMIT));
    CHECK(st.abandoned_seq < TC_SEQ_LIMIT);

    unsigned words = (st.spb + 63) / 64;
    for (uint64_t i = 0; i < st.count; i++) {
        uint64_t ob, mask[4] = { 0 };
        state_entry_get(buf, st.version, st.spb, i, &ob, mask);
        (void)ob;   /* any block: the start skips those beyond the volume */
        if (st.spb < 64)
            CHECK(mask[0] >> st.spb == 0);
        for (unsigned w = words; w < 4; w++)
            CHECK(mask[w] == 0);
        if (st.version == 3) {
            for (unsigned s = 0; s < st.spb; s++) {
                uint64_t where;
                uint32_t crc;
                state_proof_get(buf, st.spb, i, s, &where, &crc);
                CHECK(where == 0 || (mask[s / 64] >> (s % 64) & 1));
                CHECK(where == 0 || tc_state_where_dev(where) < TC_MAX_DEVICES);
            }
        }
        if (st.version == 4) {
            uint64_t marks[4] = { 0 };
            uint32_t digest;
            state_marks_get(buf, st.spb, i, marks, &digest);
            for (unsigned w = 0; w < 4; w++)
                CHECK((marks[w] & ~mask[w]) == 0);
        }
    }

    /* The header encodes back to the same bytes (every byte of it is a
     * field), and the checksum with it. */
    uint8_t *enc = malloc(len);
    CHECK(enc);
    memcpy(enc, buf, len);
    state_encode(enc, &st);
    CHECK(memcmp(enc, buf, len) == 0);
    free(enc);
}

/* ---- sequence record ---- */

static int seqrec_try(const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    struct tc_seqrec r;
    return seqrec_decode(buf, len, &r, err, errlen);
}

static void seqrec_check(const struct tc_seqrec *r)
{
    CHECK(r->version >= 1 && r->version <= TC_SEQREC_VERSION);
    CHECK(r->ndevs >= 1 && r->ndevs <= TC_MAX_DEVICES);
    CHECK(r->flags == 0);
    CHECK(r->chunk_seq < TC_SEQ_LIMIT);
    CHECK(strnlen(r->origin_id, TC_ORIGIN_ID_LEN) < TC_ORIGIN_ID_LEN);
    static const uint8_t zero[16];
    for (unsigned i = 0; i < TC_MAX_DEVICES; i++) {
        CHECK(r->dev_chunk[i] <= r->chunk_seq);
        CHECK(r->dev_mark[i] < TC_SEQ_LIMIT);
        if (i >= r->ndevs) {
            CHECK(r->dev_chunk[i] == 0 && r->dev_mark[i] == 0);
            CHECK(memcmp(r->dev_uuids[i], zero, 16) == 0);
        }
        /* What an older version does not carry reads as "none". */
        CHECK(r->version >= 2 || r->dev_chunk[i] == 0);
        CHECK(r->version >= 4 || r->dev_mark[i] == 0);
    }
    CHECK(r->version >= 3 || memcmp(r->token, zero, 16) == 0);
}

static void seqrec_one(const uint8_t *buf, size_t len)
{
    struct tc_seqrec r;
    char err[160];
    err[0] = 'x';
    if (seqrec_decode(buf, len, &r, err, sizeof err) < 0) {
        refused(seqrec_try, buf, len, err, sizeof err);
        return;
    }
    seqrec_check(&r);

    /* Round trip: the encoder writes the newest version, which must
     * decode to the same values, and encode to the same bytes. */
    uint8_t *enc = malloc(TC_SEQREC_BYTES), *enc2 = malloc(TC_SEQREC_BYTES);
    CHECK(enc && enc2);
    seqrec_encode(enc, &r);
    struct tc_seqrec back;
    if (seqrec_decode(enc, TC_SEQREC_BYTES, &back, err, sizeof err) < 0) {
        fprintf(stderr, "re-encoded sequence record refused: %s\n", err);
        abort();
    }
    CHECK(back.version == TC_SEQREC_VERSION);
    back.version = r.version;
    seqrec_check(&back);
    CHECK(memcmp(&back, &r, sizeof r) == 0);
    seqrec_encode(enc2, &back);
    CHECK(memcmp(enc, enc2, TC_SEQREC_BYTES) == 0);
    free(enc);
    free(enc2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    size_t len = size - 1;
    /* An exact allocation (at least one byte, so that malloc(0) is not a
     * special case): a read past the file is caught. */
    uint8_t *buf = malloc(len ? len : 1);
    CHECK(buf);
    memcpy(buf, data + 1, len);
    if ((mode & 2) && len >= CRC_OFF + 4) {
        le32_put(buf + CRC_OFF, 0);
        le32_put(buf + CRC_OFF, tc_crc32c(0, buf, len));
    }
    if (mode & 1)
        seqrec_one(buf, len);
    else
        state_one(buf, len);
    free(buf);
    return 0;
}
