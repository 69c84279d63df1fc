/*
 * A small JSON writer for status output: objects, arrays, strings and
 * numbers appended to a growing buffer.  Commas are placed automatically.
 */
#ifndef TC_UTIL_JSON_H
#define TC_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tc_json {
    char *buf;
    size_t len, cap;
    int depth;
    bool need_comma[32];
    bool pretty;
};

void json_init(struct tc_json *j, bool pretty);
void json_free(struct tc_json *j);
void json_begin_object(struct tc_json *j, const char *key);   /* key NULL inside arrays / top */
void json_end_object(struct tc_json *j);
void json_begin_array(struct tc_json *j, const char *key);
void json_end_array(struct tc_json *j);
void json_string(struct tc_json *j, const char *key, const char *value);
void json_uint(struct tc_json *j, const char *key, uint64_t value);
void json_int(struct tc_json *j, const char *key, int64_t value);
void json_double(struct tc_json *j, const char *key, double value);
/* A count of microseconds as seconds with all six decimals (json_double
 * keeps six significant digits: too few for a long-running counter). */
void json_micros_as_seconds(struct tc_json *j, const char *key, uint64_t us);
void json_bool(struct tc_json *j, const char *key, bool value);
void json_null(struct tc_json *j, const char *key);

#endif
