/*
 * The survey (survey.c): the first chunk header of every segment, one
 * read per segment instead of one per chunk -- which incarnation of each
 * segment the devices hold.  The first step of a start after a crash
 * that reads a running checkpoint and replays only the log written after
 * it (recovery.c, from_running_checkpoint()) (the design, and why each
 * segment's first header is enough to tell what changed: checkpoint.c).
 * tiercache check compares it with what its full scan found (check.c).
 */
#ifndef TC_ENGINE_SURVEY_H
#define TC_ENGINE_SURVEY_H

#include <stdbool.h>
#include <stdint.h>

struct cache;

enum survey_what {
    SURVEY_NONE = 0,            /* no header of this set checks at the segment's start:
                                   never written, a checkpoint's piece, torn or damaged */
    SURVEY_CHUNK,               /* a header that checks, of this segment, at sector 0 */
    SURVEY_UNREADABLE,          /* the read failed */
};

/* What the start of one segment holds. */
struct seg_first {
    uint8_t what;               /* enum survey_what */
    bool chunk_magic;           /* SURVEY_NONE: a header with the chunk magic that does
                                   not check (torn, damaged, another set's); group_seq
                                   is then the group it claims */
    uint64_t group_seq;         /* SURVEY_CHUNK: the incarnation's group */
    uint64_t chunk_seq;         /* ... its first chunk's sequence */
    uint64_t tail_seq;          /* ... the log tail that chunk recorded */
    uint64_t flushed_seq;       /* ... and how far the log was durable then */
};

/* The first header of each of the set's segments into first[] (sized
 * c->sp.nsegs), read side by side on the reactor; the reads issued (a
 * header longer than one sector takes two).  Reads only. */
uint64_t survey_segments(struct cache *c, struct seg_first *first);

/* How segment s stands against a checkpoint taken when the log's next
 * group sequence was next_seq, from its survey: */
enum survey_since {
    SINCE_UNCHANGED,            /* the incarnation the checkpoint knew, or an
                                   older leftover (group below next_seq) */
    SINCE_REOPENED,             /* opened after the checkpoint: every entry the
                                   checkpoint has in it is gone */
    SINCE_UNKNOWN,              /* nothing that checks at its start (or unreadable) */
};
enum survey_since survey_since(const struct seg_first *f, uint64_t next_seq);

#endif
