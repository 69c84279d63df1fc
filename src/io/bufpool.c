#include "io/bufpool.h"

#include <stdlib.h>

#include "util/misc.h"

/* Sanitizer builds poison the buffers on the free lists, so that a buffer
 * used after it was put back (a reply still sent from it, a late device
 * completion, a buffer handed over twice) is reported where it happens
 * instead of silently reading or corrupting the buffer's next user.  All
 * but the list link at its start: LeakSanitizer does not look for
 * pointers in poisoned memory, and would report the rest of a list as
 * leaked. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ASAN 1
#endif
#endif
#ifdef POOL_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define MIN_SHIFT 12                /* 4 KiB */
#define MAX_SHIFT 25                /* 32 MiB */
#define NCLASS (MAX_SHIFT - MIN_SHIFT + 1)
#define MAX_IDLE (256ull << 20)     /* idle bytes kept for reuse */

struct free_buf {
    struct free_buf *next;
};

static struct free_buf *free_list[NCLASS];
static uint64_t in_use, idle;

static int class_of(size_t size)
{
    int c = 0;
    while (((size_t)1 << (MIN_SHIFT + c)) < size)
        c++;
    return c;
}

void *bufpool_get(size_t size)
{
    if (size > ((size_t)1 << MAX_SHIFT)) {
        in_use += size;
        return tc_alloc_aligned(size);
    }
    int c = class_of(size);
    size_t csize = (size_t)1 << (MIN_SHIFT + c);
    in_use += csize;
    if (free_list[c]) {
        struct free_buf *b = free_list[c];
        UNPOISON(b + 1, csize - sizeof *b);
        free_list[c] = b->next;
        idle -= csize;
        return b;
    }
    return tc_alloc_aligned(csize);
}

void bufpool_put(void *buf, size_t size)
{
    if (buf == NULL)
        return;
    if (size > ((size_t)1 << MAX_SHIFT)) {
        in_use -= size;
        free(buf);
        return;
    }
    int c = class_of(size);
    size_t csize = (size_t)1 << (MIN_SHIFT + c);
    in_use -= csize;
    if (idle + csize > MAX_IDLE) {
        free(buf);
        return;
    }
    struct free_buf *b = buf;
    b->next = free_list[c];
    free_list[c] = b;
    idle += csize;
    POISON(b + 1, csize - sizeof *b);
}

uint64_t bufpool_in_use(void) { return in_use; }
uint64_t bufpool_cached(void) { return idle; }

void bufpool_trim(void)
{
    for (int c = 0; c < NCLASS; c++) {
        while (free_list[c]) {
            struct free_buf *b = free_list[c];
            UNPOISON(b + 1, ((size_t)1 << (MIN_SHIFT + c)) - sizeof *b);
            free_list[c] = b->next;
            free(b);
        }
    }
    idle = 0;
}
