/*
 * The sequence record (seqrec.c; format in ondisk.h): how far the set's log
 * had durably reached, kept off the cache devices, so that a start on an
 * older copy of a device (a restored backup, a rolled-back snapshot) is
 * refused instead of serving older data and writing older dirty data over
 * the origin.
 *
 * Invariant: the record's chunk_seq never exceeds a chunk sequence that was
 * written and flushed to the set's devices (the log's flushed_upto after a
 * flush issued in this run, or a durable mark recovery read), so a crash
 * at any instant leaves the devices at least as new as the record: only an
 * older copy of them is below it.
 */
#ifndef TC_ENGINE_SEQREC_H
#define TC_ENGINE_SEQREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct tc_json;

/* At start, after recovery and the origin check, before anything is
 * written: reads the record beside the state file and compares it with
 * the newest chunk recovery found.  -1 with the reason in err when the
 * devices hold an older log than the record (or the record is unusable),
 * unless accept_older: then a warning, and the record is replaced. */
int seqrec_check(struct cache *c, bool accept_older, char *err, size_t errlen);
/* The start went through: the recovered durable mark is recorded
 * (blocking: nothing is served yet). */
void seqrec_started(struct cache *c);
/* From the writeback tick (100 ms): at most every SEQREC_PERIOD_NS, hand
 * the log's flushed mark to the writer thread if it moved (never blocks:
 * a trylock, else the next tick). */
void seqrec_tick(struct cache *c, uint64_t now_ns);
/* A clean close, after its last log sync: the writer thread ends, and the
 * final mark is recorded (blocking). */
void seqrec_close(struct cache *c);
/* Frees it (the writer thread ended without writing more). */
void seqrec_free(struct cache *c);
void seqrec_status_json(struct cache *c, struct tc_json *j);

#endif
