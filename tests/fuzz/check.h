/* The fuzz harnesses' invariant check: a failed one names itself and
 * aborts, which libFuzzer reports as a crash with the input saved. */
#ifndef TC_FUZZ_CHECK_H
#define TC_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

#endif
