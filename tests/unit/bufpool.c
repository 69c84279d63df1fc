/*
 * Registered pool buffers (io/bufpool.c): bufpool_fixed() finds the
 * registered buffer holding a range and nothing else; a READ_FIXED through
 * the index it gives lands in the buffer the caller holds, also after
 * buffers were freed and others made, likely at the same addresses (a
 * registration left behind by a freed buffer would send the data to the
 * old pages); releasing the ring drops every registration.
 */
#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/bufpool.h"

#include "check.h"

#define FILE_SIZE (1u << 20)

/* READ_FIXED of len bytes at off into buf; the bytes read, or -errno. */
static int read_fixed(struct io_uring *ring, int fd, void *buf, unsigned len, unsigned off)
{
    int idx = bufpool_fixed(ring, buf, len);
    if (idx < 0)
        return -ENOENT;
    memset(buf, 0, len);
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    io_uring_prep_read_fixed(sqe, fd, buf, len, off, idx);
    io_uring_submit(ring);
    struct io_uring_cqe *cqe;
    if (io_uring_wait_cqe(ring, &cqe) < 0)
        return -EIO;
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return res;
}

int main(void)
{
    struct io_uring ring, other;
    if (io_uring_queue_init(8, &ring, 0) < 0 || io_uring_queue_init(8, &other, 0) < 0) {
        printf("bufpool: no io_uring here, skipped\n");
        return 0;
    }
    bufpool_use_ring(&ring);
    uint8_t *a = bufpool_get(64 << 10);
    if (bufpool_registered_bytes() == 0) {
        printf("bufpool: buffers cannot be registered here (kernel or RLIMIT_MEMLOCK), skipped\n");
        return 0;
    }
    CHECK(bufpool_registered_bytes() == 64 << 10);
    int ia = bufpool_fixed(&ring, a, 64 << 10);
    CHECK(ia >= 0);
    CHECK(bufpool_fixed(&ring, a + 4096, 4096) == ia);
    CHECK(bufpool_fixed(&ring, a + (60 << 10), 8 << 10) == -1);     /* past its end */
    CHECK(bufpool_fixed(&other, a, 4096) == -1);                   /* another ring */
    uint8_t *b = bufpool_get(4096);
    int ib = bufpool_fixed(&ring, b, 4096);
    CHECK(ib >= 0 && ib != ia);
    void *m = malloc(8192);
    CHECK(bufpool_fixed(&ring, m, 4096) == -1);                    /* not the pool's */
    free(m);

    int fd = memfd_create("tc-bufpool", 0);
    CHECK(fd >= 0);
    static uint8_t want[FILE_SIZE];
    for (size_t i = 0; i < sizeof want; i++)
        want[i] = (uint8_t)(i * 31 + i / 4096);
    CHECK(pwrite(fd, want, sizeof want, 0) == (ssize_t)sizeof want);

    CHECK(read_fixed(&ring, fd, a + 4096, 8192, 12288) == 8192);
    CHECK(memcmp(a + 4096, want + 12288, 8192) == 0);

    /* Buffers freed (trim) and made again, of the same size and of others:
     * every read lands in the buffer held now. */
    unsigned bad = 0;
    for (unsigned round = 0; round < 64; round++) {
        size_t size = (size_t)4096 << (round % 9);          /* 4 KiB .. 1 MiB */
        uint8_t *x = bufpool_get(size);
        unsigned off = (round * 4096u) % (FILE_SIZE - (unsigned)size + 1) / 4096 * 4096;
        if (read_fixed(&ring, fd, x, (unsigned)size, off) != (int)size ||
            memcmp(x, want + off, size) != 0)
            bad++;
        bufpool_put(x, size);
        if (round % 2)
            bufpool_trim();
    }
    CHECK(bad == 0);

    bufpool_put(a, 64 << 10);
    bufpool_put(b, 4096);
    bufpool_trim();
    CHECK(bufpool_registered_bytes() == 0);
    uint8_t *c = bufpool_get(4096);
    CHECK(bufpool_fixed(&ring, c, 4096) >= 0);
    bufpool_release_ring(&other);                   /* not the ring in use */
    CHECK(bufpool_fixed(&ring, c, 4096) >= 0);
    bufpool_release_ring(&ring);
    CHECK(bufpool_registered_bytes() == 0);
    CHECK(bufpool_fixed(&ring, c, 4096) == -1);
    bufpool_put(c, 4096);
    bufpool_trim();
    close(fd);
    io_uring_queue_exit(&ring);
    io_uring_queue_exit(&other);
    return check_exit("bufpool");
}
