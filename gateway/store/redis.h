/* redis.h — the gateway's one pool of hiredis connections (a context is not
 * thread-safe, so each command borrows one). The queue (queue.c) and the
 * rate limiter (limits.c) each open a pool of their own from it: the
 * limiter's has short timeouts and backs off after a failure, so that a
 * Redis outage costs API requests a few hundred ms once, not on every
 * request, and never waits behind the scheduler's commands. */
#ifndef GW_REDIS_H
#define GW_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw_redis gw_redis;

typedef struct gw_redis_opts {
    const char *name;     /* for log lines: "queue", "limits" */
    int size;             /* connections; <= 0: 8 */
    int timeout_ms;       /* connect and command timeout; <= 0: 2000 */
    int backoff_ms;       /* after a failure, fail at once for this long; 0: never */
} gw_redis_opts;

/* A pool for url (redis://[[user]:password@]host[:port][/db]; the scheme
 * may be left out). Connections are made on first use, so Redis need not
 * be up yet. NULL with a message in err for a malformed URL, or on ENOMEM. */
gw_redis *gw_redis_open(const char *url, const gw_redis_opts *o, char *err, size_t errlen);
/* Closes every connection. NULL is a no-op. */
void gw_redis_close(gw_redis *r);

/* The pool's figures since it opened, for /metrics. */
typedef struct gw_redis_stats {
    const char *name;         /* the pool's: "queue", "limits" */
    uint64_t errors;          /* commands Redis did not answer, or answered with an error */
    uint64_t waits;           /* borrowers that found every connection lent */
    double wait_seconds;      /* how long they waited, in all */
    int size, busy;           /* connections, and those lent now */
} gw_redis_stats;
void gw_redis_stats_get(gw_redis *r, gw_redis_stats *out);

/* A connection of the caller's own, outside the pool, connected,
 * authenticated and on the URL's database: for SUBSCRIBE, which holds its
 * connection for itself. NULL when Redis cannot be reached (logged at most
 * every 5 s). The caller frees it with redisFree. */
redisContext *gw_redis_connect(gw_redis *r);

/* Runs one command given as argv (lens NULL: NUL-terminated strings).
 * Returns the reply, which the caller frees with freeReplyObject; an error
 * reply (REDIS_REPLY_ERROR) is Redis answering and comes back as it is.
 * NULL when Redis did not answer (cannot connect, timeout, I/O error, or
 * the pool backing off after such a failure): the connection is dropped
 * and made again on a later call. Failures are logged at most every 5 s.
 * Blocks while every connection is lent. */
redisReply *gw_redis_argv(gw_redis *r, int argc, const char **argv, const size_t *lens);

/* A Lua script, sent by its SHA-1 (EVALSHA) so that its text crosses the
 * wire once, not on every call. Define one per script, statically:
 * static gw_redis_script s = {.src = "..."}; */
typedef struct gw_redis_script {
    const char *src;
    char sha1[41];        /* from SCRIPT LOAD on first use; "" until then */
} gw_redis_script;

#define GW_REDIS_EVAL_MAX 1024 /* keys and arguments of one gw_redis_eval */

/* Runs script s with args[0..nkeys) as its KEYS and the rest of
 * args[0..nargs) as its ARGV: EVALSHA, or EVAL when Redis does not know
 * the script (restarted, SCRIPT FLUSH), which teaches it again. The reply
 * is as gw_redis_argv's; NULL too for more than GW_REDIS_EVAL_MAX args. */
redisReply *gw_redis_eval(gw_redis *r, gw_redis_script *s, int nkeys, int nargs,
                          const char *const *args);

#endif
