/*
 * Data the kernel writes through io_uring (a read, a recv) reaches our
 * buffers without a system call that valgrind's memcheck can see, so it
 * would take every byte read for uninitialised and report each use of it.
 * tc_kernel_filled() tells memcheck what a completed read filled.  Outside
 * valgrind it costs a few instructions; built without valgrind's headers
 * it is nothing.
 */
#ifndef TC_UTIL_MEMCHECK_H
#define TC_UTIL_MEMCHECK_H

#include <stddef.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define TC_HAVE_MEMCHECK 1
#endif
#endif

static inline void tc_kernel_filled(const void *buf, long n)
{
#ifdef TC_HAVE_MEMCHECK
    if (n > 0)
        (void)VALGRIND_MAKE_MEM_DEFINED(buf, (size_t)n);
#else
    (void)buf;
    (void)n;
#endif
}

#endif
