/* task_log.h — what a task part says while it runs: its stdout and stderr
 * kept in one file per part up to a cap (what is dropped past it is
 * counted and said in the log), the last lines of its stderr (for the
 * error of a failed run), and the progress lines it writes to
 * $KOWLOON_PROGRESS (JSON objects, one a line; the latest one counts).
 * No threads: the runner's poll loop feeds both. */
#ifndef CN_TASK_LOG_H
#define CN_TASK_LOG_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CN_TASK_TAIL 4096            /* bytes of stderr kept for the error */
#define CN_TASK_PROGRESS_LINE 65536  /* a longer progress line is skipped */
#define CN_TASK_PROGRESS_OBJ 16384   /* ... and so is a larger object */

typedef struct cn_task_log {
    int fd;                   /* the log file, -1 when closed */
    int64_t cap;              /* bytes of output kept */
    int64_t kept;             /* bytes of output written (<= cap) */
    int64_t dropped;          /* bytes of output past the cap */
    int64_t size;             /* bytes in the file (output and notices); read
                                 by the log shipper with __atomic */
    char tail[CN_TASK_TAIL];  /* the last bytes of stderr, a ring */
    size_t tail_pos, tail_len;
    int error;                /* a write failed (errno): the log is incomplete */
} cn_task_log;

/* Creates (truncates) the file at path. 0 or -errno. */
int cn_task_log_open(cn_task_log *l, const char *path, int64_t cap);

/* Appends n bytes of the program's output, up to the cap; from stderr they
 * also go to the tail. The first byte past the cap writes a notice. */
void cn_task_log_write(cn_task_log *l, int from_stderr, const void *data, size_t n);

/* Appends a line of the node's own ("[kowloon] ..."), outside the cap. */
void cn_task_log_note(cn_task_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Says what was dropped (when anything was), then closes the file.
 * Idempotent. */
void cn_task_log_close(cn_task_log *l);

/* The last lines (at most max_lines, out's size at most) of stderr,
 * control characters but '\n' shown as '?'. */
void cn_task_log_tail(const cn_task_log *l, int max_lines, char *out, size_t outlen);

/* Progress lines as they arrive. */
typedef struct cn_task_progress {
    char line[CN_TASK_PROGRESS_LINE];
    size_t len;
    int skipping;             /* inside a line too long to keep */
    int64_t off;              /* bytes of the file consumed */
    uint64_t bad;             /* lines that were no JSON object */
} cn_task_progress;

/* Feeds n bytes. Each complete line that is a JSON object (of at most
 * CN_TASK_PROGRESS_OBJ bytes) replaces *latest (the old one is released);
 * other lines are counted in p->bad. Returns 1 when *latest changed. */
int cn_task_progress_feed(cn_task_progress *p, const char *data, size_t n, json_t **latest);

/* Reads what was appended to the file at path since the last call (a
 * regular file only: a symlink or a FIFO put there by the program is not
 * followed or read) and feeds it. Returns 1 when *latest changed. */
int cn_task_progress_poll(cn_task_progress *p, const char *path, json_t **latest);

#endif
