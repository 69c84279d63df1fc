/*
 * Chunk headers (format/ondisk.h, format/chunk.c): encode, decode and
 * check.  A header of every entry type round-trips field by field for
 * blocks of 1 to 256 sectors; changing any one byte of an encoded header
 * makes chunk_decode() refuse it; a header of another set, too short a
 * buffer, a size of 0 or more than TC_MAX_HDR_SECTORS sectors, a chunk
 * running past its segment, entries that do not fit are refused (and the
 * exact fits are accepted); every sequence number is accepted at
 * TC_SEQ_LIMIT - 1 and refused at TC_SEQ_LIMIT; chunk_entry() refuses
 * unknown types, masks beyond the block, DATA entries without sectors,
 * with dirty sectors not valid or with data outside the chunk; encoding
 * over a buffer of garbage gives the same bytes as over zeroes (the log
 * encodes into segment images that held older chunks).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/ondisk.h"
#include "util/crc32c.h"
#include "util/misc.h"

#include "../common/chunk_equal.h"
#include "check.h"

#define SEG_SECTORS 1024u
#define MAX_ENTRIES 16

static const uint8_t set_a[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };

static uint8_t buf[(TC_MAX_HDR_SECTORS + 1) * 4096];
static char err[256];

/* The mask of sectors [s0, s1). */
static struct tc_mask range(unsigned s0, unsigned s1)
{
    struct tc_mask m = { { 0 } };
    for (unsigned s = s0; s < s1; s++)
        m.w[s / 64] |= 1ull << (s % 64);
    return m;
}

/* A header of every entry type for blocks of spb sectors, the masks
 * reaching the block's last sector. */
struct sample {
    struct tc_chunk_header h;
    struct tc_entry e[MAX_ENTRIES];
    uint32_t crcs[2 * TC_MAX_BLOCK_SIZE / 4096];
};

static void make_sample(struct sample *s, unsigned spb)
{
    memset(s, 0, sizeof *s);
    memcpy(s->h.set_uuid, set_a, 16);
    s->h.group_seq = 77;
    s->h.chunk_seq = 0x123456789ull;
    s->h.tail_seq = 70;
    s->h.wt_stable_seq = 0x1000;
    s->h.segment = 0xABCDE;
    s->h.chunk_sector = 100;
    s->h.flags = TC_CHUNK_CLOSED | TC_CHUNK_CLEAN_STOP;
    s->h.written_ns = 0xFEDCBA9876543210ull;
    s->h.flushed_seq = 0x123456700ull;
    unsigned half = spb > 1 ? spb / 2 : 1;
    uint32_t data = 0;
    unsigned n = 0;
    /* DATA: the whole block, all dirty; then the top half, partly dirty. */
    s->e[n++] = (struct tc_entry){ .oblock = 0, .seq = 5, .type = TC_ENTRY_DATA,
                                   .flags = TC_ENTRY_MIRROR, .data_sector = data,
                                   .valid = range(0, spb), .dirty = range(0, spb) };
    data += spb;
    s->e[n++] = (struct tc_entry){ .oblock = UINT64_MAX, .seq = TC_SEQ_LIMIT - 1,
                                   .type = TC_ENTRY_DATA, .flags = TC_ENTRY_WT,
                                   .data_sector = data, .valid = range(spb - half, spb),
                                   .dirty = range(spb - 1, spb) };
    data += half;
    s->e[n++] = (struct tc_entry){ .oblock = 42, .seq = 6, .type = TC_ENTRY_TOMBSTONE };
    s->e[n++] = (struct tc_entry){ .oblock = 43, .seq = 7, .type = TC_ENTRY_CLEAN,
                                   .target = tc_loc(0xABCDE, 12345), .valid = range(0, spb) };
    s->e[n++] = (struct tc_entry){ .oblock = 44, .seq = 8, .type = TC_ENTRY_LOST,
                                   .valid = range(spb - 1, spb) };
    s->e[n++] = (struct tc_entry){ .oblock = 45, .seq = 9, .type = TC_ENTRY_LOST };
    s->h.nr_entries = n;
    s->h.data_sectors = data;
    for (uint32_t i = 0; i < data; i++)
        s->crcs[i] = 0x9E3779B9u * (i + 1);
    size_t bytes = tc_chunk_header_bytes(spb, n, data);
    s->h.hdr_sectors = (uint16_t)((bytes + 4095) / 4096);
}

