#include "util/jsonread.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/misc.h"

struct parser {
    const char *s, *p;
    char *err;
    size_t errlen;
    int depth;
};

static struct jv *parse_value(struct parser *ps);

static void skip_ws(struct parser *ps)
{
    while (*ps->p && isspace((unsigned char)*ps->p))
        ps->p++;
}

static struct jv *fail(struct parser *ps, const char *why)
{
    if (ps->err[0] == '\0')
        snprintf(ps->err, ps->errlen, "JSON error at byte %td: %s", ps->p - ps->s, why);
    return NULL;
}

static char *parse_string_raw(struct parser *ps)
{
    if (*ps->p != '"') {
        fail(ps, "expected a string");
        return NULL;
    }
    ps->p++;
    size_t cap = 32, len = 0;
    char *out = tc_xmalloc(cap);
    while (*ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    if (!isxdigit((unsigned char)ps->p[i])) {
                        free(out);
                        fail(ps, "bad \\u escape");
                        return NULL;
                    }
                }
                sscanf(ps->p, "%4x", &v);
                ps->p += 4;
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            case '\0':
                free(out);
                fail(ps, "unterminated string");
                return NULL;
            default: c = e; break;
            }
        }
        if (len + 2 > cap) {
            cap *= 2;
            out = realloc(out, cap);
            if (out == NULL)
                abort();
        }
        out[len++] = c;
    }
    if (*ps->p != '"') {
        free(out);
        fail(ps, "unterminated string");
        return NULL;
    }
    ps->p++;
    out[len] = '\0';
    return out;
}

static struct jv *new_jv(enum jv_type t)
{
    struct jv *v = tc_xcalloc(1, sizeof *v);
    v->type = t;
    return v;
}

static struct jv *parse_container(struct parser *ps, bool object)
{
    struct jv *v = new_jv(object ? JV_OBJECT : JV_ARRAY);
    struct jv **tail = &v->child;
    ps->p++;
    if (++ps->depth > 64) {
        jv_free(v);
        return fail(ps, "nested too deeply");
    }
    skip_ws(ps);
    if (*ps->p == (object ? '}' : ']')) {
        ps->p++;
        ps->depth--;
        return v;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (object) {
            key = parse_string_raw(ps);
            if (key == NULL)
                goto bad;
            skip_ws(ps);
            if (*ps->p != ':') {
                free(key);
                fail(ps, "expected ':'");
                goto bad;
            }
            ps->p++;
        }
        struct jv *m = parse_value(ps);
        if (m == NULL) {
            free(key);
            goto bad;
        }
        m->key = key;
        *tail = m;
        tail = &m->next;
        skip_ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == (object ? '}' : ']')) {
            ps->p++;
            ps->depth--;
            return v;
        }
        fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
        goto bad;
    }
bad:
    jv_free(v);
    return NULL;
}

static struct jv *parse_value(struct parser *ps)
{
    skip_ws(ps);
    char c = *ps->p;
    if (c == '{' || c == '[')
        return parse_container(ps, c == '{');
    if (c == '"') {
        char *s = parse_string_raw(ps);
        if (s == NULL)
            return NULL;
        struct jv *v = new_jv(JV_STRING);
        v->str = s;
        return v;
    }
    if (strncmp(ps->p, "true", 4) == 0 || strncmp(ps->p, "false", 5) == 0) {
        struct jv *v = new_jv(JV_BOOL);
        v->boolean = c == 't';
        ps->p += v->boolean ? 4 : 5;
        return v;
    }
    if (strncmp(ps->p, "null", 4) == 0) {
        ps->p += 4;
        return new_jv(JV_NULL);
    }
    if (c == '-' || isdigit((unsigned char)c)) {
        char *end;
        double d = strtod(ps->p, &end);
        if (end == ps->p)
            return fail(ps, "bad number");
        struct jv *v = new_jv(JV_NUMBER);
        v->num = d;
        v->str = strndup(ps->p, (size_t)(end - ps->p));
        ps->p = end;
        return v;
    }
    return fail(ps, "unexpected character");
}

struct jv *jv_parse(const char *text, char *err, size_t errlen)
{
    struct parser ps = { .s = text, .p = text, .err = err, .errlen = errlen };
    err[0] = '\0';
    struct jv *v = parse_value(&ps);
    if (v == NULL)
        return NULL;
    skip_ws(&ps);
    if (*ps.p != '\0') {
        jv_free(v);
        return fail(&ps, "trailing characters");
    }
    return v;
}

void jv_free(struct jv *v)
{
    while (v) {
        struct jv *next = v->next;
        jv_free(v->child);
        free(v->key);
        free(v->str);
        free(v);
        v = next;
    }
}

struct jv *jv_get(const struct jv *obj, const char *key)
{
    if (obj == NULL || obj->type != JV_OBJECT)
        return NULL;
    for (struct jv *m = obj->child; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0)
            return m;
    return NULL;
}

struct jv *jv_path(const struct jv *obj, const char *path)
{
    char part[128];
    const struct jv *cur = obj;
    while (cur && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        cur = jv_get(cur, part);
        path += n + (dot ? 1 : 0);
    }
    return (struct jv *)cur;
}

double jv_num(const struct jv *v, double dflt)
{
    return v && v->type == JV_NUMBER ? v->num : dflt;
}

const char *jv_str(const struct jv *v, const char *dflt)
{
    return v && v->type == JV_STRING ? v->str : dflt;
}
