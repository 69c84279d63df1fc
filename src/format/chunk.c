/* Encoding, decoding and checking of chunk headers (see ondisk.h). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"

static unsigned mask_words(unsigned spb) { return (spb + 63) / 64; }

void chunk_encode(uint8_t *buf, const struct tc_chunk_header *h, const struct tc_entry *entries,
                  const uint32_t *data_crcs, unsigned spb)
{
    size_t len = (size_t)h->hdr_sectors * 4096;
    /* Every byte of the header is written once: the fixed part zeroed then
     * filled, each entry field by field (its padding zeroed), the CRCs,
     * then the rest zeroed.  Zeroing all of it first would write the used
     * part twice, a cost paid on every chunk sealed. */
    memset(buf, 0, CH_OFF_ENTRIES);
    le64_put(buf + CH_OFF_MAGIC, TC_CHUNK_MAGIC);
    le32_put(buf + CH_OFF_VERSION, TC_FORMAT_VERSION);
    memcpy(buf + CH_OFF_SET_UUID, h->set_uuid, 16);
    le64_put(buf + CH_OFF_GROUP_SEQ, h->group_seq);
    le64_put(buf + CH_OFF_CHUNK_SEQ, h->chunk_seq);
    le64_put(buf + CH_OFF_TAIL_SEQ, h->tail_seq);
    le64_put(buf + CH_OFF_WT_STABLE_SEQ, h->wt_stable_seq);
    le32_put(buf + CH_OFF_SEGMENT, h->segment);
    le32_put(buf + CH_OFF_CHUNK_SECTOR, h->chunk_sector);
    le16_put(buf + CH_OFF_HDR_SECTORS, h->hdr_sectors);
    le16_put(buf + CH_OFF_FLAGS, h->flags);
    le32_put(buf + CH_OFF_DATA_SECTORS, h->data_sectors);
    le32_put(buf + CH_OFF_NR_ENTRIES, h->nr_entries);
    le64_put(buf + CH_OFF_WRITTEN_NS, h->written_ns);
    le64_put(buf + CH_OFF_FLUSHED_SEQ, h->flushed_seq);
    le64_put(buf + CH_OFF_RESTART_DURABLE,
             (h->flags & TC_CHUNK_RESTART) ? h->restart_durable : 0);
    le64_put(buf + CH_OFF_TAIL_CHUNK, h->tail_chunk);
    le64_put(buf + CH_OFF_FAILED_CHUNK, h->failed_chunk);
    size_t esz = tc_entry_size(spb);
    unsigned words = mask_words(spb);
    uint8_t *p = buf + CH_OFF_ENTRIES;
    for (uint32_t i = 0; i < h->nr_entries; i++, p += esz) {
        const struct tc_entry *e = &entries[i];
        le64_put(p, e->oblock);
        le64_put(p + 8, e->seq);
        p[16] = e->type;
        p[17] = e->flags;
        le16_put(p + 18, 0);
        le32_put(p + 20, e->data_sector);
        le64_put(p + 24, e->target);
        for (unsigned w = 0; w < words; w++) {
            le64_put(p + 32 + 8 * w, e->valid.w[w]);
            le64_put(p + 32 + 8 * words + 8 * w, e->dirty.w[w]);
        }
    }
    for (uint32_t i = 0; i < h->data_sectors; i++)
        le32_put(p + 4 * i, data_crcs[i]);
    /* The rest of the header is zeroes: carried over, not read. */
    size_t used = (size_t)(p + 4 * (size_t)h->data_sectors - buf);
    if (used > len)
        used = len;
    memset(buf + used, 0, len - used);
    le32_put(buf + CH_OFF_CRC, tc_crc32c_zeros(tc_crc32c(0, buf, used), len - used));
}

/* Whether the n bytes at p are all zero. */
static bool all_zero(const uint8_t *p, size_t n)
{
    uint64_t acc = 0;
    for (; n >= 64; p += 64, n -= 64) {
        uint64_t w[8];
        memcpy(w, p, sizeof w);
        if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0)
            return false;
    }
    while (n--)
        acc |= *p++;
    return acc == 0;
}

