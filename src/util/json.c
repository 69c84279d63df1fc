#include "util/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(struct tc_json *j, const char *s, size_t n)
{
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 1024;
        while (cap < j->len + n + 1)
            cap *= 2;
        char *b = realloc(j->buf, cap);
        if (b == NULL)
            abort();
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void puts_(struct tc_json *j, const char *s) { put(j, s, strlen(s)); }

static void putf(struct tc_json *j, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(j, tmp, (size_t)n);
}

static void put_string(struct tc_json *j, const char *s)
{
    put(j, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            put(j, "\\", 1);
            put(j, (const char *)p, 1);
        } else if (*p < 0x20) {
            putf(j, "\\u%04x", *p);
        } else {
            put(j, (const char *)p, 1);
        }
    }
    put(j, "\"", 1);
}

static void indent(struct tc_json *j)
{
    if (!j->pretty)
        return;
    put(j, "\n", 1);
    for (int i = 0; i < j->depth; i++)
        put(j, "  ", 2);
}

static void key(struct tc_json *j, const char *k)
{
    if (j->need_comma[j->depth])
        put(j, ",", 1);
    j->need_comma[j->depth] = true;
    if (j->depth > 0)
        indent(j);
    if (k) {
        put_string(j, k);
        puts_(j, j->pretty ? ": " : ":");
    }
}

void json_init(struct tc_json *j, bool pretty)
{
    memset(j, 0, sizeof *j);
    j->pretty = pretty;
}

void json_free(struct tc_json *j)
{
    free(j->buf);
    j->buf = NULL;
}

void json_begin_object(struct tc_json *j, const char *k)
{
    key(j, k);
    put(j, "{", 1);
    j->depth++;
    j->need_comma[j->depth] = false;
}

void json_end_object(struct tc_json *j)
{
    bool had = j->need_comma[j->depth];
    j->depth--;
    if (had)
        indent(j);
    put(j, "}", 1);
}

void json_begin_array(struct tc_json *j, const char *k)
{
    key(j, k);
    put(j, "[", 1);
    j->depth++;
    j->need_comma[j->depth] = false;
}

void json_end_array(struct tc_json *j)
{
    bool had = j->need_comma[j->depth];
    j->depth--;
    if (had)
        indent(j);
    put(j, "]", 1);
}

void json_string(struct tc_json *j, const char *k, const char *v)
{
    key(j, k);
    put_string(j, v ? v : "");
}

void json_uint(struct tc_json *j, const char *k, uint64_t v)
{
    key(j, k);
    putf(j, "%llu", (unsigned long long)v);
}

void json_int(struct tc_json *j, const char *k, int64_t v)
{
    key(j, k);
    putf(j, "%lld", (long long)v);
}

void json_double(struct tc_json *j, const char *k, double v)
{
    key(j, k);
    if (!isfinite(v))
        puts_(j, "null");
    else
        putf(j, "%.6g", v);
}

void json_micros_as_seconds(struct tc_json *j, const char *k, uint64_t us)
{
    key(j, k);
    putf(j, "%llu.%06llu", (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000));
}

void json_bool(struct tc_json *j, const char *k, bool v)
{
    key(j, k);
    puts_(j, v ? "true" : "false");
}

void json_null(struct tc_json *j, const char *k)
{
    key(j, k);
    puts_(j, "null");
}
