/*
 * tiercache status: ask a daemon for its figures.  The daemon answers in
 * JSON only; this renders it as aligned text unless --json is given, so the
 * two forms never disagree.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ctl/ctl.h"
#include "util/jsonread.h"
#include "util/log.h"
#include "util/parse.h"

static const char status_help[] =
"Usage: tiercache status [--socket PATH] [--json]\n"
"\n"
"Print the figures of a running daemon: mode, health, cache use, hits and\n"
"misses, promotions, dirty data, bytes read and written per device, errors,\n"
"and the NBD server's connections and requests.\n"
"\n"
"  --socket PATH   the daemon's NBD socket (x.sock) or control socket (x.ctl);\n"
"                  default RUNDIR/tiercache.ctl\n"
"  --json          print the figures as one JSON object (keys in tiercache(8))\n"
"  --help, -h      this text\n";

struct collect {
    char *text;
    size_t len;
};

static void collect_line(const char *line, void *arg)
{
    struct collect *c = arg;
    size_t n = strlen(line);
    c->text = realloc(c->text, c->len + n + 2);
    memcpy(c->text + c->len, line, n);
    c->len += n;
    c->text[c->len++] = '\n';
    c->text[c->len] = '\0';
}

static bool is_byte_key(const char *key)
{
    return key && (strstr(key, "bytes") || strcmp(key, "size") == 0 || strstr(key, "memory") ||
                   strcmp(key, "used") == 0);
}

static void print_scalar(const struct jv *v)
{
    char sz[32];
    switch (v->type) {
    case JV_NULL: printf("-"); break;
    case JV_BOOL: printf("%s", v->boolean ? "yes" : "no"); break;
    case JV_STRING: printf("%s", v->str[0] ? v->str : "\"\""); break;
    case JV_NUMBER:
        if (is_byte_key(v->key) && v->num >= 1024 && v->num == floor(v->num))
            printf("%s (%s)", v->str, tc_format_size((uint64_t)v->num, sz, sizeof sz));
        else if (v->key && strstr(v->key, "ratio"))
            printf("%.1f%%", v->num * 100);
        else
            printf("%s", v->str);
        break;
    default: break;
    }
}

static void render(const struct jv *obj, int indent)
{
    for (const struct jv *m = obj->child; m; m = m->next) {
        char label[96];
        snprintf(label, sizeof label, "%s:", m->key ? m->key : "-");
        for (char *p = label; *p; p++)
            if (*p == '_')
                *p = ' ';
        if (m->type == JV_OBJECT) {
            printf("%*s%s\n", indent, "", label);
            render(m, indent + 2);
        } else if (m->type == JV_ARRAY) {
            bool scalars = true;
            for (const struct jv *e = m->child; e; e = e->next)
                if (e->type == JV_OBJECT || e->type == JV_ARRAY)
                    scalars = false;
            if (scalars) {
                printf("%*s%-*s ", indent, "", 28 - indent, label);
                for (const struct jv *e = m->child; e; e = e->next) {
                    print_scalar(e);
                    if (e->next)
                        printf(", ");
                }
                printf("\n");
            } else {
                printf("%*s%s\n", indent, "", label);
                int i = 0;
                for (const struct jv *e = m->child; e; e = e->next, i++) {
                    printf("%*s[%d]\n", indent + 2, "", i);
                    if (e->type == JV_OBJECT)
                        render(e, indent + 4);
                }
            }
        } else {
            printf("%*s%-*s ", indent, "", 28 - indent, label);
            print_scalar(m);
            printf("\n");
        }
    }
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *sock = NULL;
    bool json = false;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 's': sock = optarg; break;
        case 'j': json = true; break;
        case 'h': cli_print(status_help); return 0;
        default: fprintf(stderr, "Try 'tiercache status --help'.\n"); return 2;
        }
    }
    if (optind < argc)
        tc_die(2, "status: unexpected argument '%s'", argv[optind]);
    char path[4096], err[512];
    cli_control_path(sock, path, sizeof path);
    struct collect c = { NULL, 0 };
    if (ctl_request(path, "status", collect_line, &c, err, sizeof err) < 0) {
        free(c.text);
        tc_die(1, "%s", err);
    }
    if (c.text == NULL)
        tc_die(1, "%s: the daemon sent no status", path);
    if (json) {
        fputs(c.text, stdout);
        free(c.text);
        return 0;
    }
    struct jv *root = jv_parse(c.text, err, sizeof err);
    if (root == NULL) {
        free(c.text);
        tc_die(1, "%s: unreadable status: %s", path, err);
    }
    printf("tiercache %s, pid %.0f\n", jv_str(jv_get(root, "version"), "?"),
           jv_num(jv_get(root, "pid"), 0));
    for (const struct jv *m = root->child; m; m = m->next) {
        if (m->type != JV_OBJECT)
            continue;
        printf("%s:\n", m->key);
        render(m, 2);
    }
    jv_free(root);
    free(c.text);
    return 0;
}
