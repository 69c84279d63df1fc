/*
 * Fuzzing the chunk header decoder, chunk_decode(), chunk_entry() and
 * chunk_data_crc() (src/format/chunk.c): what recovery and check read from
 * every chunk of the log.
 *
 * Input:
 *   byte 0   sectors per block: 1 << (b % 9), 1 to 256
 *   byte 1   sectors per segment: 256 << (b % 9), 256 (1 MiB) to 65536
 *   byte 2   bit 0     make the header checksum right
 *            bit 1     expect another cache set (must be refused)
 *            bits 2-4  the buffer holds that many sectors (0: as many as
 *                      the input fills)
 *   then     the bytes read from the device (at most 8 sectors; the rest
 *            of the buffer is zero)
 *
 * Every buffer is allocated to its exact size, and the entries and CRCs
 * of an accepted header are read from a copy of exactly hdr_sectors
 * sectors, as recovery reads them, so a read past the header is caught.
 *
 * Checked for every accepted header: its fields are within what
 * chunk_decode() promises; every entry chunk_entry() accepts has a known
 * type, masks inside the block, and data inside the chunk; and when every
 * entry is accepted, encoding the decoded header again with chunk_encode()
 * gives one that decodes to the same header, entries and CRCs, and
 * encodes to the same bytes.  A second part builds a valid header from
 * the input, encodes it and checks that it decodes exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"
#include "util/misc.h"
#include "../common/chunk_equal.h"
#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


#define SECTOR 4096u
#define MAX_HDR (TC_MAX_HDR_SECTORS * SECTOR)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECK(p != NULL);
    return p;
}

static unsigned popcount(const struct tc_mask *m)
{
    unsigned n = 0;
    for (unsigned w = 0; w < TC_MASK_WORDS; w++)
        n += (unsigned)__builtin_popcountll(m->w[w]);
    return n;
}

static bool within(const struct tc_mask *m, unsigned spb)
{
    for (unsigned s = spb; s < 64 * TC_MASK_WORDS; s++)
        if ((m->w[s / 64] >> (s % 64)) & 1)
            return false;
    return true;
}

/* The header checksum as chunk_decode() computes it. */
static void fix_crc(uint8_t *buf, size_t len)
{
    le32_put(buf + CH_OFF_CRC, 0);
    le32_put(buf + CH_OFF_CRC, tc_crc32c(0, buf, len));
}

/* Decode every entry and CRC of an accepted header; round trip if all
 * entries are good. */
static void check_accepted(const uint8_t *hdr, const struct tc_chunk_header *h, unsigned spb,
                           uint32_t seg_sectors)
{
    size_t len = (size_t)h->hdr_sectors * SECTOR;
    struct tc_entry *entries = xmalloc(h->nr_entries * sizeof *entries);
    uint32_t *crcs = xmalloc(h->data_sectors * sizeof *crcs);
    bool all_good = true;
    char err[128];
    for (uint32_t i = 0; i < h->nr_entries; i++) {
        struct tc_entry *e = &entries[i];
        if (chunk_entry(hdr, h, spb, i, e, err, sizeof err) < 0) {
            CHECK(strnlen(err, sizeof err) > 0);
            all_good = false;
            continue;
        }
        CHECK(e->type >= TC_ENTRY_DATA && e->type <= TC_ENTRY_LOST);
        CHECK(within(&e->valid, spb) && within(&e->dirty, spb));
        if (e->type == TC_ENTRY_DATA) {
            unsigned n = popcount(&e->valid);
            CHECK(n >= 1 && n <= spb);
            CHECK((uint64_t)e->data_sector + n <= h->data_sectors);
            for (unsigned w = 0; w < TC_MASK_WORDS; w++)
                CHECK((e->dirty.w[w] & ~e->valid.w[w]) == 0);
        }
    }
    for (uint32_t i = 0; i < h->data_sectors; i++)
        crcs[i] = chunk_data_crc(hdr, h, spb, i);

    if (all_good) {
        uint8_t *enc = xmalloc(len), *enc2 = xmalloc(len);
        chunk_encode(enc, h, entries, crcs, spb);
        struct tc_chunk_header back;
        if (chunk_decode(enc, len, h->set_uuid, spb, seg_sectors, &back, err, sizeof err) < 0) {
            fprintf(stderr, "re-encoded header refused: %s\n", err);
            abort();
        }
        CHECK(same_header(h, &back));
        for (uint32_t i = 0; i < h->nr_entries; i++) {
            struct tc_entry e;
            CHECK(chunk_entry(enc, &back, spb, i, &e, err, sizeof err) == 0);
            CHECK(same_entry(&e, &entries[i]));
        }
        for (uint32_t i = 0; i < h->data_sectors; i++)
            CHECK(chunk_data_crc(enc, &back, spb, i) == crcs[i]);
        chunk_encode(enc2, &back, entries, crcs, spb);
        CHECK(memcmp(enc, enc2, len) == 0);
        free(enc);
        free(enc2);
    }
    free(entries);
    free(crcs);
}

