/*
 * Reads (readpath.c): a read is cut into pieces, one per cache block it
 * touches; a hit is read from the cache, a miss from the origin (with the
 * dirty cached sectors of the range laid over).  Every sector read from a
 * cache device is checked against its CRC; a sector that fails is never
 * returned.  Admitted misses are appended to the log (a fill) only after
 * the request completed: a miss never waits for a cache write.
 */
#ifndef TC_ENGINE_READPATH_H
#define TC_ENGINE_READPATH_H

#include <stdint.h>

struct ereq;

void cache_read(struct ereq *e);
void cache_read_direct(struct ereq *e);    /* without read-ahead */

/* Group fills (readpath.c): the state is made at attach for a cache of
 * cache_blocks blocks and freed at close; its memory for status. */
struct cache;
void group_init(struct cache *c, uint64_t cache_blocks);
/* The cache holds cache_blocks blocks from now on: the ghost of group
 * fills follows (a device failed). */
void group_resize(struct cache *c, uint64_t cache_blocks);
/* The fills the ghost remembers at most (status). */
uint64_t group_ghost_capacity(const struct cache *c);
void group_fini(struct cache *c);
uint64_t group_memory(const struct cache *c);

/* The fill's mode and --fill auto's choice now, with the origin's read
 * cost it is made from: status's "fill" object. */
struct tc_json;
void readpath_fill_status_json(struct cache *c, struct tc_json *j);

#endif
