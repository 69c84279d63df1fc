/*
 * The write budget of the cache devices (engine/budget.h).
 */
#include "engine/budget.h"

#include <stdio.h>
#include <string.h>

#include "util/misc.h"
#include "util/parse.h"

int budget_parse(const char *what, const char *value, bool off_ok, uint64_t *rate,
                 uint64_t *burst, uint64_t *minburst, char *err, size_t errlen)
{
    /* The value as the user gave it: "--write-budget 0:5", "write-budget=0:5". */
    const char *sep = strncmp(what, "--", 2) == 0 ? " " : "=";
    char spec[128], label[64];
    if (strlen(value) >= sizeof spec) {
        snprintf(err, errlen, "%s: '%.40s...' is too long", what, value);
        return -1;
    }
    snprintf(spec, sizeof spec, "%s", value);
    char *b = strchr(spec, ':'), *mb = NULL;
    if (b) {
        *b++ = '\0';
        mb = strchr(b, ':');
        if (mb)
            *mb++ = '\0';
    }
    *rate = *burst = *minburst = 0;
    if (off_ok && strcmp(spec, "off") == 0 && b == NULL)
        return 0;
    snprintf(label, sizeof label, "%s RATE", what);
    if (tc_parse_rate(label, spec, rate, err, errlen) < 0)
        return -1;
    if (*rate == 0 && !off_ok) {
        snprintf(err, errlen, "%s%s%s: RATE must be above 0 (leave the option out for no "
                 "budget)", what, sep, value);
        return -1;
    }
    if (*rate == 0 && b) {
        snprintf(err, errlen, "%s%s%s: a RATE of 0 is no budget, which takes no BURST or "
                 "MINBURST (give %s%s0 or %s%soff)", what, sep, value, what, sep, what, sep);
        return -1;
    }
    snprintf(label, sizeof label, "%s BURST", what);
    if (b && tc_parse_size(label, b, burst, err, errlen) < 0)
        return -1;
    snprintf(label, sizeof label, "%s MINBURST", what);
    if (mb && tc_parse_size(label, mb, minburst, err, errlen) < 0)
        return -1;
    if ((b && *burst == 0) || (mb && *minburst == 0)) {
        snprintf(err, errlen, "%s%s%s: %s must be above 0 (leave it out for the default: %s)",
                 what, sep, value, b && *burst == 0 ? "BURST" : "MINBURST",
                 b && *burst == 0 ? "2 s of RATE" : "BURST/4");
        return -1;
    }
    if (mb && *minburst > *burst) {
        snprintf(err, errlen, "%s%s%s: MINBURST %s is larger than BURST %s", what, sep, value,
                 mb, b);
        return -1;
    }
    return 0;
}

void budget_init(struct budget *b, uint64_t rate, uint64_t burst, uint64_t minburst)
{
    b->rate = rate;
    /* Two seconds of the rate; the parsers bound a rate (TC_RATE_MAX), and
     * this saturates rather than wrap should one come in unbounded. */
    b->burst = burst ? burst : (b->rate > UINT64_MAX / 2 ? UINT64_MAX : 2 * b->rate);
    b->minburst = minburst ? minburst : b->burst / 4;
    if (b->minburst > b->burst)
        b->minburst = b->burst;
    b->tokens = (double)b->burst;
    b->last_ns = tc_now_ns();
}

static void refill(struct budget *b)
{
    uint64_t now = tc_now_ns();
    b->tokens += (double)b->rate * (double)(now - b->last_ns) / 1e9;
    if (b->tokens > (double)b->burst)
        b->tokens = (double)b->burst;
    b->last_ns = now;
}

bool budget_allow(struct budget *b, uint64_t bytes)
{
    if (b->rate == 0)
        return true;
    refill(b);
    if (b->dry && b->tokens < (double)b->minburst) {
        b->skipped++;
        return false;
    }
    b->dry = false;
    if (b->tokens < (double)bytes) {
        b->dry = true;
        b->skipped++;
        return false;
    }
    return true;
}

void budget_spend(struct budget *b, uint64_t bytes)
{
    b->spent += bytes;
    if (b->rate == 0)
        return;
    refill(b);
    b->tokens -= (double)bytes;
    if (b->tokens <= 0)
        b->dry = true;
}
