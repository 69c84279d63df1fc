/*
 * Settings changed while serving (tiercache set KEY=VALUE): the tunables
 * serve takes as options, with the same names and value syntax, checked
 * against the same ranges.  Each takes effect at the next decision that
 * reads it: the writeback pacing reads the dirty marks every pass, the
 * stream detector the cutoff at every request, read-ahead its window at
 * every stream step, the budget its rate at every refill, the origin its
 * hold timeout at the next outage.
 *
 * Not here: what the format fixes (block and segment size, devices).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/budget.h"
#include "engine/cache.h"
#include "engine/readahead.h"
#include "engine/stream.h"
#include "engine/engine.h"
#include "policy/policy.h"
#include "util/json.h"
#include "util/misc.h"
#include "util/parse.h"

#define READAHEAD_MAX (64ull << 20)
#define ORIGIN_TIMEOUT_MAX_NS (86400ull * 1000000000ull)

static struct cache *live_cache(struct tc_volume *vol)
{
    return vol->cache && !vol->detached && !vol->cache_failed ? vol->cache : NULL;
}

/* The dirty marks are stored even when only checking (apply false): a
 * later pair in the same command is checked against them (dirty-target=60
 * dirty-high=70 from 10/50; tc_volume_set_many() stores both first); the
 * caller puts them back if any pair fails. */
static int set_dirty(struct tc_volume *vol, bool high, const char *key, const char *value,
                     char *err, size_t errlen)
{
    double pct;
    if (tc_parse_percent(key, value, &pct, err, errlen) < 0)
        return -1;
    double lo = high ? vol->cfg.dirty_target * 100 : 0;
    double hi = high ? 100 : vol->cfg.dirty_high * 100;
    if (pct < lo || pct > hi) {
        snprintf(err, errlen, "%s=%s: out of range (valid: %.0f%% to %.0f%%, %s)", key, value,
                 lo, hi, high ? "at least dirty-target" : "at most dirty-high");
        return -1;
    }
    if (high)
        vol->cfg.dirty_high = pct / 100;
    else
        vol->cfg.dirty_target = pct / 100;
    return 0;
}

static int set_readahead(struct tc_volume *vol, const char *value, bool apply, char *err,
                         size_t errlen)
{
    uint64_t v;
    if (tc_parse_size("readahead", value, &v, err, errlen) < 0)
        return -1;
    struct cache *c = live_cache(vol);
    /* The slots were sized for the window at start: a smaller window uses
     * fewer of them; a larger one would need more. */
    uint64_t max = c ? readahead_max_window(c) : 0;
    if (max == 0 && v != 0) {
        snprintf(err, errlen, "readahead=%s: read-ahead is off in this daemon (started with "
                 "--readahead 0 or without a cache); restart with --readahead to use it", value);
        return -1;
    }
    if (v > max || (v && v < (1u << 20))) {
        char m[32];
        snprintf(err, errlen, "readahead=%s: out of range (valid: 0 (off) or from 1M to %s, "
                 "the window this daemon started with)", value,
                 tc_format_size(max, m, sizeof m));
        return -1;
    }
    if (!apply)
        return 0;
    vol->cfg.readahead = v;
    if (c)
        readahead_set_window(c, v);
    return 0;
}

static int set_budget(struct tc_volume *vol, const char *value, bool apply, char *err,
                      size_t errlen)
{
    uint64_t rate, b, mb;
    if (budget_parse("write-budget", value, true, &rate, &b, &mb, err, errlen) < 0)
        return -1;
    if (!apply)
        return 0;
    vol->cfg.write_budget_rate = rate;
    vol->cfg.write_budget_burst = b;
    vol->cfg.write_budget_minburst = mb;
    if (vol->cache)
        budget_init(&vol->cache->budget, rate, b, mb);   /* a full bucket at the new size */
    return 0;
}