static void decode_part(const uint8_t *data, size_t size)
{
    unsigned spb = 1u << (data[0] % 9);
    uint32_t seg_sectors = 256u << (data[1] % 9);
    uint8_t mode = data[2];
    data += 3;
    size -= 3;
    if (size > MAX_HDR)
        size = MAX_HDR;
    size_t buflen = ((mode >> 2) & 7) * SECTOR;
    if (buflen == 0)
        buflen = size ? (size + SECTOR - 1) / SECTOR * SECTOR : SECTOR;
    uint8_t *buf = calloc(1, buflen);
    CHECK(buf != NULL);
    if (size)
        memcpy(buf, data, size < buflen ? size : buflen);
    uint8_t uuid[16];
    memcpy(uuid, buf + CH_OFF_SET_UUID, 16);
    if (mode & 2)
        uuid[0] ^= 1;
    if (mode & 1) {
        uint16_t hs = le16_get(buf + CH_OFF_HDR_SECTORS);
        if (hs >= 1 && hs <= TC_MAX_HDR_SECTORS && (size_t)hs * SECTOR <= buflen)
            fix_crc(buf, (size_t)hs * SECTOR);
    }

    struct tc_chunk_header h;
    char err[128];
    err[0] = 0;
    if (chunk_decode(buf, buflen, uuid, spb, seg_sectors, &h, err, sizeof err) < 0) {
        CHECK(strnlen(err, sizeof err) > 0 && strnlen(err, sizeof err) < sizeof err);
        free(buf);
        return;
    }
    CHECK(!(mode & 2));
    CHECK(le64_get(buf + CH_OFF_MAGIC) == TC_CHUNK_MAGIC);
    CHECK(memcmp(h.set_uuid, uuid, 16) == 0);
    CHECK(h.hdr_sectors >= 1 && h.hdr_sectors <= TC_MAX_HDR_SECTORS);
    CHECK((size_t)h.hdr_sectors * SECTOR <= buflen);
    CHECK((uint64_t)h.chunk_sector + h.hdr_sectors + h.data_sectors <= seg_sectors);
    CHECK(tc_chunk_header_bytes(spb, h.nr_entries, h.data_sectors) <=
          (size_t)h.hdr_sectors * SECTOR);
    /* Entries are read from the header alone, as recovery does. */
    size_t len = (size_t)h.hdr_sectors * SECTOR;
    uint8_t *hdr = xmalloc(len);
    memcpy(hdr, buf, len);
    free(buf);
    /* Decoding the header alone gives the same answer. */
    struct tc_chunk_header h2;
    CHECK(chunk_decode(hdr, len, uuid, spb, seg_sectors, &h2, err, sizeof err) == 0);
    CHECK(same_header(&h, &h2));
    check_accepted(hdr, &h, spb, seg_sectors);
    free(hdr);
}

/* ---- valid headers built from the input ---- */

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t below(uint64_t n) { return n ? rng() % n : 0; }

static void random_mask(struct tc_mask *m, unsigned spb)
{
    memset(m, 0, sizeof *m);
    unsigned kind = (unsigned)below(3);
    for (unsigned s = 0; s < spb; s++)
        if (kind == 0 || (kind == 1 && below(2)) || (kind == 2 && below(spb) == 0))
            m->w[s / 64] |= 1ull << (s % 64);
}