int chunk_decode(const uint8_t *buf, size_t buflen, const uint8_t set_uuid[16], unsigned spb,
                 uint32_t segment_sectors, struct tc_chunk_header *h, char *err, size_t errlen)
{
    if (le64_get(buf + CH_OFF_MAGIC) != TC_CHUNK_MAGIC) {
        snprintf(err, errlen, "no chunk header");
        return -1;
    }
    if (le32_get(buf + CH_OFF_VERSION) != TC_FORMAT_VERSION) {
        snprintf(err, errlen, "chunk format version %u is not supported",
                 le32_get(buf + CH_OFF_VERSION));
        return -1;
    }
    if (memcmp(buf + CH_OFF_SET_UUID, set_uuid, 16) != 0) {
        snprintf(err, errlen, "chunk of another cache set");
        return -1;
    }
    memset(h, 0, sizeof *h);
    memcpy(h->set_uuid, buf + CH_OFF_SET_UUID, 16);
    h->group_seq = le64_get(buf + CH_OFF_GROUP_SEQ);
    h->chunk_seq = le64_get(buf + CH_OFF_CHUNK_SEQ);
    h->tail_seq = le64_get(buf + CH_OFF_TAIL_SEQ);
    h->wt_stable_seq = le64_get(buf + CH_OFF_WT_STABLE_SEQ);
    h->segment = le32_get(buf + CH_OFF_SEGMENT);
    h->chunk_sector = le32_get(buf + CH_OFF_CHUNK_SECTOR);
    h->hdr_sectors = le16_get(buf + CH_OFF_HDR_SECTORS);
    h->flags = le16_get(buf + CH_OFF_FLAGS);
    h->data_sectors = le32_get(buf + CH_OFF_DATA_SECTORS);
    h->nr_entries = le32_get(buf + CH_OFF_NR_ENTRIES);
    h->written_ns = le64_get(buf + CH_OFF_WRITTEN_NS);
    h->flushed_seq = le64_get(buf + CH_OFF_FLUSHED_SEQ);
    if (h->flags & TC_CHUNK_RESTART)
        h->restart_durable = le64_get(buf + CH_OFF_RESTART_DURABLE);
    h->tail_chunk = le64_get(buf + CH_OFF_TAIL_CHUNK);
    h->failed_chunk = le64_get(buf + CH_OFF_FAILED_CHUNK);
    size_t len = (size_t)h->hdr_sectors * 4096;
    if (h->hdr_sectors == 0 || h->hdr_sectors > TC_MAX_HDR_SECTORS || len > buflen) {
        snprintf(err, errlen, "header size %u sectors is out of range", h->hdr_sectors);
        return -1;
    }
    if ((uint64_t)h->chunk_sector + h->hdr_sectors + h->data_sectors > segment_sectors) {
        snprintf(err, errlen, "chunk at sector %u of %u data sectors runs past the segment end",
                 h->chunk_sector, h->data_sectors);
        return -1;
    }
    if (tc_chunk_header_bytes(spb, h->nr_entries, h->data_sectors) > len) {
        snprintf(err, errlen, "%u entries and %u data sectors do not fit the header",
                 h->nr_entries, h->data_sectors);
        return -1;
    }
    if (h->group_seq >= TC_SEQ_LIMIT || h->chunk_seq >= TC_SEQ_LIMIT ||
        h->tail_seq >= TC_SEQ_LIMIT || h->wt_stable_seq >= TC_SEQ_LIMIT ||
        h->flushed_seq >= TC_SEQ_LIMIT || h->restart_durable >= TC_SEQ_LIMIT ||
        h->tail_chunk >= TC_SEQ_LIMIT || h->failed_chunk >= TC_SEQ_LIMIT) {
        snprintf(err, errlen, "a sequence number is out of range (group %llu, chunk %llu)",
                 (unsigned long long)h->group_seq, (unsigned long long)h->chunk_seq);
        return -1;
    }
    uint32_t want = le32_get(buf + CH_OFF_CRC);
    /* Past its entries and data CRCs a header is zeroes, whose checksum
     * needs no reading once they are seen to be zeroes. */
    size_t used = tc_chunk_header_bytes(spb, h->nr_entries, h->data_sectors);
    uint32_t got = all_zero(buf + used, len - used) ?
        tc_crc32c_zeros(tc_crc32c_skipping(buf, used, CH_OFF_CRC), len - used) :
        tc_crc32c_skipping(buf, len, CH_OFF_CRC);
    if (got != want) {
        snprintf(err, errlen, "header checksum mismatch");
        return -1;
    }
    return 0;
}

