/*
 * Aligned data buffers, recycled by size class.
 *
 * Requests need 4096-aligned buffers (O_DIRECT) from 4 KiB to 32 MiB.
 * Allocating and freeing those for every request is costly (large ones are
 * mmap()ed), so freed buffers are kept on a free list per power-of-two
 * class, up to a total that bounds the memory kept idle.
 *
 * The pool also counts the bytes handed out, so that front ends can stop
 * taking new requests when too much memory is in use (back-pressure).
 */
#ifndef TC_IO_BUFPOOL_H
#define TC_IO_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

void *bufpool_get(size_t size);             /* never NULL; 4096-aligned */
void bufpool_put(void *buf, size_t size);   /* size as passed to get */
uint64_t bufpool_in_use(void);              /* bytes handed out now (any thread) */
/* The pool is one thread's (the reactor's): get, put, trim and the
 * registrations below are called from that thread only.  Other threads
 * (the NBD front ends, serve --nbd-threads) allocate their buffers
 * themselves and count them here, so that bufpool_in_use() covers all
 * request buffers; delta may be negative.  Safe from any thread. */
void bufpool_charge(int64_t delta);
uint64_t bufpool_cached(void);              /* bytes idle on free lists */
void bufpool_trim(void);                    /* free all idle buffers */

/*
 * Registered buffers.  Once a ring is given, the pool's buffers are
 * registered with it (io_uring_register_buffers) as they are made, up to
 * BUFPOOL_REG_SLOTS of them and BUFPOOL_REG_BYTES in all, and unregistered
 * before they are freed; the pool keeps its buffers, so the registration
 * is made once per buffer, not per request.  A read into registered memory
 * (IORING_OP_READ_FIXED) skips the kernel's pinning of the user pages, a
 * tenth of the daemon's CPU on cached 1 MiB reads.
 *
 * Invariant: a registration covers exactly one live pool buffer, the pages
 * it was made with; the pool frees a buffer only after dropping its
 * registration.  Pool buffers are returned with bufpool_put() only.
 * Registration failing (an old kernel, RLIMIT_MEMLOCK) only means plain
 * reads.
 */
struct io_uring;
#define BUFPOOL_REG_SLOTS 1024u
#define BUFPOOL_REG_BYTES (128ull << 20)
/* Register pool buffers with ring from now on (NULL: drop every
 * registration, before the ring is torn down). */
void bufpool_use_ring(struct io_uring *ring);
/* bufpool_use_ring(NULL) if ring is the one in use (reactor_fini). */
void bufpool_release_ring(const struct io_uring *ring);
/* The registered buffer index holding [p, p + len) in ring, or -1. */
int bufpool_fixed(const struct io_uring *ring, const void *p, size_t len);
uint64_t bufpool_registered_bytes(void);

#endif