static void build_part(const uint8_t *data, size_t size)
{
    rng_state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < size; i++)
        rng_state = (rng_state ^ data[i]) * 0x100000001b3ull;
    rng_state |= 1;
    unsigned spb = 1u << below(9);
    uint32_t seg_sectors = 256u << below(9);
    struct tc_chunk_header h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 16; i++)
        h.set_uuid[i] = (uint8_t)rng();
    h.group_seq = rng() % TC_SEQ_LIMIT;    /* valid: below the limit */
    h.chunk_seq = rng() % TC_SEQ_LIMIT;
    h.tail_seq = rng() % TC_SEQ_LIMIT;
    h.wt_stable_seq = rng() % TC_SEQ_LIMIT;
    h.segment = (uint32_t)rng();
    h.hdr_sectors = (uint16_t)(1 + below(TC_MAX_HDR_SECTORS));
    h.flags = (uint16_t)rng();
    h.written_ns = rng();
    h.flushed_seq = rng() % TC_SEQ_LIMIT;
    size_t room = (size_t)h.hdr_sectors * SECTOR - CH_OFF_ENTRIES;
    uint32_t max_data = (uint32_t)TC_MIN(room / 4, (size_t)seg_sectors - h.hdr_sectors);
    h.data_sectors = (uint32_t)below(max_data + 1ull);
    h.nr_entries = (uint32_t)below((room - 4 * (size_t)h.data_sectors) / tc_entry_size(spb) + 1);
    h.chunk_sector = (uint32_t)below(seg_sectors - h.hdr_sectors - h.data_sectors + 1ull);

    struct tc_entry *entries = xmalloc(h.nr_entries * sizeof *entries);
    uint32_t *crcs = xmalloc(h.data_sectors * sizeof *crcs);
    for (uint32_t i = 0; i < h.nr_entries; i++) {
        struct tc_entry *e = &entries[i];
        memset(e, 0, sizeof *e);
        e->oblock = rng();
        e->seq = rng() % TC_SEQ_LIMIT;
        e->type = (uint8_t)(TC_ENTRY_DATA + below(4));   /* DATA to LOST */
        e->flags = (uint8_t)rng();
        e->target = rng();
        random_mask(&e->valid, spb);
        random_mask(&e->dirty, spb);
        if (e->type == TC_ENTRY_DATA) {
            if (h.data_sectors == 0) {
                e->type = TC_ENTRY_TOMBSTONE;
            } else {
                /* 1 to data_sectors valid sectors, dirty among them. */
                unsigned n = popcount(&e->valid);
                if (n == 0) {
                    e->valid.w[0] = 1;
                    n = 1;
                }
                for (unsigned s = spb; s-- > 0 && n > h.data_sectors;) {
                    if ((e->valid.w[s / 64] >> (s % 64)) & 1) {
                        e->valid.w[s / 64] &= ~(1ull << (s % 64));
                        n--;
                    }
                }
                for (unsigned w = 0; w < TC_MASK_WORDS; w++)
                    e->dirty.w[w] &= e->valid.w[w];
                e->data_sector = (uint32_t)below(h.data_sectors - n + 1ull);
            }
        }
    }
    for (uint32_t i = 0; i < h.data_sectors; i++)
        crcs[i] = (uint32_t)rng();

    size_t len = (size_t)h.hdr_sectors * SECTOR;
    uint8_t *enc = xmalloc(len);
    chunk_encode(enc, &h, entries, crcs, spb);
    struct tc_chunk_header back;
    char err[128];
    if (chunk_decode(enc, len, h.set_uuid, spb, seg_sectors, &back, err, sizeof err) < 0) {
        fprintf(stderr, "a valid header was refused: %s\n", err);
        abort();
    }
    CHECK(same_header(&h, &back));
    for (uint32_t i = 0; i < h.nr_entries; i++) {
        struct tc_entry e;
        if (chunk_entry(enc, &back, spb, i, &e, err, sizeof err) < 0) {
            fprintf(stderr, "a valid entry was refused: %s\n", err);
            abort();
        }
        CHECK(same_entry(&e, &entries[i]));
    }
    for (uint32_t i = 0; i < h.data_sectors; i++)
        CHECK(chunk_data_crc(enc, &back, spb, i) == crcs[i]);
    free(enc);
    free(entries);
    free(crcs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    decode_part(data, size);
    build_part(data, size);
    return 0;
}
