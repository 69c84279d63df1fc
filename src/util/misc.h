/* Small helpers shared by every part: time, alignment, UUIDs. */
#ifndef TC_UTIL_MISC_H
#define TC_UTIL_MISC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define TC_SECTOR 4096u          /* the unit of valid and dirty bits */
#define TC_SECTOR_SHIFT 12

#define TC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* A virtual clock: while non-zero, tc_now_ns() returns it on this thread
 * instead of reading CLOCK_MONOTONIC.  Replay (src/replay/engine.c) sets
 * it to the trace's time so the engine's timers and idle rules follow the
 * trace, not the speed of the replay. */
extern _Thread_local uint64_t tc_virtual_now_ns;

/* A 64-bit mixer (the finalizer of MurmurHash3): every input bit moves
 * every output bit.  For hash tables and filters of block numbers. */
static inline uint64_t tc_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* x % d without a division, for a divisor used many times (a filter's
 * size): recip = tc_mod_recip(d), made once.  Exact for every x and
 * d >= 1: recip = floor((2^64 - 1) / d) >= 2^64 / d - 1, so the quotient
 * estimate floor(x * recip / 2^64) lies in (x/d - 1, x/d], at most one
 * below floor(x / d), and one subtraction corrects the remainder. */
static inline uint64_t tc_mod_recip(uint64_t d)
{
    return UINT64_MAX / d;
}

static inline uint64_t tc_mod_fast(uint64_t x, uint64_t d, uint64_t recip)
{
    uint64_t q = (uint64_t)(((unsigned __int128)x * recip) >> 64);
    uint64_t r = x - q * d;
    return r >= d ? r - d : r;
}

static inline uint64_t tc_now_ns(void)
{
    if (tc_virtual_now_ns)
        return tc_virtual_now_ns;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tc_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tc_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
static inline uint64_t tc_round_down(uint64_t x, uint64_t a) { return x / a * a; }

/* 16 random bytes from getrandom(); aborts if the kernel cannot give them. */
void tc_uuid_generate(uint8_t uuid[16]);
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into out[37]. */
void tc_uuid_format(const uint8_t uuid[16], char out[37]);

/* Aligned allocation for O_DIRECT buffers; aborts on out of memory. */
void *tc_alloc_aligned(size_t size);
void *tc_xmalloc(size_t size);
void *tc_xcalloc(size_t n, size_t size);
char *tc_xstrdup(const char *s);

/* fsync() the directory holding path, so that a file just created or
 * renamed there is durable under its name: 0 or -errno. */
int tc_fsync_parent_dir(const char *path);

/* The first line of a small file (a /proc or /sys entry), without its
 * newline, into out; false if the file cannot be opened or is empty. */
bool tc_read_first_line(const char *path, char *out, size_t len);

/* pwrite() all of buf at off, across short writes and EINTR: 0 or -errno
 * (-EIO for a write that wrote nothing).  For small blocking writes of
 * metadata files, never the data path. */
int tc_pwrite_all(int fd, const void *buf, size_t len, off_t off);
/* Small objects made and dropped for every request (up to 16 KiB): zeroed
 * like tc_xcalloc(1, size), and kept per size (64-byte classes up to
 * 4 KiB, then 8 and 16 KiB) for reuse when put back, with the size they
 * were got with.  glibc serves chunks
 * above 1 KiB from its bins, which costs more than the rest of a cached
 * read's bookkeeping.  Sanitizer builds use calloc()/free() (so a use
 * after put is still caught). */
void *tc_obj_get(size_t size);
void tc_obj_put(void *p, size_t size);

#endif