static int decode(unsigned spb, struct tc_chunk_header *out)
{
    return chunk_decode(buf, sizeof buf, set_a, spb, SEG_SECTORS, out, err, sizeof err);
}

static void check_round_trip(void)
{
    unsigned spbs[] = { 1, 2, 8, 16, 32, 63, 64, 65, 128, 192, 255, 256 };
    printf("round trip of every entry type, blocks of 1..256 sectors\n");
    for (unsigned k = 0; k < TC_ARRAY_SIZE(spbs); k++) {
        unsigned spb = spbs[k];
        struct sample s;
        make_sample(&s, spb);
        chunk_encode(buf, &s.h, s.e, s.crcs, spb);
        struct tc_chunk_header h;
        int rc = decode(spb, &h);
        CHECK(rc == 0);
        if (rc != 0) {
            fprintf(stderr, "spb %u: %s\n", spb, err);
            continue;
        }
        CHECK(same_header(&h, &s.h));
        for (uint32_t i = 0; i < h.nr_entries; i++) {
            struct tc_entry e;
            CHECK(chunk_entry(buf, &h, spb, i, &e, err, sizeof err) == 0);
            CHECK(same_entry(&e, &s.e[i]));
        }
        for (uint32_t i = 0; i < h.data_sectors; i++)
            CHECK(chunk_data_crc(buf, &h, spb, i) == s.crcs[i]);
        /* Bytes past the encoded length of the header are zero. */
        size_t used = tc_chunk_header_bytes(spb, h.nr_entries, h.data_sectors);
        bool zero = true;
        for (size_t i = used; i < (size_t)h.hdr_sectors * 4096; i++)
            zero &= buf[i] == 0;
        CHECK(zero);
    }
}

/* chunk_encode() writes every byte of the header: what it leaves out
 * would carry an older chunk's bytes (the segment image is reused). */
static void check_over_garbage(void)
{
    static uint8_t clean[sizeof buf];
    unsigned spbs[] = { 1, 8, 32, 64, 65, 256 };
    printf("encoding over garbage: the same bytes as over zeroes\n");
    for (unsigned k = 0; k < TC_ARRAY_SIZE(spbs); k++) {
        unsigned spb = spbs[k];
        struct sample s;
        make_sample(&s, spb);
        s.h.hdr_sectors++;              /* room past the entries, too */
        size_t len = (size_t)s.h.hdr_sectors * 4096;
        memset(buf, 0, sizeof buf);
        chunk_encode(buf, &s.h, s.e, s.crcs, spb);
        memcpy(clean, buf, len);
        memset(buf, 0xA5, sizeof buf);
        chunk_encode(buf, &s.h, s.e, s.crcs, spb);
        CHECK(memcmp(buf, clean, len) == 0);
        struct tc_chunk_header h;
        CHECK(decode(spb, &h) == 0);
    }
}

static void check_corruption(void)
{
    printf("every single-byte change of an encoded header is refused\n");
    unsigned spbs[] = { 16, 256 };
    for (unsigned k = 0; k < TC_ARRAY_SIZE(spbs); k++) {
        unsigned spb = spbs[k];
        struct sample s;
        make_sample(&s, spb);
        if (k == 1)
            s.h.hdr_sectors = 2;        /* a second sector of zeroes, covered too */
        chunk_encode(buf, &s.h, s.e, s.crcs, spb);
        size_t len = (size_t)s.h.hdr_sectors * 4096;
        unsigned accepted = 0;
        struct tc_chunk_header h;
        for (size_t i = 0; i < len; i++) {
            uint8_t old = buf[i];
            buf[i] = old ^ (uint8_t)(1u << (i % 8));
            if (decode(spb, &h) == 0)
                accepted++;
            buf[i] = old ^ 0xFF;
            if (decode(spb, &h) == 0)
                accepted++;
            buf[i] = old;
        }
        CHECK(accepted == 0);
        CHECK(decode(spb, &h) == 0);    /* restored */
    }
}

