/*
 * Field-by-field equality of decoded chunk headers and log entries, for
 * the round-trip checks of the unit test (tests/unit/chunk.c) and the
 * fuzz harness (tests/fuzz/fuzz_chunk.c): one definition, so that a field
 * added to the format is compared by both or by neither.  Padding is not
 * compared (memcmp of whole structs would compare it).
 */
#ifndef TC_TESTS_CHUNK_EQUAL_H
#define TC_TESTS_CHUNK_EQUAL_H

#include <stdbool.h>
#include <string.h>

#include "format/ondisk.h"

static inline bool same_header(const struct tc_chunk_header *a, const struct tc_chunk_header *b)
{
    return memcmp(a->set_uuid, b->set_uuid, 16) == 0 && a->group_seq == b->group_seq &&
           a->chunk_seq == b->chunk_seq && a->tail_seq == b->tail_seq &&
           a->wt_stable_seq == b->wt_stable_seq && a->segment == b->segment &&
           a->chunk_sector == b->chunk_sector && a->hdr_sectors == b->hdr_sectors &&
           a->flags == b->flags && a->data_sectors == b->data_sectors &&
           a->nr_entries == b->nr_entries && a->written_ns == b->written_ns &&
           a->flushed_seq == b->flushed_seq;
}

static inline bool same_entry(const struct tc_entry *a, const struct tc_entry *b)
{
    return a->oblock == b->oblock && a->seq == b->seq && a->type == b->type &&
           a->flags == b->flags && a->data_sector == b->data_sector && a->target == b->target &&
           memcmp(&a->valid, &b->valid, sizeof a->valid) == 0 &&
           memcmp(&a->dirty, &b->dirty, sizeof a->dirty) == 0;
}

#endif
