/* The table of policies, found by name for --policy. */
#include <string.h>

#include "policy/policy.h"

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
