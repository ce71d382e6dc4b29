/* svc_log.h — one-line structured logs on stderr:
 * `2026-12-02T12:00:00.123Z INFO gateway: job dispatched job=... node=...`.
 * Thread-safe; the level is process-wide. */
#ifndef SVC_LOG_H
#define SVC_LOG_H

#include <stdarg.h>

enum { SVC_LOG_DEBUG = 0, SVC_LOG_INFO = 1, SVC_LOG_WARN = 2, SVC_LOG_ERROR = 3 };

/* Sets the component name printed on every line ("gateway", "compute"). */
void svc_log_init(const char *component, int level);
/* Parses "debug|info|warn|error"; returns the level or -1. */
int svc_log_level_parse(const char *s);
int svc_log_enabled(int level);
void svc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The va_list form, for adapters (libmicrohttpd's external logger). */
void svc_logv(int level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#define svc_debug(...) svc_log(SVC_LOG_DEBUG, __VA_ARGS__)
#define svc_info(...) svc_log(SVC_LOG_INFO, __VA_ARGS__)
#define svc_warn(...) svc_log(SVC_LOG_WARN, __VA_ARGS__)
#define svc_error(...) svc_log(SVC_LOG_ERROR, __VA_ARGS__)

#endif
