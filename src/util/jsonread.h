/*
 * A small JSON reader for the CLI: parses a whole document into a tree.
 * Used to render the daemon's status (which is produced as JSON only, so
 * that text and --json never disagree) and by tests.
 */
#ifndef TC_UTIL_JSONREAD_H
#define TC_UTIL_JSONREAD_H

#include <stdbool.h>
#include <stddef.h>

enum jv_type { JV_NULL, JV_BOOL, JV_NUMBER, JV_STRING, JV_ARRAY, JV_OBJECT };

struct jv {
    enum jv_type type;
    char *key;                  /* member name inside an object */
    char *str;                  /* JV_STRING; also the number's source text */
    double num;
    bool boolean;
    struct jv *child, *next;    /* members / elements */
};

/* NULL on a syntax error (err gets the position and reason). */
struct jv *jv_parse(const char *text, char *err, size_t errlen);
void jv_free(struct jv *v);
struct jv *jv_get(const struct jv *obj, const char *key);   /* NULL if absent */
/* Dotted path lookup: "cache.hits". */
struct jv *jv_path(const struct jv *obj, const char *path);
double jv_num(const struct jv *v, double dflt);
const char *jv_str(const struct jv *v, const char *dflt);

#endif
