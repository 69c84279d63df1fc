/*
 * Checksums of cached data: every sector read from a cache device is
 * checked against the CRC-32C its chunk header recorded, so a corrupted
 * or misdirected sector is never returned to a client.
 *
 * The CRCs live on the device, in the chunk headers.  This module keeps
 * those of recently used segments in RAM: one array per segment, indexed
 * by sector, filled chunk by chunk (when a chunk is written, or when its
 * header is read for a check), and dropped least recently used first when
 * the budget is reached.  Each segment also keeps its chunk table, which
 * says where the header of any sector's chunk is.
 *
 *   segment 12:  chunks [0: hdr 1, data 255] [256: hdr 1, data 200] ...
 *   crcs[12]:    [ - | c1 c2 ... c255 | - | c257 ... ]    (LRU-managed)
 *
 * This module is the CRC store and the look-up of a sector's CRC; the
 * chunk tables belong to the segments (engine/space.h: struct segment,
 * segment_chunk_of()), and this module reads them to find a sector's
 * chunk.  A chunk's crcs_loaded flag says its CRCs are in the store; only
 * this module sets and clears it.
 *
 * Invariant 17 (numbered with the engine's, engine/engine.h): a segment
 * has a CRC array (seg_sectors entries) exactly while it is on the LRU
 * list; bytes is the size of the arrays held and stays within the budget,
 * or is one array where one alone exceeds it (a store evicts least
 * recently used arrays until the new one fits, or none is left);
 * every array dropped -- evicted or forgotten -- clears the flags of that
 * segment's chunks, so a flag never outlives the array.
 */
#ifndef TC_ENGINE_VERIFY_H
#define TC_ENGINE_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "format/ondisk.h"

struct space;
struct verify_cache;

/* A store for the CRCs of sp's segments (blocks of spb sectors), holding
 * at most about budget bytes of them. */
struct verify_cache *verify_new(struct space *sp, unsigned spb, uint64_t budget);
void verify_free(struct verify_cache *v);
/* Bytes of CRC arrays it holds (0 for none): bounded by its budget, not by
 * the blocks cached; and of its table (12 bytes per segment), which is
 * sized to the cache. */
uint64_t verify_memory(const struct verify_cache *v);
uint64_t verify_table_memory(const struct verify_cache *v);
/* The CRCs of n sectors at (seg, off): true if their chunk's CRCs are
 * stored (the segment becomes the most recently used), false if its
 * header must be read first (then verify_remember()). */
bool verify_lookup(struct verify_cache *v, uint32_t seg, uint32_t off, uint32_t n,
                   uint32_t *crcs);
/* Store the CRCs a chunk header records (the chunk at chunk_start of
 * segment seg, after reading or writing it), evicting least recently
 * used segments to make room. */
void verify_remember(struct verify_cache *v, uint32_t seg, uint32_t chunk_start,
                     const struct tc_chunk_header *h, const uint8_t *hdr_buf);
/* Drop segment seg's CRCs (its group is retired). */
void verify_forget(struct verify_cache *v, uint32_t seg);

#endif
