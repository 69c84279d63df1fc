#include "swap/procfs.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ssize_t sp_read_text(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

bool sp_kv_u64(const char *text, const char *key, uint64_t *out)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, klen) == 0 &&
            (line[klen] == ':' || line[klen] == ' ' || line[klen] == '\t')) {
            const char *p = line + klen + (line[klen] == ':');
            while (*p == ' ' || *p == '\t')
                p++;
            if (!isdigit((unsigned char)*p))
                return false;
            char *end;
            uint64_t v = strtoull(p, &end, 10);
            while (*end == ' ' || *end == '\t')
                end++;
            if (end[0] == 'k' && end[1] == 'B')
                v *= 1024;
            *out = v;
            return true;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return false;
}

bool sp_read_u64(const char *path, uint64_t *out)
{
    char buf[64];
    if (sp_read_text(path, buf, sizeof buf) <= 0)
        return false;
    if (strncmp(buf, "max", 3) == 0) {
        *out = UINT64_MAX;
        return true;
    }
    if (!isdigit((unsigned char)buf[0]))
        return false;
    *out = strtoull(buf, NULL, 10);
    return true;
}