/* Re-encode the sample after edit() and decode it with segment_sectors. */
static int redo(struct sample *s, unsigned spb, uint32_t segment_sectors, size_t buflen)
{
    chunk_encode(buf, &s->h, s->e, s->crcs, spb);
    struct tc_chunk_header h;
    return chunk_decode(buf, buflen, set_a, spb, segment_sectors, &h, err, sizeof err);
}

static void check_bounds(void)
{
    printf("set, buffer, header size, segment end, entries that fit\n");
    unsigned spb = 64;
    struct sample s;
    make_sample(&s, spb);
    CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) == 0);
    uint8_t other[16];
    memcpy(other, set_a, 16);
    other[15] ^= 1;
    struct tc_chunk_header h;
    CHECK(chunk_decode(buf, sizeof buf, other, spb, SEG_SECTORS, &h, err, sizeof err) != 0);
    /* The buffer must hold the whole header. */
    size_t len = (size_t)s.h.hdr_sectors * 4096;
    CHECK(redo(&s, spb, SEG_SECTORS, len) == 0);
    CHECK(redo(&s, spb, SEG_SECTORS, len - 1) != 0);
    /* Header sizes 0 and TC_MAX_HDR_SECTORS + 1 are refused; the maximum
     * is accepted. */
    s.h.hdr_sectors = 0;
    CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) != 0);
    s.h.hdr_sectors = TC_MAX_HDR_SECTORS + 1;
    CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) != 0);
    s.h.hdr_sectors = TC_MAX_HDR_SECTORS;
    CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) == 0);
    /* The chunk ends exactly at the segment's end: accepted; one more
     * sector: refused. */
    make_sample(&s, spb);
    uint32_t end = s.h.chunk_sector + s.h.hdr_sectors + s.h.data_sectors;
    CHECK(redo(&s, spb, end, sizeof buf) == 0);
    CHECK(redo(&s, spb, end - 1, sizeof buf) != 0);
    s.h.chunk_sector = UINT32_MAX;      /* no wrap-around in the sum */
    CHECK(redo(&s, spb, UINT32_MAX, sizeof buf) != 0);
    /* Entries and CRCs filling one header sector exactly: accepted; one
     * CRC more: refused. */
    make_sample(&s, spb);
    size_t esz = tc_entry_size(spb);
    uint32_t n = s.h.nr_entries;
    uint32_t d = (uint32_t)((4096 - CH_OFF_ENTRIES - n * esz) / 4);
    CHECK(tc_chunk_header_bytes(spb, n, d) == 4096);
    s.h.hdr_sectors = 1;
    s.h.data_sectors = d;
    uint32_t *crcs = calloc(d + 1, sizeof *crcs);
    if (crcs == NULL)
        abort();
    chunk_encode(buf, &s.h, s.e, crcs, spb);
    CHECK(chunk_decode(buf, sizeof buf, set_a, spb, SEG_SECTORS, &h, err, sizeof err) == 0);
    /* One CRC more: encoded as a two-sector header, then cut to one
     * sector and checksummed again, so that only the size rule refuses. */
    s.h.data_sectors = d + 1;
    s.h.hdr_sectors = 2;
    chunk_encode(buf, &s.h, s.e, crcs, spb);
    le16_put(buf + CH_OFF_HDR_SECTORS, 1);
    le32_put(buf + CH_OFF_CRC, 0);
    le32_put(buf + CH_OFF_CRC, tc_crc32c(0, buf, 4096));
    CHECK(chunk_decode(buf, sizeof buf, set_a, spb, SEG_SECTORS, &h, err, sizeof err) != 0);
    CHECK(strstr(err, "do not fit") != NULL);
    free(crcs);
}

