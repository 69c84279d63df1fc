/* Encoding, decoding and checking of the state file (see ondisk.h). */
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"

enum {
    ST_OFF_MAGIC = 0, ST_OFF_VERSION = 8, ST_OFF_CRC = 12, ST_OFF_SET_UUID = 16,
    ST_OFF_FLAGS = 32, ST_OFF_SPB = 36, ST_OFF_ABANDONED_SEQ = 40, ST_OFF_WRITTEN = 48,
    ST_OFF_COUNT = 56, ST_OFF_STOP_SEQ = 64,
};

static unsigned words(unsigned spb) { return (spb + 63) / 64; }

void state_entry_put(uint8_t *buf, uint32_t version, unsigned spb, uint64_t i, uint64_t oblock,
                     const uint64_t *mask)
{
    uint8_t *p = buf + tc_state_hdr(version) + i * tc_state_entry_size(version, spb);
    le64_put(p, oblock);
    for (unsigned w = 0; w < words(spb); w++)
        le64_put(p + 8 + 8 * w, mask[w]);
}

void state_entry_get(const uint8_t *buf, uint32_t version, unsigned spb, uint64_t i,
                     uint64_t *oblock, uint64_t *mask)
{
    const uint8_t *p = buf + tc_state_hdr(version) + i * tc_state_entry_size(version, spb);
    *oblock = le64_get(p);
    for (unsigned w = 0; w < words(spb); w++)
        mask[w] = le64_get(p + 8 + 8 * w);
}

static size_t proof_at(unsigned spb, uint64_t i, unsigned s)
{
    return tc_state_hdr(3) + i * tc_state_entry_size(3, spb) + 8 + 8 * (size_t)words(spb) +
           (size_t)TC_STATE_PROOF_BYTES * s;
}

void state_proof_put(uint8_t *buf, unsigned spb, uint64_t i, unsigned s, uint64_t where,
                     uint32_t crc)
{
    uint8_t *p = buf + proof_at(spb, i, s);
    le64_put(p, where);
    le32_put(p + 8, where ? crc : 0);
}

void state_proof_get(const uint8_t *buf, unsigned spb, uint64_t i, unsigned s, uint64_t *where,
                     uint32_t *crc)
{
    const uint8_t *p = buf + proof_at(spb, i, s);
    *where = le64_get(p);
    *crc = le32_get(p + 8);
}

static size_t marks_at(unsigned spb, uint64_t i)
{
    return tc_state_hdr(4) + i * tc_state_entry_size(4, spb) + 8 + 8 * (size_t)words(spb);
}

void state_marks_put(uint8_t *buf, unsigned spb, uint64_t i, const uint64_t *marks,
                     uint32_t digest)
{
    uint8_t *p = buf + marks_at(spb, i);
    for (unsigned w = 0; w < words(spb); w++)
        le64_put(p + 8 * w, marks[w]);
    le32_put(p + 8 * words(spb), digest);
    le32_put(p + 8 * words(spb) + 4, 0);
}

void state_marks_get(const uint8_t *buf, unsigned spb, uint64_t i, uint64_t *marks,
                     uint32_t *digest)
{
    const uint8_t *p = buf + marks_at(spb, i);
    for (unsigned w = 0; w < words(spb); w++)
        marks[w] = le64_get(p + 8 * w);
    *digest = le32_get(p + 8 * words(spb));
}

void state_encode(uint8_t *buf, const struct tc_state *st)
{
    memset(buf, 0, tc_state_hdr(st->version));
    le64_put(buf + ST_OFF_MAGIC, TC_STATE_MAGIC);
    le32_put(buf + ST_OFF_VERSION, st->version);
    memcpy(buf + ST_OFF_SET_UUID, st->set_uuid, 16);
    le32_put(buf + ST_OFF_FLAGS, st->flags);
    le32_put(buf + ST_OFF_SPB, st->spb);
    le64_put(buf + ST_OFF_ABANDONED_SEQ, st->abandoned_seq);
    le64_put(buf + ST_OFF_WRITTEN, st->written_ns);
    le64_put(buf + ST_OFF_COUNT, st->count);
    if (st->version >= 2)
        le64_put(buf + ST_OFF_STOP_SEQ, st->stop_seq);
    le32_put(buf + ST_OFF_CRC, tc_crc32c(0, buf, tc_state_bytes(st->version, st->spb, st->count)));
}