/* __builtin_popcountll() is a library call without POPCNT in the target:
 * zero words, most of a mask below 256 sectors, skip it. */
static unsigned count_words(const uint64_t *w, unsigned words)
{
    unsigned n = 0;
    for (unsigned i = 0; i < words; i++)
        if (w[i])
            n += (unsigned)__builtin_popcountll(w[i]);
    return n;
}

int chunk_entry(const uint8_t *buf, const struct tc_chunk_header *h, unsigned spb, uint32_t i,
                struct tc_entry *e, char *err, size_t errlen)
{
    size_t esz = tc_entry_size(spb);
    unsigned words = mask_words(spb);
    const uint8_t *p = buf + CH_OFF_ENTRIES + (size_t)i * esz;
    memset(e, 0, sizeof *e);
    e->oblock = le64_get(p);
    e->seq = le64_get(p + 8);
    e->type = p[16];
    e->flags = p[17];
    e->data_sector = le32_get(p + 20);
    e->target = le64_get(p + 24);
    uint64_t outside = 0;       /* dirty sectors not valid */
    for (unsigned w = 0; w < words; w++) {
        e->valid.w[w] = le64_get(p + 32 + 8 * w);
        e->dirty.w[w] = le64_get(p + 32 + 8 * words + 8 * w);
        outside |= e->dirty.w[w] & ~e->valid.w[w];
    }
    if (e->seq >= TC_SEQ_LIMIT) {
        snprintf(err, errlen, "entry %u has sequence %llu, out of range", i,
                 (unsigned long long)e->seq);
        return -1;
    }
    if (e->type < TC_ENTRY_DATA || e->type > TC_ENTRY_LOST) {
        snprintf(err, errlen, "entry %u has unknown type %u", i, e->type);
        return -1;
    }
    /* Sectors at or past the block's end: only the last word decoded can
     * hold them (the words before it are all inside the block, those
     * after it are not decoded and stay 0). */
    unsigned last = words ? words - 1 : 0;
    uint64_t allowed = spb % 64 ? (1ull << (spb % 64)) - 1 : ~0ull;
    if ((e->valid.w[last] | e->dirty.w[last]) & ~allowed) {
        snprintf(err, errlen, "entry %u has sector masks beyond the block", i);
        return -1;
    }
    if (e->type == TC_ENTRY_DATA) {
        unsigned n = count_words(e->valid.w, words);
        if (n == 0 || outside || (uint64_t)e->data_sector + n > h->data_sectors) {
            snprintf(err, errlen, "entry %u: data (%u sectors at %u) outside the chunk or "
                     "dirty sectors not valid", i, n, e->data_sector);
            return -1;
        }
    }
    return 0;
}

uint64_t chunk_entry_oblock(const uint8_t *buf, unsigned spb, uint32_t i)
{
    return le64_get(buf + CH_OFF_ENTRIES + (size_t)i * tc_entry_size(spb));
}

uint32_t chunk_data_crc(const uint8_t *buf, const struct tc_chunk_header *h, unsigned spb,
                        uint32_t i)
{
    const uint8_t *p = buf + CH_OFF_ENTRIES + (size_t)h->nr_entries * tc_entry_size(spb);
    return le32_get(p + 4 * i);
}
