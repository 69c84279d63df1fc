/* tiercache check: an offline audit of a cache set (check.c). */
#ifndef TC_ENGINE_CHECK_H
#define TC_ENGINE_CHECK_H

#include <stdbool.h>
#include <stdint.h>

struct cache;

struct check_result {
    char **problems;                /* one sentence each */
    unsigned nproblems;
    uint64_t blocks, fragments, dirty_bytes;
    uint64_t data_checked_bytes;
    uint64_t damaged_clean_sectors, lost_dirty_sectors;
    uint64_t unflushed_entries;     /* ignored by recovery: never flushed, normal after a crash */
    uint64_t groups, segments, segments_free;
};

/* Returns the number of problems found (0: clean). */
int cache_check(struct cache *c, struct check_result *r, bool progress);
void check_result_free(struct check_result *r);

#endif
