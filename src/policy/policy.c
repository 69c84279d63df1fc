/*
 * The table of policies, found by name for --policy, and the calls the
 * engine makes into the policy in use.  Each call supplies the default
 * policy.h gives for an operation a policy leaves NULL, so that a policy
 * states only what it decides differently.
 */
#include <string.h>

#include "policy/policy.h"
#include "util/json.h"

extern const struct policy_ops policy_default, policy_lru, policy_fifo, policy_s3fifo;

static const struct policy_ops *const all[] = { &policy_default, &policy_lru, &policy_fifo,
                                                &policy_s3fifo };

const struct policy_ops *policy_find(const char *name)
{
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

const char *policy_names(void) { return "default, lru, fifo, s3fifo"; }

void policy_open(struct policy *p, const struct policy_ops *ops,
                 const struct policy_params *params)
{
    p->ops = ops;
    p->params = *params;
    p->state = ops->create ? ops->create(&p->params) : NULL;
}

void policy_close(struct policy *p)
{
    if (p->ops && p->ops->destroy)
        p->ops->destroy(p->state);
    p->ops = NULL;
    p->state = NULL;
}

void policy_switch(struct policy *p, const struct policy_ops *ops)
{
    struct policy_params params = p->params;
    policy_close(p);
    policy_open(p, ops, &params);
}

void policy_resize(struct policy *p, uint64_t cache_blocks)
{
    if (cache_blocks == 0 || cache_blocks == p->params.cache_blocks)
        return;
    p->params.cache_blocks = cache_blocks;
    if (p->ops && p->ops->resize)
        p->ops->resize(p->state, &p->params);
}

bool policy_admit(struct policy *p, uint64_t oblock, bool free_space)
{
    return p->ops->admit ? p->ops->admit(p->state, oblock, free_space) : true;
}

bool policy_admit_write(struct policy *p, uint64_t oblock, bool free_space)
{
    if (p->ops->admit_write)
        return p->ops->admit_write(p->state, oblock, free_space);
    return policy_admit(p, oblock, free_space);
}

bool policy_stream_hot(struct policy *p, uint64_t oblock)
{
    return p->ops->stream_hot ? p->ops->stream_hot(p->state, oblock) : false;
}

void policy_prefetch(struct policy *p, uint64_t oblock)
{
    if (p->ops->prefetch)
        p->ops->prefetch(p->state, oblock);
}

void policy_hit(struct policy *p, uint64_t oblock, uint8_t *hint)
{
    if (p->ops->hit)
        p->ops->hit(p->state, oblock, hint);
}

void policy_inserted(struct policy *p, uint64_t oblock, uint8_t *hint, bool from_miss)
{
    if (p->ops->inserted)
        p->ops->inserted(p->state, oblock, hint, from_miss);
}

bool policy_keep(struct policy *p, uint64_t oblock, uint8_t *hint)
{
    return p->ops->keep ? p->ops->keep(p->state, oblock, hint) : false;
}

void policy_evicted(struct policy *p, uint64_t oblock)
{
    if (p->ops->evicted)
        p->ops->evicted(p->state, oblock);
}

uint64_t policy_memory(const struct policy *p)
{
    return p->ops->memory ? p->ops->memory(p->state) : 0;
}

void policy_status(const struct policy *p, struct tc_json *j)
{
    if (p->ops->status == NULL)
        return;
    json_begin_object(j, "policy_figures");
    p->ops->status(p->state, j);
    json_end_object(j);
}
