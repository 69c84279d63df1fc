#include "swap/pagemap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int sp_pagemap_open(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/pagemap", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int sp_pagemap_read(int fd, uint64_t addr, size_t npages, uint64_t *out)
{
    size_t want = npages * sizeof *out, got = 0;
    off_t off = (off_t)((addr >> SP_PAGE_SHIFT) * sizeof *out);
    while (got < want) {
        ssize_t n = pread(fd, (char *)out + got, want - got, off + (off_t)got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    memset((char *)out + got, 0, want - got);
    return 0;
}
