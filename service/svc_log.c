/* svc_log.c — one line per event on stderr, written with a single fprintf
 * under a mutex so lines from concurrent threads never interleave.
 * Newlines inside a message are replaced so that a line stays a line. */
#include "svc_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_util.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int log_level = SVC_LOG_INFO;
static char log_component[64] = "kowloon";

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void svc_log_init(const char *component, int level)
{
    pthread_mutex_lock(&log_mu);
    if (component != NULL)
        snprintf(log_component, sizeof log_component, "%s", component);
    pthread_mutex_unlock(&log_mu);
    if (level >= SVC_LOG_DEBUG && level <= SVC_LOG_ERROR)
        atomic_store(&log_level, level);
}

int svc_log_level_parse(const char *s)
{
    if (s == NULL)
        return -1;
    for (int i = 0; i <= SVC_LOG_ERROR; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return SVC_LOG_WARN;
    return -1;
}

int svc_log_enabled(int level)
{
    return level >= atomic_load(&log_level);
}

void svc_logv(int level, const char *fmt, va_list ap)
{
    if (!svc_log_enabled(level))
        return;
    if (level < SVC_LOG_DEBUG || level > SVC_LOG_ERROR)
        level = SVC_LOG_ERROR;

    /* Format first, outside the lock: most lines fit the stack buffer, a
     * long one (a dumped document in a debug line) goes to the heap. */
    char stack[1024];
    char *msg = stack;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(stack, sizeof stack, fmt, ap);
    if (n >= (int)sizeof stack) {
        char *heap = malloc((size_t)n + 1);
        if (heap != NULL) {
            vsnprintf(heap, (size_t)n + 1, fmt, ap2);
            msg = heap;
        }
    }
    va_end(ap2);
    if (n < 0)
        snprintf(stack, sizeof stack, "(unformattable log message: %s)", fmt);

    size_t len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
        msg[--len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (msg[i] == '\n' || msg[i] == '\r')
            msg[i] = ' ';

    char ts[32];
    svc_time_format(svc_now_wall_ms(), ts, sizeof ts);

    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s %s %s: %s\n", ts, level_names[level], log_component, msg);
    pthread_mutex_unlock(&log_mu);

    if (msg != stack)
        free(msg);
}

void svc_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    svc_logv(level, fmt, ap);
    va_end(ap);
}
