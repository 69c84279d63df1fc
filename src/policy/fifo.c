/* fifo: admit every miss; evict in the order written (no reinsertion).
 * Every operation is the default (policy.h). */
#include "policy/policy.h"

const struct policy_ops policy_fifo = {
    .name = "fifo",
    .summary = "admit all; evict in write order",
};
