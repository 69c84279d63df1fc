/*
 * Memory devices: "mem:NAME", a device that lives in the process.
 *
 * Replay (src/replay/engine.c) runs the real engine over a trace with no
 * device I/O: its origin and cache devices are memory devices.  They must
 * cost little in time and in memory whatever their size, so a device
 * stores only the 4 KiB pages written with something other than zeroes,
 * in a hash table by page number; a page written with zeroes is dropped,
 * and a page never written (or dropped) reads as zeroes.  What the engine
 * writes for itself (superblocks, the shutdown snapshot; chunk headers
 * too, but a data-free engine keeps those in RAM) is kept and reads back
 * exactly: every checksum the engine verifies still matches.
 *
 * Data cost nothing either.  Replay's engine looks at none
 * (tc_volume_config.data_free): it marks the data part of each cache read
 * and write (TC_DEV_PAYLOAD, from payload_off on), which a memory device
 * leaves out -- a read does not fill it, a write stores it as zeroes, as
 * a write of zeroes would -- and replay's origin is dataless (all of every
 * read and write is payload).  The device then holds what it would hold
 * had the data been zeroes, copied.
 *
 * A device is created by name with a size (dev_mem_create()), then opened
 * and closed as often as needed (format, then the volume); its contents
 * live until dev_mem_destroy() and the last close.  Requests complete
 * without a system call: the work is done at submission and the
 * completion is reported from the reactor's deferred tasks (dev.c), never
 * inside dev_submit().  Flush, trim and write-zeroes are supported (trim
 * and write-zeroes drop the pages); block status is not offered.
 *
 * The registry of names is shared by the threads of a process (a lock);
 * one device is used by one reactor at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dev.h"
#include "util/misc.h"

#define PAGE 4096u
#define EMPTY UINT64_MAX
/* Pages dropped and stored again and again (chunk headers over a
 * segment's old data) are kept for reuse rather than freed. */
#define SPARE_PAGES 256u

/*
 * One memory device's contents: an open-addressing hash table (linear
 * probing, deletion by backward shift, no tombstones) from page number to
 * a 4 KiB page, holding only pages that are not all zero.  A slot keeps
 * how much of its page comes before the page's trailing zeroes, and only
 * that much is copied in and out: a chunk header fills a few hundred
 * bytes of its sector.  A bitmap of the pages held answers most look-ups
 * (pages never written, or written with zeroes) without the table.
 */
struct mem_slot {
    uint64_t key;               /* page number, EMPTY for a free slot */
    uint32_t used;              /* bytes of the page before its trailing zeroes */
    uint8_t *page;
};

struct mem_store {
    char *name;
    uint64_t size;
    struct mem_slot *slots;
    size_t cap;                 /* a power of two */
    size_t count;
    uint64_t *held;             /* a bit per page: in the table */
    uint8_t *spare[SPARE_PAGES];    /* dropped pages, for the next stored ones */
    unsigned nspare;
    unsigned opens;
    bool dataless;              /* every read and write is payload */
    bool destroyed;             /* freed at its last close */
    struct mem_store *next;     /* the registry */
};

