/*
 * Parsing of command-line values.  Each function returns 0 on success and
 * -1 on error, after writing a message that names the bad value into err.
 */
#ifndef TC_UTIL_PARSE_H
#define TC_UTIL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* "4096", "64K", "4M", "1.5G", "2T" (binary units; optional "iB"/"B"). */
int tc_parse_size(const char *what, const char *s, uint64_t *out, char *err, size_t errlen);
/* A rate in bytes per second: a size, optionally followed by "/s", at
 * most TC_RATE_MAX (1024 PiB/s). */
#define TC_RATE_MAX (1ull << 60)
int tc_parse_rate(const char *what, const char *s, uint64_t *out, char *err, size_t errlen);
/* Unsigned integer in [min, max]. */
int tc_parse_uint(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                  char *err, size_t errlen);
/* Duration: decimal digits (a point allowed), then nothing or s, ms, us,
 * m, min or h: "5", "5s", "250ms", "2m" -> nanoseconds. */
int tc_parse_duration(const char *what, const char *s, uint64_t *ns, char *err, size_t errlen);
/* Percentage "10" or "10%" in [0, 100]. */
int tc_parse_percent(const char *what, const char *s, double *out, char *err, size_t errlen);

/* Human-readable size into buf ("1.5 GiB"). Returns buf. */
const char *tc_format_size(uint64_t bytes, char *buf, size_t len);

static inline int tc_is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

#endif