static int set_origin_timeout(struct tc_volume *vol, const char *value, bool apply, char *err,
                              size_t errlen)
{
    uint64_t ns;
    if (tc_parse_duration("origin-timeout", value, &ns, err, errlen) < 0)
        return -1;
    if (ns > ORIGIN_TIMEOUT_MAX_NS) {
        snprintf(err, errlen, "origin-timeout=%s: out of range (valid: 0 to 86400 seconds)",
                 value);
        return -1;
    }
    if (!apply)
        return 0;
    vol->cfg.origin_timeout_ns = ns;
    vol->origin->hold_timeout_ns = ns;
    return 0;
}

static const char *const keys =
    "policy, dirty-target, dirty-high, sequential-cutoff, readahead, write-budget, "
    "origin-timeout";

const char *tc_volume_setting_keys(void)
{
    return keys;
}

bool tc_volume_setting_known(const char *key, size_t len)
{
    for (const char *k = keys; *k; ) {
        size_t n = strcspn(k, ",");
        if (n == len && memcmp(k, key, len) == 0)
            return true;
        k += n;
        k += strspn(k, ", ");
    }
    return false;
}

/* A new policy starts from nothing: cache_switch_policy() drops the old
 * one's state and every block's hint, so what is cached stays cached but
 * earns its place again under the new rules (as after a restart with
 * another --policy, without losing the cache's contents). */
static int set_policy(struct tc_volume *vol, const char *value, bool apply, char *err,
                      size_t errlen)
{
    if (policy_find(value) == NULL) {
        snprintf(err, errlen, "policy '%s': no such policy (choose from %s)", value,
                 policy_names());
        return -1;
    }
    if (vol->cache == NULL) {
        snprintf(err, errlen, "policy: this volume has no cache devices");
        return -1;
    }
    if (!apply)
        return 0;
    if (live_cache(vol) == NULL) {         /* detached or failed: for a later attach */
        vol->cfg.policy = policy_find(value)->name;
        return 0;
    }
    return cache_switch_policy(vol->cache, value, err, errlen) < 0 ? -1 : 0;
}

int tc_volume_set(struct tc_volume *vol, const char *key, const char *value, bool apply,
                  char *err, size_t errlen)
{
    bool needs_cache = strcmp(key, "dirty-target") == 0 || strcmp(key, "dirty-high") == 0 ||
                       strcmp(key, "sequential-cutoff") == 0 || strcmp(key, "readahead") == 0 ||
                       strcmp(key, "write-budget") == 0;
    if (strcmp(key, "policy") == 0)
        return set_policy(vol, value, apply, err, errlen);
    if (!needs_cache && strcmp(key, "origin-timeout") != 0) {
        /* A key of any length is named, cut to its first 40 characters. */
        size_t n = strlen(key);
        if (n > 40)
            snprintf(err, errlen, "'%.40s...' (%zu characters): no such setting (choose from "
                     "%s)", key, n, keys);
        else
            snprintf(err, errlen, "'%s': no such setting (choose from %s)", key, keys);
        return -1;
    }
    if (needs_cache && vol->cache == NULL) {
        snprintf(err, errlen, "%s: this volume has no cache devices", key);
        return -1;
    }
    if (strcmp(key, "dirty-target") == 0)
        return set_dirty(vol, false, key, value, err, errlen);
    if (strcmp(key, "dirty-high") == 0)
        return set_dirty(vol, true, key, value, err, errlen);
    if (strcmp(key, "sequential-cutoff") == 0) {
        uint64_t v;
        if (tc_parse_size("sequential-cutoff", value, &v, err, errlen) < 0)
            return -1;
        if (apply) {
            vol->cfg.sequential_cutoff = v;
            streams_set_cutoff(vol->cache->streams, v);
        }
        return 0;
    }
    if (strcmp(key, "readahead") == 0)
        return set_readahead(vol, value, apply, err, errlen);
    if (strcmp(key, "write-budget") == 0)
        return set_budget(vol, value, apply, err, errlen);
    return set_origin_timeout(vol, value, apply, err, errlen);
}

