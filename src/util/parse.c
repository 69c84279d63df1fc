#include "util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int tc_parse_size(const char *what, const char *s, uint64_t *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (s == NULL || *s == '\0' || *s == '-' || isspace((unsigned char)*s))
        goto bad;
    /* Decimal digits and a point only: strtod() would take hexadecimal,
     * an exponent, "inf" and "nan" too. */
    size_t digits = strspn(s, "0123456789.");
    double v = strtod(s, &end);
    if (errno || end == s || end != s + digits || v < 0 || !isfinite(v))
        goto bad;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case 'P': mult = 1024.0 * 1024 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mult > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b'))
        end += 2;
    else if (toupper((unsigned char)*end) == 'B')
        end++;
    if (*end != '\0')
        goto bad;
    double bytes = v * mult;
    if (bytes >= 18446744073709551615.0 || bytes != floor(bytes))
        goto bad;
    *out = (uint64_t)bytes;
    return 0;
bad:
    snprintf(err, errlen, "%s: '%s' is not a size (examples: 4096, 64K, 4M, 2G)", what,
             s ? s : "");
    return -1;
}

int tc_parse_rate(const char *what, const char *s, uint64_t *out, char *err, size_t errlen)
{
    char tmp[64];
    size_t n = strlen(s);
    if (n >= sizeof tmp) {
        snprintf(err, errlen, "%s: '%s' is too long", what, s);
        return -1;
    }
    memcpy(tmp, s, n + 1);
    if (n > 2 && strcmp(tmp + n - 2, "/s") == 0)
        tmp[n - 2] = '\0';
    if (tc_parse_size(what, tmp, out, err, errlen) < 0) {
        snprintf(err, errlen, "%s: '%s' is not a rate (examples: 50M, 50M/s, 1G/s)", what, s);
        return -1;
    }
    /* A bound far above any device, and low enough that what is derived
     * from a rate (a burst of two seconds of it) cannot wrap. */
    if (*out > TC_RATE_MAX) {
        snprintf(err, errlen, "%s: '%s' is more than 1024P/s", what, s);
        return -1;
    }
    return 0;
}

int tc_parse_uint(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                  char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (s == NULL || !isdigit((unsigned char)*s))
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0')
        goto bad;
    if (v < min || v > max) {
        snprintf(err, errlen, "%s: %llu is out of range (%llu to %llu)", what, v,
                 (unsigned long long)min, (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
bad:
    snprintf(err, errlen, "%s: '%s' is not a whole number", what, s ? s : "");
    return -1;
}

int tc_parse_duration(const char *what, const char *s, uint64_t *ns, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (s == NULL || *s == '\0' || *s == '-')
        goto bad;
    /* Decimal digits and a point, then the unit: strtod() alone would
     * take leading white space (" 5s"), hexadecimal and exponents. */
    size_t digits = strspn(s, "0123456789.");
    double v = strtod(s, &end);
    if (errno || end == s || end != s + digits || v < 0 || !isfinite(v))
        goto bad;
    double mult = 1e9;
    if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
        mult = 1e9;
    else if (strcmp(end, "ms") == 0)
        mult = 1e6;
    else if (strcmp(end, "us") == 0)
        mult = 1e3;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mult = 60e9;
    else if (strcmp(end, "h") == 0)
        mult = 3600e9;
    else
        goto bad;
    double r = v * mult;
    if (r > 1e18)
        goto bad;
    *ns = (uint64_t)r;
    return 0;
bad:
    snprintf(err, errlen, "%s: '%s' is not a duration (examples: 5, 5s, 250ms, 2m)", what,
             s ? s : "");
    return -1;
}

int tc_parse_percent(const char *what, const char *s, double *out, char *err, size_t errlen)
{
    /* Decimal digits and a point, then nothing or "%": strtod() alone
     * also takes hex ("0x10" is 16), exponents, "inf" and "nan". */
    size_t digits = strspn(s, "0123456789.");
    char *end = (char *)s;
    double v = -1;
    errno = 0;
    if (digits > 0 && (s[digits] == '\0' || strcmp(s + digits, "%") == 0))
        v = strtod(s, &end);
    if (errno || end != s + digits || !(v >= 0 && v <= 100)) {
        snprintf(err, errlen, "%s: '%s' is not a percentage from 0 to 100", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

const char *tc_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}