static void check_seq_limit(void)
{
    printf("sequence numbers: TC_SEQ_LIMIT - 1 accepted, TC_SEQ_LIMIT refused\n");
    unsigned spb = 32;
    uint64_t *fields[5];
    struct sample s;
    make_sample(&s, spb);
    fields[0] = &s.h.group_seq;
    fields[1] = &s.h.chunk_seq;
    fields[2] = &s.h.tail_seq;
    fields[3] = &s.h.wt_stable_seq;
    fields[4] = &s.h.flushed_seq;
    for (int f = 0; f < 5; f++) {
        uint64_t keep = *fields[f];
        *fields[f] = TC_SEQ_LIMIT - 1;
        CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) == 0);
        *fields[f] = TC_SEQ_LIMIT;
        CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) != 0);
        *fields[f] = UINT64_MAX;
        CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) != 0);
        *fields[f] = keep;
    }
    /* An entry's sequence. */
    struct tc_chunk_header h;
    struct tc_entry e;
    s.e[2].seq = TC_SEQ_LIMIT - 1;
    CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) == 0);
    chunk_decode(buf, sizeof buf, set_a, spb, SEG_SECTORS, &h, err, sizeof err);
    CHECK(chunk_entry(buf, &h, spb, 2, &e, err, sizeof err) == 0 && e.seq == TC_SEQ_LIMIT - 1);
    s.e[2].seq = TC_SEQ_LIMIT;
    CHECK(redo(&s, spb, SEG_SECTORS, sizeof buf) == 0);      /* the header is fine */
    chunk_decode(buf, sizeof buf, set_a, spb, SEG_SECTORS, &h, err, sizeof err);
    CHECK(chunk_entry(buf, &h, spb, 2, &e, err, sizeof err) != 0);
}

/* Entry i of the sample after edit, as chunk_entry() judges it. */
static int entry_after(struct sample *s, unsigned spb, uint32_t i)
{
    struct tc_chunk_header h;
    struct tc_entry e;
    if (redo(s, spb, SEG_SECTORS, sizeof buf) != 0)
        return -2;
    chunk_decode(buf, sizeof buf, set_a, spb, SEG_SECTORS, &h, err, sizeof err);
    return chunk_entry(buf, &h, spb, i, &e, err, sizeof err);
}

static void check_entries(void)
{
    printf("chunk_entry: types, masks beyond the block, DATA sectors and bounds\n");
    unsigned spbs[] = { 1, 16, 64, 65, 200, 256 };
    for (unsigned k = 0; k < TC_ARRAY_SIZE(spbs); k++) {
        unsigned spb = spbs[k];
        struct sample s;
        make_sample(&s, spb);
        for (uint32_t i = 0; i < s.h.nr_entries; i++)
            CHECK(entry_after(&s, spb, i) == 0);
        /* Unknown types. */
        s.e[2].type = 0;
        CHECK(entry_after(&s, spb, 2) == -1);
        s.e[2].type = TC_ENTRY_LOST + 1;
        CHECK(entry_after(&s, spb, 2) == -1);
        make_sample(&s, spb);
        /* A sector beyond the block in the valid or the dirty mask (when
         * the encoding has room for one). */
        if (spb % 64 != 0) {
            s.e[4].valid.w[spb / 64] |= 1ull << (spb % 64);
            CHECK(entry_after(&s, spb, 4) == -1);
            make_sample(&s, spb);
            s.e[3].dirty.w[spb / 64] |= 1ull << (spb % 64);
            CHECK(entry_after(&s, spb, 3) == -1);
            make_sample(&s, spb);
        }
        /* DATA: no sectors; a dirty sector not valid; data running past
         * the chunk's data by one sector, and ending exactly at it. */
        s.e[0].valid = range(0, 0);
        s.e[0].dirty = range(0, 0);
        CHECK(entry_after(&s, spb, 0) == -1);
        make_sample(&s, spb);
        if (spb > 1) {
            s.e[1].dirty = range(0, 1);     /* valid is the top half */
            CHECK(entry_after(&s, spb, 1) == -1);
            make_sample(&s, spb);
        }
        s.e[1].data_sector++;
        CHECK(entry_after(&s, spb, 1) == -1);
        make_sample(&s, spb);
        s.e[0].data_sector = s.h.data_sectors - spb;
        CHECK(entry_after(&s, spb, 0) == 0);
        s.e[0].data_sector = UINT32_MAX;    /* no wrap-around */
        CHECK(entry_after(&s, spb, 0) == -1);
        /* Non-DATA entries carry no data: data_sector is not checked. */
        make_sample(&s, spb);
        s.e[3].data_sector = UINT32_MAX;
        CHECK(entry_after(&s, spb, 3) == 0);
    }
}

int main(void)
{
    check_round_trip();
    check_over_garbage();
    check_corruption();
    check_bounds();
    check_seq_limit();
    check_entries();
    return check_exit("chunk");
}
