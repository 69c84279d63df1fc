/*
 * s3fifo: S3-FIFO (Yang et al., SOSP 2023) on a log.
 *
 * New blocks enter on probation.  When the cleaner reaches a
 * probation block: used again since admitted -> it moves to the main
 * queue (written again, frequency reset); never used -> dropped, and its
 * number goes to the ghost.  A miss on a block in the ghost skips
 * probation.  Main blocks are kept while their frequency (raised by hits,
 * up to 3) is above zero, lowering it by one each pass.
 *
 * The paper's small queue is 10% of the cache; in one log a probation
 * block lives for one pass of the whole log, so this keeps the quick
 * demotion of one-hit wonders only in spirit: they never earn a second
 * write.  The ghost remembers half as many blocks as the cache holds (and
 * 64 more); after a device failure, half as many as the devices in
 * service hold (resize()): sized by the whole cache, a small survivor's
 * ghost remembered blocks dropped several of its passes ago, and admitted
 * them straight to main as if they were recent.
 */
#include <stdlib.h>

#include "policy/policy.h"
#include "util/json.h"
#include "util/misc.h"

/* The block's hint, the byte the index keeps for the policy:
 *   bits 0-1  uses since admitted or promoted, saturating at 3
 *   bit 2     on probation (the paper's small queue) */
#define HINT_FREQ 0x3u
#define HINT_PROBATION (1u << 2)

struct s3 {
    struct ghost *ghost;
    uint64_t cache_blocks;      /* the blocks it is sized for */
    uint64_t from_ghost;        /* admitted straight to main */
};

static uint64_t ghost_blocks(uint64_t cache_blocks)
{
    return cache_blocks / 2 + 64;
}

static void *create(const struct policy_params *params)
{
    struct s3 *p = tc_xcalloc(1, sizeof *p);
    p->ghost = ghost_create(ghost_blocks(params->cache_blocks));
    p->cache_blocks = params->cache_blocks;
    return p;
}

/* The newest of the blocks remembered stay (ghost_resize()). */
static void resize(void *s, const struct policy_params *params)
{
    struct s3 *p = s;
    ghost_resize(p->ghost, ghost_blocks(params->cache_blocks));
    p->cache_blocks = params->cache_blocks;
}

static void destroy(void *s)
{
    struct s3 *p = s;
    ghost_destroy(p->ghost);
    free(p);
}

/* A stream is hot when its blocks are in the ghost (dropped recently). */
static bool stream_hot(void *s, uint64_t oblock)
{
    struct s3 *p = s;
    return ghost_contains(p->ghost, oblock);
}

static void hit(void *s, uint64_t oblock, uint8_t *hint)
{
    if ((*hint & HINT_FREQ) < 3)
        (*hint)++;
}

static void inserted(void *s, uint64_t oblock, uint8_t *hint, bool from_miss)
{
    struct s3 *p = s;
    if (ghost_contains(p->ghost, oblock)) {
        ghost_remove(p->ghost, oblock);
        *hint = 0;
        p->from_ghost++;
    } else {
        *hint = HINT_PROBATION;
    }
}

static bool keep(void *s, uint64_t oblock, uint8_t *hint)
{
    struct s3 *p = s;
    if (*hint & HINT_PROBATION) {
        if (*hint & HINT_FREQ) {
            *hint = 0;          /* promoted to main, its uses spent */
            return true;
        }
        ghost_add(p->ghost, oblock);
        return false;
    }
    if ((*hint & HINT_FREQ) == 0)
        return false;
    (*hint)--;
    return true;
}

static uint64_t memory(const void *s)
{
    const struct s3 *p = s;
    return sizeof *p + ghost_memory(p->ghost);
}

static void status(const void *s, struct tc_json *j)
{
    const struct s3 *p = s;
    json_uint(j, "cache_blocks", p->cache_blocks);
    json_uint(j, "ghost_blocks", ghost_capacity(p->ghost));
    json_uint(j, "admitted_from_ghost", p->from_ghost);
}

const struct policy_ops policy_s3fifo = {
    .name = "s3fifo",
    .summary = "probation for new blocks, ghost history, frequency in main",
    .create = create,
    .destroy = destroy,
    .stream_hot = stream_hot,
    .hit = hit,
    .inserted = inserted,
    .keep = keep,
    .resize = resize,
    .memory = memory,
    .status = status,
};
