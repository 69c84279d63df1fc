/*
 * What every unit test program shares: CHECK(cond) reports a failed
 * condition with its line and counts it, without stopping, so that one run
 * shows every failure; check_exit() ends main() with the verdict.
 */
#ifndef TC_TESTS_UNIT_CHECK_H
#define TC_TESTS_UNIT_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                       \
        }                                                                           \
    } while (0)

/* main()'s exit status: 1 when a check failed, else 0 and a line saying
 * program passed. */
static inline int check_exit(const char *program)
{
    if (check_failures) {
        fprintf(stderr, "%d checks failed\n", check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", program);
    return 0;
}

#endif