struct dev_mem {
    struct tc_dev dev;
    struct mem_store *st;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_store *registry;

bool dev_is_mem(const char *path)
{
    return strncmp(path, "mem:", 4) == 0;
}

/* ---- the page table ---- */

static size_t slot_of(const struct mem_store *s, uint64_t page)
{
    uint64_t h = page * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (s->cap - 1);
}

static size_t find(const struct mem_store *s, uint64_t page)
{
    size_t i = slot_of(s, page);
    while (s->slots[i].key != EMPTY && s->slots[i].key != page)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static void table_alloc(struct mem_store *s, size_t cap)
{
    s->cap = cap;
    s->slots = tc_xcalloc(cap, sizeof *s->slots);
    for (size_t i = 0; i < cap; i++)
        s->slots[i].key = EMPTY;
}

static void grow(struct mem_store *s)
{
    struct mem_slot *slots = s->slots;
    size_t cap = s->cap;
    table_alloc(s, cap * 2);
    for (size_t i = 0; i < cap; i++)
        if (slots[i].key != EMPTY)
            s->slots[find(s, slots[i].key)] = slots[i];
    free(slots);
}

static bool held(const struct mem_store *s, uint64_t page)
{
    return (s->held[page / 64] >> (page % 64)) & 1;
}

static void drop(struct mem_store *s, uint64_t page)
{
    if (!held(s, page))
        return;
    size_t i = find(s, page);
    s->held[page / 64] &= ~(1ull << (page % 64));
    if (s->nspare < SPARE_PAGES)
        s->spare[s->nspare++] = s->slots[i].page;
    else
        free(s->slots[i].page);
    s->count--;
    /* Backward shift: move later entries of the cluster into the hole
     * unless their home slot lies cyclically in (hole, entry]. */
    size_t hole = i;
    for (size_t j = (i + 1) & (s->cap - 1); s->slots[j].key != EMPTY;
         j = (j + 1) & (s->cap - 1)) {
        size_t home = slot_of(s, s->slots[j].key);
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays)
            continue;
        s->slots[hole] = s->slots[j];
        hole = j;
    }
    s->slots[hole] = (struct mem_slot){ .key = EMPTY };
}

/* The bytes of a page before its trailing zeroes, in 64-byte lines. */
static uint32_t used_bytes(const uint8_t *p)
{
    const uint64_t *w = (const uint64_t *)p;
    for (unsigned i = PAGE / 8; i > 0; i -= 8)
        if ((w[i - 1] | w[i - 2] | w[i - 3] | w[i - 4] | w[i - 5] | w[i - 6] | w[i - 7] |
             w[i - 8]) != 0)
            return i * 8;
    return 0;
}

static void store_page(struct mem_store *s, uint64_t page, const uint8_t *src)
{
    uint32_t used = used_bytes(src);
    if (used == 0) {
        drop(s, page);
        return;
    }
    size_t i = find(s, page);
    if (s->slots[i].key == EMPTY) {
        if (2 * (s->count + 1) > s->cap) {
            grow(s);
            i = find(s, page);
        }
        s->slots[i].key = page;
        s->held[page / 64] |= 1ull << (page % 64);
        s->slots[i].page = s->nspare ? s->spare[--s->nspare] : tc_xmalloc(PAGE);
        s->count++;
    }
    memcpy(s->slots[i].page, src, used);
    s->slots[i].used = used;
}

static void load_page(const struct mem_store *s, uint64_t page, uint8_t *dst)
{
    if (held(s, page)) {
        const struct mem_slot *sl = &s->slots[find(s, page)];
        uint32_t used = sl->used;
        memcpy(dst, sl->page, used);
        memset(dst + used, 0, PAGE - used);
        return;
    }
    memset(dst, 0, PAGE);
}

static void store_free(struct mem_store *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slots[i].page);
    for (unsigned i = 0; i < s->nspare; i++)
        free(s->spare[i]);
    free(s->held);
    free(s->slots);
    free(s->name);
    free(s);
}

/* ---- the registry ---- */

