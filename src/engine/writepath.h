/*
 * Writes, flushes, trims, write-zeroes and prefetch requests
 * (writepath.c).  A write is cut into pieces, one per cache block, and
 * each piece follows its mode (writeback, writethrough, writearound)
 * under the block's lock.  Waiting for the cache write before the origin
 * write means that after a crash the cache never holds an older version
 * than the origin.
 */
#ifndef TC_ENGINE_WRITEPATH_H
#define TC_ENGINE_WRITEPATH_H

#include <stdint.h>

struct cache;
struct ereq;

/* The newest sequence number whose write-through origin write is done:
 * after an origin flush, everything up to it is on the origin. */
uint64_t wt_stable_candidate(struct cache *c);
void cache_write(struct ereq *e);
void cache_discard(struct ereq *e);     /* TRIM and WRITE_ZEROES */
void cache_flush(struct ereq *e);
void cache_prefetch(struct ereq *e);    /* NBD_CMD_CACHE */

#endif
