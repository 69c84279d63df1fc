/*
 * Assertions of the invariants the headers number ("Invariant 3: ...").
 *
 *   TC_ASSERT(cond)         checked in the sanitizer build (make SANITIZE=1
 *                           defines TC_DEBUG_ASSERTS), where every test runs
 *                           a second time; in the normal build cond is not
 *                           evaluated (it must have no side effects) but
 *                           still compiled, so it cannot rot.
 *   TC_ASSERT_ALWAYS(cond)  checked in every build: for cheap checks at a
 *                           boundary (a few integer comparisons), where
 *                           going on would corrupt memory or data.
 *
 * A failed assertion logs "file:line: assertion failed: cond" (to stderr,
 * and to the log file when there is one) and calls abort(): an engine whose
 * own rules no longer hold must not go on serving, and the core dump shows
 * how it got there.  They check the engine's own state, never input: what
 * clients, devices or the log on disk may get wrong is handled as an error.
 */
#ifndef TC_UTIL_ASSERT_H
#define TC_UTIL_ASSERT_H

void tc_assert_fail(const char *file, int line, const char *cond)
    __attribute__((noreturn, cold));

#define TC_ASSERT_ALWAYS(cond) \
    (__builtin_expect(!!(cond), 1) ? (void)0 : tc_assert_fail(__FILE__, __LINE__, #cond))

#ifdef TC_DEBUG_ASSERTS
#define TC_ASSERT(cond) TC_ASSERT_ALWAYS(cond)
#define TC_DEBUG_ASSERTS_ON 1
#else
#define TC_ASSERT(cond) ((void)sizeof(!(cond)))
#define TC_DEBUG_ASSERTS_ON 0
#endif

#endif
