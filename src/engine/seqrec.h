/*
 * The sequence record (seqrec.c; format in ondisk.h): how far the set's log
 * had durably reached, kept off the cache devices, so that a start on an
 * older copy of a device (a restored backup, a rolled-back snapshot) is
 * refused instead of serving older data and writing older dirty data over
 * the origin.
 *
 * Invariant: the record's chunk_seq never exceeds a chunk sequence that was
 * written and flushed to the set's devices (the log's flushed_upto after a
 * flush issued in this run, or a durable mark recovery read), and its
 * entry for each device never exceeds a chunk that was written and
 * flushed to that device, so a crash at any instant leaves the devices,
 * each of them, at least as new as the record: only an older copy of one
 * of them is below it.
 */
#ifndef TC_ENGINE_SEQREC_H
#define TC_ENGINE_SEQREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/ondisk.h"

struct cache;
struct tc_json;

/* What the record says of a set's devices, read only: serve's start
 * (seqrec_check) and the offline commands (check, its --salvage, dump)
 * look the same way. */
enum seqrec_verdict {
    SEQREC_CURRENT,         /* the log reaches at least the record's chunk */
    SEQREC_MISSING,         /* no record: nothing to compare */
    SEQREC_OTHER_SET,       /* a record of another set (formatted since): why */
    SEQREC_NOT_CHECKED,     /* a device not in service: why */
    SEQREC_UNUSABLE,        /* damaged, unreadable, another version: why */
    SEQREC_OLDER,           /* the devices hold an older copy of the log */
    SEQREC_ELSEWHERE,       /* the set keeps its record at another place (its
                               superblocks' state token): why, place */
};
struct seqrec_look {
    enum seqrec_verdict verdict;
    char *path;             /* the record's file (owned) */
    /* The newest chunk on the devices, and the record's chunk (CURRENT,
     * OLDER); for an OLDER device (older_dev >= 0), that device's newest
     * chunk and the record's entry for it. */
    uint64_t found;
    uint64_t recorded;
    int older_dev;          /* OLDER: the set's device found older, or -1: the set */
    /* OLDER by the set's stop record (io/originrec.c), not the sequence
     * record: recorded is its chunk, path its file; stop_serving: it was
     * written while the set was served, not at its clean stop. */
    bool by_stop;
    bool stop_serving;
    uint32_t version;       /* the record's format version (CURRENT, OLDER) */
    /* The record's entry for each device of the set, by the set's index
     * (0: none, or not known) (CURRENT, OLDER). */
    uint64_t dev_recorded[TC_MAX_DEVICES];
    char when[64];          /* ... and when it was written */
    char why[192];
    char devs[512];         /* the devices' names (an OLDER device's only), for messages */
    /* The state place the superblocks record (ondisk.h): its token (zero:
     * none recorded) and the state file's path then ("" if not known);
     * whether the record read carries that token. */
    uint8_t set_token[16];
    char place[TC_STATE_PLACE_LEN];
    bool token_matches;
    uint8_t token[16];      /* the record's own (zero: none, or no record read) */
    char given[TC_STATE_PLACE_LEN + 64];    /* the state file given, absolute */
};
void seqrec_look(const struct cache *c, struct seqrec_look *l);
void seqrec_look_free(struct seqrec_look *l);
/* "checked", "missing", "other set", "not checked", "unusable", "older",
 * "elsewhere". */
const char *seqrec_verdict_name(enum seqrec_verdict v);
/* The words of a refusal that differ by command: whose view the record
 * is ("this daemon"), what going on would do, and the way out with the
 * option (for an older log, and for an unusable record). */
struct seqrec_words {
    const char *who, *harm, *way_out, *way_out_unusable, *way_out_elsewhere;
    const char *way_out_stop;       /* refused by the set's stop record; NULL: way_out */
};
/* -1 with serve's refusal, in the command's words, in err for an older
 * log, an unusable record and a record kept elsewhere; 0 otherwise. */
int seqrec_refusal(const struct seqrec_look *l, const struct seqrec_words *w, char *err,
                   size_t errlen);

/* At start, after recovery and the origin check, before anything is
 * written: reads the record beside the state file and compares it with
 * the newest chunk recovery found, on the set and on each device.  -1
 * with the reason in err when the devices (or one of them) hold an older
 * log than the record (or the record is unusable), unless accept_older:
 * then a warning, and the record is replaced.  -1 too when the set's
 * superblocks say it keeps its record at another place (none here,
 * another set's, another of this set's), unless adopt_place and the old
 * place no longer holds it: then the record here, if any, is compared
 * as above, and the set keeps its record here from this start on. */
int seqrec_check(struct cache *c, bool accept_older, bool adopt_place, char *err,
                 size_t errlen);
/* Before recovery: the chunk of the record beside the state file, when
 * it is this set's (c->seqrec_bound; 0 when none can be read), for the
 * scan to count each device's newest chunk at or below it
 * (devs[].newest_at_bound): what the record vouches for on a device that
 * has chunks above it too (seqrec_check()). */
void seqrec_bound_read(struct cache *c);
/* Recovery refused the start (err): when the record finds one of the
 * devices older than it says, that is the likelier cause (its missing
 * chunks look like damage to the scan), and err is replaced by the
 * older-copy refusal, which says what recovery found too. */
void seqrec_explain_refusal(struct cache *c, char *err, size_t errlen);
/* The start went through: the recovered durable mark is recorded, and
 * then the state place in the superblocks if they lack it (blocking:
 * nothing is served yet). */
void seqrec_started(struct cache *c);
/* The chunk recording the numbers a start after a crash skipped is durable:
 * recorded at once (blocking). */
void seqrec_restart_marked(struct cache *c);
/* From the writeback tick (100 ms): at most every SEQREC_PERIOD_NS, hand
 * the log's flushed mark to the writer thread if it moved (never blocks:
 * a trylock, else the next tick). */
void seqrec_tick(struct cache *c, uint64_t now_ns);
/* The space's unguard event (space.h, invariant 22): no device has a free
 * segment but ones the record's entries hold back; the record is written
 * again at once without the entries whose chunks' segments were freed
 * (blocking), and the space's guard[] lowered if it could be. */
void seqrec_unguard(struct cache *c);
/* The abandonment is recorded in the state file: the record goes back to
 * chunk 0, once (blocking). */
void seqrec_abandoned(struct cache *c);
/* A clean close, after its last log sync: the writer thread ends, and the
 * final mark is recorded (blocking). */
void seqrec_close(struct cache *c);
/* Frees it (the writer thread ended without writing more). */
void seqrec_free(struct cache *c);
void seqrec_status_json(struct cache *c, struct tc_json *j);

#endif