static struct mem_store *lookup(const char *name)
{
    for (struct mem_store *s = registry; s; s = s->next)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

int dev_mem_create(const char *name, uint64_t size, bool dataless, char *err, size_t errlen)
{
    if (size == 0 || size % PAGE) {
        snprintf(err, errlen, "memory device mem:%s: size %llu is not a positive multiple of "
                 "4096", name, (unsigned long long)size);
        return -1;
    }
    pthread_mutex_lock(&registry_lock);
    if (lookup(name)) {
        pthread_mutex_unlock(&registry_lock);
        snprintf(err, errlen, "memory device mem:%s exists already", name);
        return -1;
    }
    struct mem_store *s = tc_xcalloc(1, sizeof *s);
    s->name = tc_xstrdup(name);
    s->size = size;
    s->dataless = dataless;
    s->held = tc_xcalloc((size / PAGE + 63) / 64, sizeof *s->held);
    table_alloc(s, 64);
    s->next = registry;
    registry = s;
    pthread_mutex_unlock(&registry_lock);
    return 0;
}

void dev_mem_destroy(const char *name)
{
    pthread_mutex_lock(&registry_lock);
    struct mem_store **pp = &registry;
    while (*pp && strcmp((*pp)->name, name) != 0)
        pp = &(*pp)->next;
    struct mem_store *s = *pp;
    if (s) {
        *pp = s->next;
        s->destroyed = true;
        if (s->opens == 0)
            store_free(s);
    }
    pthread_mutex_unlock(&registry_lock);
}

uint64_t dev_mem_stored_bytes(const struct tc_dev *dev)
{
    const struct dev_mem *m = container_of(dev, const struct dev_mem, dev);
    return (uint64_t)m->st->count * PAGE;
}

/* ---- the device ---- */

static void mem_submit(struct tc_dev *dev, struct tc_dev_io *dio)
{
    struct dev_mem *m = container_of(dev, struct dev_mem, dev);
    struct mem_store *s = m->st;
    if (dio->op == TC_DEV_FLUSH) {
        dev_complete(dio, 0);
        return;
    }
    if (dio->op == TC_DEV_BLOCK_STATUS) {
        dev_complete(dio, -EOPNOTSUPP);
        return;
    }
    if (dio->off > s->size || dio->len > s->size - dio->off) {
        dev_complete(dio, -EIO);
        return;
    }
    if (dio->op != TC_DEV_READ && dev->read_only) {
        dev_complete(dio, -EROFS);
        return;
    }
    if ((dio->op == TC_DEV_READ || dio->op == TC_DEV_WRITE) &&
        ((dio->off | dio->len) % PAGE || (uintptr_t)dio->buf % PAGE)) {
        dev_complete(dio, -EINVAL);
        return;
    }
    uint64_t first = dio->off / PAGE, n = dio->len / PAGE;
    uint8_t *buf = dio->buf;
    if ((dio->op == TC_DEV_READ || dio->op == TC_DEV_WRITE) &&
        (s->dataless || (dio->flags & TC_DEV_PAYLOAD))) {
        /* Only what comes before the payload is carried. */
        uint64_t keep = s->dataless ? 0 : TC_MIN(dio->payload_off, dio->len) / PAGE;
        if (dio->op == TC_DEV_WRITE && s->count)
            for (uint64_t p = first + keep; p < first + n && s->count; p++)
                drop(s, p);
        n = keep;
    }
    switch (dio->op) {
    case TC_DEV_READ:
        for (uint64_t i = 0; i < n; i++)
            load_page(s, first + i, buf + i * PAGE);
        break;
    case TC_DEV_WRITE:
        for (uint64_t i = 0; i < n; i++)
            store_page(s, first + i, buf + i * PAGE);
        break;
    default:    /* trim, write-zeroes: whole pages inside the range read as zeroes */
        first = tc_round_up(dio->off, PAGE) / PAGE;
        uint64_t end = (dio->off + dio->len) / PAGE;
        if (s->count && end > first) {
            if (end - first < s->cap) {
                for (uint64_t p = first; p < end && s->count; p++)
                    drop(s, p);
            } else {
                for (size_t i = 0; i < s->cap;) {
                    uint64_t k = s->slots[i].key;
                    if (k != EMPTY && k >= first && k < end)
                        drop(s, k);             /* may shift another entry into i */
                    else
                        i++;
                }
            }
        }
        break;
    }
    dio->done_bytes = dio->len;
    dev_complete(dio, 0);
}

static void mem_close(struct tc_dev *dev)
{
    struct dev_mem *m = container_of(dev, struct dev_mem, dev);
    pthread_mutex_lock(&registry_lock);
    struct mem_store *s = m->st;
    if (--s->opens == 0 && s->destroyed)
        store_free(s);
    pthread_mutex_unlock(&registry_lock);
    free(m->dev.name);
    free(m);
}

static const struct tc_dev_ops mem_ops = { .submit = mem_submit, .close = mem_close };

struct tc_dev *dev_mem_open_as(struct tc_reactor *r, const char *spec, const char *role,
                               bool read_only, char *err, size_t errlen)
{
    const char *name = spec + (dev_is_mem(spec) ? 4 : 0);
    pthread_mutex_lock(&registry_lock);
    struct mem_store *s = lookup(name);
    if (s)
        s->opens++;
    pthread_mutex_unlock(&registry_lock);
    if (s == NULL) {
        snprintf(err, errlen, "%s %s: no such memory device", role, spec);
        return NULL;
    }
    struct dev_mem *m = tc_xcalloc(1, sizeof *m);
    m->st = s;
    struct tc_dev *d = &m->dev;
    d->ops = &mem_ops;
    d->reactor = r;
    d->name = tc_xstrdup(spec);
    d->size = s->size;
    d->logical_block = 512;
    d->read_only = read_only;
    d->direct_io = true;            /* no second copy anywhere */
    d->can_trim = true;
    d->can_zero = true;
    d->can_fast_zero = true;
    d->can_fua = true;
    d->can_flush = true;
    d->rotational = false;
    snprintf(d->identity, sizeof d->identity, "mem:%s", name);
    return d;
}
