/*
 * The survey: the first chunk header of every segment (survey.h).
 *
 * A segment's chunks are written in order from its first sector, and its
 * first chunk is written when its group is opened, with the group's
 * sequence, which is above every sequence the log had taken before.  So
 * the first header tells which incarnation the segment holds, and whether
 * it was opened after a given moment of the log -- without walking its
 * other chunks.  Judged as recovery's walk judges a segment's first step
 * (recovery.c, walk_step()): the header checks, names this segment and
 * sector 0.  Anything else is SURVEY_NONE, where the walk would find no
 * chunk either (it may find more by scanning past damage: find_damage()).
 *
 * Reads go out side by side, RECOVERY_DEPTH of them as recovery's walks
 * do: one sector, where nearly every header fits; a header that says it is
 * longer is read again whole.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache.h"
#include "engine/survey.h"
#include "util/misc.h"

enum { SURVEY_DEPTH = 64 };

struct survey_slot {
    struct tc_dev_io dio;
    uint8_t *buf;
    uint32_t s;                 /* the segment read (UINT32_MAX: free slot) */
    bool done;
    int err;
};

static void survey_read_done(struct tc_dev_io *dio, int err)
{
    struct survey_slot *sl = container_of(dio, struct survey_slot, dio);
    sl->done = true;
    sl->err = err;
}

static void survey_submit(struct cache *c, struct survey_slot *sl, size_t len)
{
    memset(&sl->dio, 0, sizeof sl->dio);
    sl->dio.op = TC_DEV_READ;
    sl->dio.buf = sl->buf;
    sl->dio.off = seg_dev_offset(c, sl->s);
    sl->dio.len = len;
    sl->dio.cb = survey_read_done;
    sl->done = false;
    dev_submit(seg_cdev(c, sl->s)->dev, &sl->dio);
}

/* The header read at the start of segment s (len bytes) into *f; false
 * when it says it is longer than len and fits the segment (*full: its
 * length): then it is read again. */
static bool survey_judge(struct cache *c, uint32_t s, const uint8_t *b, size_t len,
                         struct seg_first *f, size_t *full)
{
    *f = (struct seg_first){ .what = SURVEY_NONE };
    if (le64_get(b + CH_OFF_MAGIC) != TC_CHUNK_MAGIC)
        return true;
    size_t hlen = (size_t)le16_get(b + CH_OFF_HDR_SECTORS) * TC_SECTOR;
    if (hlen > len && hlen <= (size_t)TC_MAX_HDR_SECTORS * TC_SECTOR &&
        hlen <= (size_t)c->seg_sectors * TC_SECTOR) {
        *full = hlen;
        return false;
    }
    struct tc_chunk_header h;
    char why[128];
    if (chunk_decode(b, len, c->set_uuid, c->spb, c->seg_sectors, &h, why, sizeof why) < 0 ||
        h.segment != s || h.chunk_sector != 0) {
        f->chunk_magic = true;
        f->group_seq = le64_get(b + CH_OFF_GROUP_SEQ);
        return true;
    }
    *f = (struct seg_first){ .what = SURVEY_CHUNK, .group_seq = h.group_seq,
                             .chunk_seq = h.chunk_seq, .tail_seq = h.tail_seq,
                             .flushed_seq = h.flushed_seq };
    return true;
}

uint64_t survey_segments(struct cache *c, struct seg_first *first)
{
    struct survey_slot slots[SURVEY_DEPTH];
    for (unsigned i = 0; i < SURVEY_DEPTH; i++) {
        slots[i].buf = tc_alloc_aligned((size_t)TC_MAX_HDR_SECTORS * TC_SECTOR);
        slots[i].s = UINT32_MAX;
    }
    uint64_t reads = 0;
    uint32_t next = 0;
    unsigned busy = 0;
    for (;;) {
        for (unsigned i = 0; i < SURVEY_DEPTH && next < c->sp.nsegs; i++) {
            if (slots[i].s != UINT32_MAX)
                continue;
            slots[i].s = next++;
            survey_submit(c, &slots[i], TC_SECTOR);
            reads++;
            busy++;
        }
        if (busy == 0)
            break;
        reactor_poll(c->reactor, 100000000ull);
        for (unsigned i = 0; i < SURVEY_DEPTH; i++) {
            struct survey_slot *sl = &slots[i];
            if (sl->s == UINT32_MAX || !sl->done)
                continue;
            busy--;
            size_t full;
            if (sl->err) {
                first[sl->s] = (struct seg_first){ .what = SURVEY_UNREADABLE };
            } else if (!survey_judge(c, sl->s, sl->buf, sl->dio.len, &first[sl->s], &full)) {
                survey_submit(c, sl, full);
                reads++;
                busy++;
                continue;
            }
            sl->s = UINT32_MAX;
        }
    }
    for (unsigned i = 0; i < SURVEY_DEPTH; i++)
        free(slots[i].buf);
    return reads;
}

enum survey_since survey_since(const struct seg_first *f, uint64_t next_seq)
{
    if (f->what != SURVEY_CHUNK)
        return SINCE_UNKNOWN;
    return f->group_seq >= next_seq ? SINCE_REOPENED : SINCE_UNCHANGED;
}
