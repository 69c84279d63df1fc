/* Encoding, decoding and checking of the sequence record (see ondisk.h). */
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"

enum {
    SR_OFF_MAGIC = 0, SR_OFF_VERSION = 8, SR_OFF_CRC = 12, SR_OFF_SET_UUID = 16,
    SR_OFF_NDEVS = 32, SR_OFF_FLAGS = 36, SR_OFF_CHUNK_SEQ = 40, SR_OFF_WRITTEN = 48,
    SR_OFF_ORIGIN_SIZE = 56, SR_OFF_DEV_UUIDS = 64,
    SR_OFF_ORIGIN_ID = 64 + 16 * TC_MAX_DEVICES,
    SR_OFF_DEV_CHUNKS = TC_SEQREC_BYTES_V1,     /* version 2 */
    SR_OFF_TOKEN = TC_SEQREC_BYTES_V2,          /* version 3 */
    SR_OFF_DEV_MARKS = TC_SEQREC_BYTES_V3,      /* version 4 */
};

void seqrec_encode(uint8_t *buf, const struct tc_seqrec *r)
{
    memset(buf, 0, TC_SEQREC_BYTES);
    le64_put(buf + SR_OFF_MAGIC, TC_SEQREC_MAGIC);
    le32_put(buf + SR_OFF_VERSION, TC_SEQREC_VERSION);
    memcpy(buf + SR_OFF_SET_UUID, r->set_uuid, 16);
    le32_put(buf + SR_OFF_NDEVS, r->ndevs);
    le32_put(buf + SR_OFF_FLAGS, r->flags);
    le64_put(buf + SR_OFF_CHUNK_SEQ, r->chunk_seq);
    le64_put(buf + SR_OFF_WRITTEN, r->written_ns);
    le64_put(buf + SR_OFF_ORIGIN_SIZE, r->origin_size);
    for (unsigned i = 0; i < r->ndevs && i < TC_MAX_DEVICES; i++)
        memcpy(buf + SR_OFF_DEV_UUIDS + 16 * i, r->dev_uuids[i], 16);
    /* Always NUL-terminated on disk, whatever the caller's string holds. */
    memcpy(buf + SR_OFF_ORIGIN_ID, r->origin_id, TC_ORIGIN_ID_LEN - 1);
    for (unsigned i = 0; i < r->ndevs && i < TC_MAX_DEVICES; i++)
        le64_put(buf + SR_OFF_DEV_CHUNKS + 8 * i, r->dev_chunk[i]);
    memcpy(buf + SR_OFF_TOKEN, r->token, 16);
    for (unsigned i = 0; i < r->ndevs && i < TC_MAX_DEVICES; i++)
        le64_put(buf + SR_OFF_DEV_MARKS + 8 * i, r->dev_mark[i]);
    le32_put(buf + SR_OFF_CRC, tc_crc32c_skipping(buf, TC_SEQREC_BYTES, SR_OFF_CRC));
}

int seqrec_decode(const uint8_t *buf, size_t len, struct tc_seqrec *r, char *err, size_t errlen)
{
    if (len < 16 || le64_get(buf + SR_OFF_MAGIC) != TC_SEQREC_MAGIC) {
        snprintf(err, errlen, "not a tiercache sequence record");
        return -1;
    }
    uint32_t version = le32_get(buf + SR_OFF_VERSION);
    if (version < 1 || version > 4) {
        snprintf(err, errlen, "sequence record version %u is not supported (this build reads "
                 "versions 1 to 4)", version);
        return -1;
    }
    size_t want_len = version == 1 ? TC_SEQREC_BYTES_V1
                      : version == 2 ? TC_SEQREC_BYTES_V2
                      : version == 3 ? TC_SEQREC_BYTES_V3 : TC_SEQREC_BYTES;
    if (len != want_len) {
        snprintf(err, errlen, "%zu bytes, but a version %u record has %zu", len, version,
                 want_len);
        return -1;
    }
    uint32_t want = le32_get(buf + SR_OFF_CRC);
    if (tc_crc32c_skipping(buf, len, SR_OFF_CRC) != want) {
        snprintf(err, errlen, "checksum mismatch");
        return -1;
    }
    memset(r, 0, sizeof *r);
    r->version = version;
    memcpy(r->set_uuid, buf + SR_OFF_SET_UUID, 16);
    r->ndevs = le32_get(buf + SR_OFF_NDEVS);
    r->flags = le32_get(buf + SR_OFF_FLAGS);
    r->chunk_seq = le64_get(buf + SR_OFF_CHUNK_SEQ);
    r->written_ns = le64_get(buf + SR_OFF_WRITTEN);
    r->origin_size = le64_get(buf + SR_OFF_ORIGIN_SIZE);
    if (r->ndevs < 1 || r->ndevs > TC_MAX_DEVICES) {
        snprintf(err, errlen, "device count %u is out of range (1 to %u)", r->ndevs,
                 TC_MAX_DEVICES);
        return -1;
    }
    if (r->flags) {
        snprintf(err, errlen, "unknown flags %#x", r->flags);
        return -1;
    }
    if (r->chunk_seq >= TC_SEQ_LIMIT) {
        snprintf(err, errlen, "chunk sequence %llu is out of range",
                 (unsigned long long)r->chunk_seq);
        return -1;
    }
    for (unsigned i = 0; i < r->ndevs; i++)
        memcpy(r->dev_uuids[i], buf + SR_OFF_DEV_UUIDS + 16 * i, 16);
    memcpy(r->origin_id, buf + SR_OFF_ORIGIN_ID, TC_ORIGIN_ID_LEN);
    if (r->origin_id[TC_ORIGIN_ID_LEN - 1] != '\0') {
        snprintf(err, errlen, "the origin identity is not terminated");
        return -1;
    }
    /* Version 1 knows no device chunks: all 0, "not known". */
    for (unsigned i = 0; version >= 2 && i < TC_MAX_DEVICES; i++) {
        uint64_t v = le64_get(buf + SR_OFF_DEV_CHUNKS + 8 * i);
        if (i >= r->ndevs ? v != 0 : v > r->chunk_seq) {
            snprintf(err, errlen, "device %u's chunk %llu is out of range (%s)", i,
                     (unsigned long long)v, i >= r->ndevs ? "no such device" : "above the set's");
            return -1;
        }
        r->dev_chunk[i] = v;
    }
    /* Versions 1 and 2 know no state token: zero, "none". */
    if (version >= 3)
        memcpy(r->token, buf + SR_OFF_TOKEN, 16);
    /* Versions 1 to 3 know no device marks: 0, written under none. */
    for (unsigned i = 0; version >= 4 && i < TC_MAX_DEVICES; i++) {
        uint64_t v = le64_get(buf + SR_OFF_DEV_MARKS + 8 * i);
        if (i >= r->ndevs ? v != 0 : v >= TC_SEQ_LIMIT) {
            snprintf(err, errlen, "device %u's failure mark %llu is out of range (%s)", i,
                     (unsigned long long)v, i >= r->ndevs ? "no such device" : "too large");
            return -1;
        }
        r->dev_mark[i] = v;
    }
    return 0;
}
