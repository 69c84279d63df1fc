#include "io/bufpool.h"

#include <liburing.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

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
/* in_use is written by the owning thread only, and read from any (the NBD
 * front-end threads' admission): relaxed atomics.  charged counts buffers
 * front-end threads allocate outside the pool (bufpool_charge()). */
static uint64_t in_use, idle;
static int64_t charged;

static void in_use_add(int64_t d)
{
    __atomic_store_n(&in_use, __atomic_load_n(&in_use, __ATOMIC_RELAXED) + (uint64_t)d,
                     __ATOMIC_RELAXED);
}

/* Registered buffers (bufpool.h), sorted by address for bufpool_fixed();
 * slot is the buffer's index in the ring's table. */
struct reg {
    uintptr_t base;
    size_t size;
    unsigned slot;
};
static struct io_uring *reg_ring;
static bool reg_off;                /* registration failed: stop trying */
static struct reg regs[BUFPOOL_REG_SLOTS];
static unsigned nregs;
static unsigned free_slots[BUFPOOL_REG_SLOTS], nfree_slots;
static uint64_t reg_bytes;

/* The first registration whose base is above p. */
static unsigned reg_after(uintptr_t p)
{
    unsigned lo = 0, hi = nregs;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (regs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void reg_add(void *buf, size_t size)
{
    if (reg_ring == NULL || reg_off || nfree_slots == 0 || reg_bytes + size > BUFPOOL_REG_BYTES)
        return;
    unsigned slot = free_slots[nfree_slots - 1];
    struct iovec iov = { .iov_base = buf, .iov_len = size };
    __u64 tag = 0;
    if (io_uring_register_buffers_update_tag(reg_ring, slot, &iov, &tag, 1) != 1) {
        reg_off = true;     /* RLIMIT_MEMLOCK or an old kernel: plain reads */
        return;
    }
    nfree_slots--;
    unsigned at = reg_after((uintptr_t)buf);
    memmove(&regs[at + 1], &regs[at], (nregs - at) * sizeof regs[0]);
    regs[at] = (struct reg){ .base = (uintptr_t)buf, .size = size, .slot = slot };
    nregs++;
    reg_bytes += size;
}

/* Before buf is freed: its pages must not stay in the ring's table, where
 * a later buffer at the same address would find them.  False if they
 * could not be dropped: buf must then stay allocated (and registered). */
static bool reg_drop(void *buf)
{
    unsigned at = reg_after((uintptr_t)buf);
    if (at == 0 || regs[at - 1].base != (uintptr_t)buf)
        return true;
    at--;
    struct iovec iov = { .iov_base = NULL, .iov_len = 0 };
    __u64 tag = 0;
    if (io_uring_register_buffers_update_tag(reg_ring, regs[at].slot, &iov, &tag, 1) != 1)
        return false;
    free_slots[nfree_slots++] = regs[at].slot;
    reg_bytes -= regs[at].size;
    memmove(&regs[at], &regs[at + 1], (nregs - at - 1) * sizeof regs[0]);
    nregs--;
    return true;
}

static void pool_free(void *buf)
{
    if (nregs == 0 || reg_drop(buf))
        free(buf);
}

void bufpool_release_ring(const struct io_uring *ring)
{
    if (reg_ring == ring)
        bufpool_use_ring(NULL);
}

void bufpool_use_ring(struct io_uring *ring)
{
    if (reg_ring) {
        io_uring_unregister_buffers(reg_ring);
        nregs = 0;
        reg_bytes = 0;
        reg_ring = NULL;
    }
    reg_off = false;
    if (ring == NULL)
        return;
    if (io_uring_register_buffers_sparse(ring, BUFPOOL_REG_SLOTS) < 0)
        return;
    reg_ring = ring;
    nfree_slots = 0;
    for (unsigned i = BUFPOOL_REG_SLOTS; i-- > 0;)
        free_slots[nfree_slots++] = i;
    /* Buffers made before the ring was given and kept idle: registered
     * now, like those made from now on. */
    for (int c = 0; c < NCLASS; c++)
        for (struct free_buf *b = free_list[c]; b; b = b->next)
            reg_add(b, (size_t)1 << (MIN_SHIFT + c));
}

int bufpool_fixed(const struct io_uring *ring, const void *p, size_t len)
{
    if (ring != reg_ring || nregs == 0)
        return -1;
    uintptr_t a = (uintptr_t)p;
    unsigned at = reg_after(a);
    if (at == 0)
        return -1;
    const struct reg *r = &regs[at - 1];
    if (a + len > r->base + r->size)
        return -1;
    return (int)r->slot;
}

uint64_t bufpool_registered_bytes(void) { return reg_bytes; }

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
        in_use_add((int64_t)size);
        return tc_alloc_aligned(size);
    }
    int c = class_of(size);
    size_t csize = (size_t)1 << (MIN_SHIFT + c);
    in_use_add((int64_t)csize);
    if (free_list[c]) {
        struct free_buf *b = free_list[c];
        UNPOISON(b + 1, csize - sizeof *b);
        free_list[c] = b->next;
        idle -= csize;
        return b;
    }
    void *buf = tc_alloc_aligned(csize);
    reg_add(buf, csize);
    return buf;
}

void bufpool_put(void *buf, size_t size)
{
    if (buf == NULL)
        return;
    if (size > ((size_t)1 << MAX_SHIFT)) {
        in_use_add(-(int64_t)size);
        free(buf);
        return;
    }
    int c = class_of(size);
    size_t csize = (size_t)1 << (MIN_SHIFT + c);
    in_use_add(-(int64_t)csize);
    if (idle + csize > MAX_IDLE) {
        pool_free(buf);
        return;
    }
    struct free_buf *b = buf;
    b->next = free_list[c];
    free_list[c] = b;
    idle += csize;
    POISON(b + 1, csize - sizeof *b);
}

uint64_t bufpool_in_use(void)
{
    int64_t c = __atomic_load_n(&charged, __ATOMIC_RELAXED);
    uint64_t u = __atomic_load_n(&in_use, __ATOMIC_RELAXED);
    return c > 0 ? u + (uint64_t)c : u;
}

void bufpool_charge(int64_t delta) { __atomic_fetch_add(&charged, delta, __ATOMIC_RELAXED); }
uint64_t bufpool_cached(void) { return idle; }

void bufpool_trim(void)
{
    for (int c = 0; c < NCLASS; c++) {
        while (free_list[c]) {
            struct free_buf *b = free_list[c];
            UNPOISON(b + 1, ((size_t)1 << (MIN_SHIFT + c)) - sizeof *b);
            free_list[c] = b->next;
            pool_free(b);
        }
    }
    idle = 0;
}
