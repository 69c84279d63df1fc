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
uint64_t bufpool_in_use(void);              /* bytes handed out now */
uint64_t bufpool_cached(void);              /* bytes idle on free lists */
void bufpool_trim(void);                    /* free all idle buffers */

#endif
