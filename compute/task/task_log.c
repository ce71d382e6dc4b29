/* task_log.c — a part's log and progress (task_log.h). */
#include "task_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes all n bytes or records the error. */
static void put(cn_task_log *l, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0 && l->fd >= 0 && !l->error) {
        ssize_t w = write(l->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            l->error = w < 0 ? errno : EIO;
            return;
        }
        p += w;
        n -= (size_t)w;
        __atomic_add_fetch(&l->size, (int64_t)w, __ATOMIC_RELEASE);
    }
}

int cn_task_log_open(cn_task_log *l, const char *path, int64_t cap)
{
    memset(l, 0, sizeof *l);
    l->cap = cap;
    l->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
    return l->fd < 0 ? -errno : 0;
}

void cn_task_log_note(cn_task_log *l, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n = snprintf(line, sizeof line, "[kowloon] ");
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    put(l, line, (size_t)n);
}

void cn_task_log_write(cn_task_log *l, int from_stderr, const void *data, size_t n)
{
    const char *p = data;
    if (from_stderr) {
        for (size_t i = n > CN_TASK_TAIL ? n - CN_TASK_TAIL : 0; i < n; i++) {
            l->tail[l->tail_pos] = p[i];
            l->tail_pos = (l->tail_pos + 1) % CN_TASK_TAIL;
            if (l->tail_len < CN_TASK_TAIL)
                l->tail_len++;
        }
    }
    int64_t room = l->cap - l->kept;
    size_t keep = room <= 0 ? 0 : (uint64_t)room < n ? (size_t)room : n;
    if (keep > 0) {
        put(l, p, keep);
        l->kept += (int64_t)keep;
    }
    if (keep < n) {
        if (l->dropped == 0) {
            put(l, "\n", 1);
            cn_task_log_note(l, "the log reached its cap of %lld bytes; what follows is "
                                "dropped (counted at the end)", (long long)l->cap);
        }
        l->dropped += (int64_t)(n - keep);
    }
}

void cn_task_log_close(cn_task_log *l)
{
    if (l->fd < 0)
        return;
    if (l->dropped > 0)
        cn_task_log_note(l, "dropped %lld bytes of output past the cap of %lld bytes",
                         (long long)l->dropped, (long long)l->cap);
    close(l->fd);
    l->fd = -1;
}

void cn_task_log_tail(const cn_task_log *l, int max_lines, char *out, size_t outlen)
{
    char buf[CN_TASK_TAIL + 1];
    size_t n = l->tail_len, start = (l->tail_pos + CN_TASK_TAIL - n) % CN_TASK_TAIL;
    for (size_t i = 0; i < n; i++)
        buf[i] = l->tail[(start + i) % CN_TASK_TAIL];
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    /* back from the end over max_lines line breaks, and no more than fits */
    size_t from = n;
    int lines = 0;
    while (from > 0 && n - from < outlen - 1) {
        if (buf[from - 1] == '\n' && ++lines == max_lines)
            break;
        from--;
    }
    size_t k = 0;
    for (size_t i = from; i < n && k + 1 < outlen; i++) {
        unsigned char c = (unsigned char)buf[i];
        out[k++] = c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f) ? (char)c : '?';
    }
    if (outlen)
        out[k] = '\0';
}

/* One complete line. */
static int progress_line(cn_task_progress *p, const char *line, size_t n, json_t **latest)
{
    json_error_t e;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        n--;
    if (n == 0)
        return 0;
    json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(j)) {
        json_decref(j);
        p->bad++;
        return 0;
    }
    char *dump = json_dumps(j, JSON_COMPACT);
    size_t size = dump ? strlen(dump) : SIZE_MAX;
    free(dump);
    if (size > CN_TASK_PROGRESS_OBJ) {
        json_decref(j);
        p->bad++;
        return 0;
    }
    json_decref(*latest);
    *latest = j;
    return 1;
}

int cn_task_progress_feed(cn_task_progress *p, const char *data, size_t n, json_t **latest)
{
    int changed = 0;
    p->off += (int64_t)n;
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (!p->skipping) {
            if (p->len + take > sizeof p->line) {
                p->skipping = 1;
                p->bad++;
                p->len = 0;
            } else {
                memcpy(p->line + p->len, data, take);
                p->len += take;
            }
        }
        if (!nl)
            break;
        if (!p->skipping)
            changed |= progress_line(p, p->line, p->len, latest);
        p->skipping = 0;
        p->len = 0;
        data = nl + 1;
        n -= take + 1;
    }
    return changed;
}

int cn_task_progress_poll(cn_task_progress *p, const char *path, json_t **latest)
{
    char buf[16384];
    struct stat st;
    int changed = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= p->off) {
        close(fd);
        return 0;
    }
    /* at most a few reads a poll: a program that writes faster is read
     * over the next polls */
    for (int i = 0; i < 64; i++) {
        ssize_t r = pread(fd, buf, sizeof buf, p->off);
        if (r <= 0)
            break;
        changed |= cn_task_progress_feed(p, buf, (size_t)r, latest);
    }
    close(fd);
    return changed;
}