int state_decode(const uint8_t *buf, size_t len, struct tc_state *st, char *err, size_t errlen)
{
    if (len < TC_STATE_HDR || le64_get(buf + ST_OFF_MAGIC) != TC_STATE_MAGIC) {
        snprintf(err, errlen, "not a tiercache state file");
        return -1;
    }
    uint32_t version = le32_get(buf + ST_OFF_VERSION);
    if (version < 1 || version > TC_STATE_VERSION) {
        snprintf(err, errlen, "state file version %u is not supported (this build reads "
                 "versions 1 to %u)", version, TC_STATE_VERSION);
        return -1;
    }
    if (len < tc_state_hdr(version)) {
        snprintf(err, errlen, "state file: %zu bytes do not hold a version %u header", len,
                 version);
        return -1;
    }
    memset(st, 0, sizeof *st);
    st->version = version;
    memcpy(st->set_uuid, buf + ST_OFF_SET_UUID, 16);
    st->flags = le32_get(buf + ST_OFF_FLAGS);
    st->spb = le32_get(buf + ST_OFF_SPB);
    st->abandoned_seq = le64_get(buf + ST_OFF_ABANDONED_SEQ);
    st->written_ns = le64_get(buf + ST_OFF_WRITTEN);
    st->count = le64_get(buf + ST_OFF_COUNT);
    if (version >= 2)
        st->stop_seq = le64_get(buf + ST_OFF_STOP_SEQ);
    uint32_t known = TC_STATE_ABANDONED |
                     (version >= 2 ? TC_STATE_STOP_LOST | TC_STATE_STOP_DROPS : 0);
    if ((st->flags & ~known) ||
        ((st->flags & TC_STATE_STOP_DROPS) && !(st->flags & TC_STATE_STOP_LOST))) {
        snprintf(err, errlen, "state file: unknown flags %#x in version %u", st->flags, version);
        return -1;
    }
    if (st->stop_seq >= TC_SEQ_LIMIT || ((st->flags & TC_STATE_STOP_LOST) && st->stop_seq == 0)) {
        snprintf(err, errlen, "state file: stop sequence %llu is out of range",
                 (unsigned long long)st->stop_seq);
        return -1;
    }
    if (st->abandoned_seq >= TC_SEQ_LIMIT) {
        snprintf(err, errlen, "state file: abandonment sequence %llu is out of range",
                 (unsigned long long)st->abandoned_seq);
        return -1;
    }
    if (st->spb == 0 || st->spb > 256 || (st->spb & (st->spb - 1))) {
        snprintf(err, errlen, "state file: bad sectors per block %u", st->spb);
        return -1;
    }
    if (st->count > (len - tc_state_hdr(version)) / tc_state_entry_size(version, st->spb) ||
        tc_state_bytes(version, st->spb, st->count) != len) {
        snprintf(err, errlen, "state file: %zu bytes do not hold %llu entries", len,
                 (unsigned long long)st->count);
        return -1;
    }
    uint32_t want = le32_get(buf + ST_OFF_CRC);
    if (tc_crc32c_skipping(buf, len, ST_OFF_CRC) != want) {
        snprintf(err, errlen, "state file checksum mismatch");
        return -1;
    }
    for (uint64_t i = 0; i < st->count; i++) {
        uint64_t ob, m[4] = { 0 };
        state_entry_get(buf, version, st->spb, i, &ob, m);
        if (st->spb < 64 && (m[0] >> st->spb) != 0) {
            snprintf(err, errlen, "state file: entry %llu has sectors beyond its block",
                     (unsigned long long)i);
            return -1;
        }
        if (version == 4) {
            /* Marks only on lost sectors. */
            uint64_t mk[4] = { 0 };
            uint32_t digest;
            state_marks_get(buf, st->spb, i, mk, &digest);
            for (unsigned w = 0; w < words(st->spb); w++)
                if (mk[w] & ~m[w]) {
                    snprintf(err, errlen, "state file: entry %llu marks a sector that is not "
                             "lost", (unsigned long long)i);
                    return -1;
                }
        }
        for (unsigned s = 0; version == 3 && s < st->spb; s++) {
            uint64_t where;
            uint32_t crc;
            state_proof_get(buf, st->spb, i, s, &where, &crc);
            /* A proof only for a lost sector, of a device of the set. */
            if (where != 0 && (!(m[s / 64] >> (s % 64) & 1) ||
                               tc_state_where_dev(where) >= TC_MAX_DEVICES)) {
                snprintf(err, errlen, "state file: entry %llu has a bad proof for sector %u",
                         (unsigned long long)i, s);
                return -1;
            }
        }
    }
    return 0;
}