/* The dirty marks the pairs give, stored before any is checked: each is
 * then checked against the other as it will be once all are applied, so
 * the order of the pairs does not matter (dirty-high=20 dirty-target=5
 * from 90/95 was refused, the other order taken).  A value that does not
 * parse is left for the check to report. */
static void preset_dirty(struct tc_volume *vol, const char *pairs)
{
    char *copy = tc_xstrdup(pairs), *save = NULL;
    for (char *tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '='), quiet[160];
        double pct;
        if (eq == NULL)
            continue;
        *eq = '\0';
        bool high = strcmp(tok, "dirty-high") == 0;
        if ((high || strcmp(tok, "dirty-target") == 0) &&
            tc_parse_percent(tok, eq + 1, &pct, quiet, sizeof quiet) == 0) {
            if (high)
                vol->cfg.dirty_high = pct / 100;
            else
                vol->cfg.dirty_target = pct / 100;
        }
    }
    free(copy);
}

/* Two passes over the pairs: check every one, then apply them all. */
int tc_volume_set_many(struct tc_volume *vol, const char *pairs, char *err, size_t errlen)
{
    double target = vol->cfg.dirty_target, high = vol->cfg.dirty_high;
    preset_dirty(vol, pairs);
    for (int apply = 0; apply < 2; apply++) {
        char *copy = tc_xstrdup(pairs), *save = NULL;
        /* The keys so far: one given twice is refused, not the last taken. */
        const char **seen = tc_xcalloc(strlen(pairs) / 2 + 1, sizeof *seen);
        unsigned n = 0;
        for (char *tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
            char *eq = strchr(tok, '=');
            bool twice = false;
            if (eq != NULL && eq != tok) {
                *eq = '\0';
                for (unsigned i = 0; i < n && !twice; i++)
                    twice = strcmp(seen[i], tok) == 0;
                if (twice)
                    snprintf(err, errlen, "'%.40s' given twice: give each key once", tok);
            } else {
                snprintf(err, errlen, "'%.40s': give KEY=VALUE (keys: %s)", tok, keys);
            }
            if (eq == NULL || eq == tok || twice) {
                free(seen);
                free(copy);
                vol->cfg.dirty_target = target;
                vol->cfg.dirty_high = high;
                return -1;
            }
            seen[n] = tok;
            if (tc_volume_set(vol, tok, eq + 1, apply, err, errlen) < 0) {
                free(seen);
                free(copy);
                vol->cfg.dirty_target = target;
                vol->cfg.dirty_high = high;
                return -1;
            }
            n++;
        }
        free(seen);
        free(copy);
        if (n == 0) {
            snprintf(err, errlen, "give at least one KEY=VALUE (keys: %s)", keys);
            return -1;
        }
    }
    return 0;
}

void tc_volume_settings_json(const struct tc_volume *vol, struct tc_json *j)
{
    json_begin_object(j, "settings");
    json_string(j, "policy", vol->cfg.policy ? vol->cfg.policy : "default");
    json_double(j, "dirty_target_ratio", vol->cfg.dirty_target);
    json_double(j, "dirty_high_ratio", vol->cfg.dirty_high);
    json_uint(j, "sequential_cutoff", vol->cfg.sequential_cutoff);
    json_uint(j, "readahead", vol->cfg.readahead);
    json_uint(j, "write_budget_rate", vol->cfg.write_budget_rate);
    json_uint(j, "write_budget_burst", vol->cache ? vol->cache->budget.burst : 0);
    json_uint(j, "write_budget_minburst", vol->cache ? vol->cache->budget.minburst : 0);
    json_double(j, "origin_timeout_seconds", (double)vol->cfg.origin_timeout_ns / 1e9);
    json_end_object(j);
}
