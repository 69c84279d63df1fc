#include "util/misc.h"

#include "util/assert.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

_Thread_local uint64_t tc_virtual_now_ns;

void tc_assert_fail(const char *file, int line, const char *cond)
{
    tc_error("%s:%d: assertion failed: %s", file, line, cond);
    if (tc_log_path() != NULL)
        fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, cond);
    abort();
}

void tc_uuid_generate(uint8_t uuid[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(uuid + got, 16 - got, 0);
        if (n < 0)
            abort();
        got += (size_t)n;
    }
    uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40); /* version 4 */
    uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80); /* RFC 4122 variant */
}

void tc_uuid_format(const uint8_t u[16], char out[37])
{
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
             u[13], u[14], u[15]);
}

void *tc_alloc_aligned(size_t size)
{
    void *p;
    if (size == 0)
        size = 4096;
    if (posix_memalign(&p, 4096, tc_round_up(size, 4096)) != 0) {
        fprintf(stderr, "tiercache: out of memory allocating %zu bytes\n", size);
        abort();
    }
    return p;
}

void *tc_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "tiercache: out of memory allocating %zu bytes\n", size);
        abort();
    }
    return p;
}

void *tc_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "tiercache: out of memory allocating %zu x %zu bytes\n", n, size);
        abort();
    }
    return p;
}

#define OBJ_CLASS 64
#define OBJ_MAX 4096
#define OBJ_KEEP 256                /* per class */
/* Above OBJ_MAX: classes of 8 and 16 KiB (a write request of a few
 * blocks with its pieces), fewer kept: at most 768 KiB idle in them. */
#define OBJ_BIG_MAX 16384
#define OBJ_BIG_KEEP 32
#define OBJ_NCLASS (OBJ_MAX / OBJ_CLASS + 2)

#if defined(__SANITIZE_ADDRESS__)
#define OBJ_RECYCLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OBJ_RECYCLE 0
#endif
#endif
#ifndef OBJ_RECYCLE
#define OBJ_RECYCLE 1
#endif

struct obj_free {
    struct obj_free *next;
};

static _Thread_local struct obj_free *obj_list[OBJ_NCLASS];
static _Thread_local unsigned obj_count[OBJ_NCLASS];

/* The class of size (1..OBJ_BIG_MAX), and the bytes a chunk of it has. */
static size_t obj_class(size_t size, size_t *bytes)
{
    if (size <= OBJ_MAX) {
        size_t k = (size - 1) / OBJ_CLASS;
        *bytes = (k + 1) * OBJ_CLASS;
        return k;
    }
    if (size <= 2 * OBJ_MAX) {
        *bytes = 2 * OBJ_MAX;
        return OBJ_MAX / OBJ_CLASS;
    }
    *bytes = OBJ_BIG_MAX;
    return OBJ_MAX / OBJ_CLASS + 1;
}

void *tc_obj_get(size_t size)
{
    if (OBJ_RECYCLE && size > 0 && size <= OBJ_BIG_MAX) {
        size_t bytes, k = obj_class(size, &bytes);
        struct obj_free *o = obj_list[k];
        if (o) {
            obj_list[k] = o->next;
            obj_count[k]--;
            return memset(o, 0, size);
        }
        return tc_xcalloc(1, bytes);
    }
    return tc_xcalloc(1, size);
}

void tc_obj_put(void *p, size_t size)
{
    if (p == NULL)
        return;
    if (OBJ_RECYCLE && size > 0 && size <= OBJ_BIG_MAX) {
        size_t bytes, k = obj_class(size, &bytes);
        if (obj_count[k] < (size <= OBJ_MAX ? OBJ_KEEP : OBJ_BIG_KEEP)) {
            struct obj_free *o = p;
            o->next = obj_list[k];
            obj_list[k] = o;
            obj_count[k]++;
            return;
        }
    }
    free(p);
}

char *tc_xstrdup(const char *s)
{
    char *p = strdup(s);
    if (p == NULL)
        abort();
    return p;
}

bool tc_read_first_line(const char *path, char *out, size_t len)
{
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return false;
    bool ok = fgets(out, (int)len, fp) != NULL;
    fclose(fp);
    if (ok)
        out[strcspn(out, "\n")] = '\0';
    return ok;
}

int tc_fsync_parent_dir(const char *path)
{
    char *copy = tc_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int tc_pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
    const char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(fd, p + done, len - done, off + (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}
