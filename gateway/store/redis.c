/* redis.c — a pool of hiredis connections (redis.h): a fixed array of
 * contexts, each lent to one caller at a time under a mutex; a context
 * that failed is freed and made again on its next use. */
#include "redis.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_log.h"
#include "svc_url.h"
#include "svc_util.h"

#define LOG_EVERY_MS 5000

/* Guards the sha1 of every gw_redis_script (they may be shared by pools). */
static pthread_mutex_t scripts_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct redis_conn {
    redisContext *c;
    int busy;
} redis_conn;

struct gw_redis {
    char name[16];
    char host[256], user[128], password[256];
    int port, db;
    int size, timeout_ms, backoff_ms;
    pthread_mutex_t mu;          /* guards busy flags and the two times */
    pthread_cond_t cv;
    int64_t down_until_ms;       /* backing off until then */
    int64_t next_log_ms;
    redis_conn *conn;
    _Atomic uint64_t errors, waits, wait_ns;   /* gw_redis_stats */
};

/* url as it may be shown (logs, errors): the userinfo before '@', which
 * holds the password, replaced by "***" (the user's name too: a URL that
 * does not parse may have the password where the user belongs). */
static void url_redacted(const char *url, char *out, size_t outlen)
{
    const char *auth = strstr(url, "://");
    auth = auth ? auth + 3 : url;
    size_t hostpart = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', hostpart);
    if (!at) {
        snprintf(out, outlen, "%.200s", url);
        return;
    }
    snprintf(out, outlen, "%.*s***%.200s", (int)(auth - url), url, at);
}

/* Fills host, port, credentials and db of r from url. */
static int url_read(gw_redis *r, const char *url, char *err, size_t errlen)
{
    svc_url u;
    char shown[300];
    url_redacted(url, shown, sizeof shown);
    if (svc_url_parse(url, "redis", &u) != 0 || strcmp(u.scheme, "redis") != 0) {
        snprintf(err, errlen, "bad Redis URL %s (want redis://host:port/db)", shown);
        return -EINVAL;
    }
    /* hiredis wants an IPv6 literal without its brackets. */
    size_t hl = strlen(u.host);
    if (u.host[0] == '[' && hl > 2 && u.host[hl - 1] == ']')
        snprintf(r->host, sizeof r->host, "%.*s", (int)(hl - 2), u.host + 1);
    else
        snprintf(r->host, sizeof r->host, "%s", u.host);
    r->port = u.port ? u.port : 6379;
    snprintf(r->user, sizeof r->user, "%s", u.user);
    snprintf(r->password, sizeof r->password, "%s", u.password);
    char *end;
    long db = strtol(u.path + 1, &end, 10);
    if (u.path[1] != '\0' && (*end != '\0' || db < 0 || db > 1000000)) {
        snprintf(err, errlen, "bad Redis URL %s: the path must be a database number", shown);
        return -EINVAL;
    }
    r->db = (int)db;
    return 0;
}

gw_redis *gw_redis_open(const char *url, const gw_redis_opts *o, char *err, size_t errlen)
{
    gw_redis *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(r->name, sizeof r->name, "%s", o->name ? o->name : "redis");
    r->size = o->size > 0 ? o->size : 8;
    r->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
    r->backoff_ms = o->backoff_ms > 0 ? o->backoff_ms : 0;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (url_read(r, url ? url : "", err, errlen) != 0) {
        gw_redis_close(r);
        return NULL;
    }
    if ((r->conn = calloc((size_t)r->size, sizeof *r->conn)) == NULL) {
        snprintf(err, errlen, "out of memory");
        gw_redis_close(r);
        return NULL;
    }
    return r;
}

void gw_redis_close(gw_redis *r)
{
    if (r == NULL)
        return;
    for (int i = 0; r->conn != NULL && i < r->size; i++)
        if (r->conn[i].c != NULL)
            redisFree(r->conn[i].c);
    free(r->conn);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* Logs what failed, at most every LOG_EVERY_MS per pool. */
static void log_failure(gw_redis *r, const char *what, const char *why)
{
    int64_t now = svc_now_mono_ms();
    pthread_mutex_lock(&r->mu);
    int due = now >= r->next_log_ms;
    if (due)
        r->next_log_ms = now + LOG_EVERY_MS;
    pthread_mutex_unlock(&r->mu);
    if (due)
        svc_warn("redis (%s): %s at %s:%d failed: %s", r->name, what, r->host, r->port, why);
}

/* A command while connecting (AUTH, SELECT): 0 when Redis said OK. */
static int setup_command(gw_redis *r, redisContext *c, int argc, const char **argv)
{
    redisReply *rep = redisCommandArgv(c, argc, argv, NULL);
    int ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;
    if (!ok)
        log_failure(r, argv[0], rep ? rep->str : c->errstr);
    freeReplyObject(rep);
    return ok ? 0 : -EIO;
}

/* A new connected context (authenticated, on its database), or NULL. */
static redisContext *connect_one(gw_redis *r)
{
    struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
    if (c == NULL || c->err) {
        log_failure(r, "connect", c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    char db[16];
    snprintf(db, sizeof db, "%d", r->db);
    const char *auth[3] = {"AUTH", r->user[0] ? r->user : r->password, r->password};
    const char *select[2] = {"SELECT", db};
    if ((r->password[0] && setup_command(r, c, r->user[0] ? 3 : 2, auth) != 0) ||
        (r->db != 0 && setup_command(r, c, 2, select) != 0)) {
        redisFree(c);
        return NULL;
    }
    return c;
}

redisContext *gw_redis_connect(gw_redis *r)
{
    return connect_one(r);
}

/* Lends a slot; -1 while the pool backs off after a failure. */
static int acquire(gw_redis *r)
{
    int slot = -1;
    struct timespec t0 = {0, 0};
    pthread_mutex_lock(&r->mu);
    while (slot < 0 && svc_now_mono_ms() >= r->down_until_ms) {
        for (int i = 0; i < r->size && slot < 0; i++)
            if (!r->conn[i].busy)
                slot = i;
        if (slot < 0 && t0.tv_sec == 0 && t0.tv_nsec == 0)
            clock_gettime(CLOCK_MONOTONIC, &t0);
        if (slot < 0)
            pthread_cond_wait(&r->cv, &r->mu);
    }
    if (slot >= 0)
        r->conn[slot].busy = 1;
    pthread_mutex_unlock(&r->mu);
    if (t0.tv_sec != 0 || t0.tv_nsec != 0) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        atomic_fetch_add_explicit(&r->waits, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->wait_ns, (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
                                                          (t1.tv_nsec - t0.tv_nsec)),
                                  memory_order_relaxed);
    }
    return slot;
}

static void release(gw_redis *r, int slot, int failed)
{
    pthread_mutex_lock(&r->mu);
    r->conn[slot].busy = 0;
    if (failed && r->backoff_ms > 0) {
        /* Every waiter is to give up, not only the next one. */
        r->down_until_ms = svc_now_mono_ms() + r->backoff_ms;
        pthread_cond_broadcast(&r->cv);
    } else {
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

void gw_redis_stats_get(gw_redis *r, gw_redis_stats *out)
{
    *out = (gw_redis_stats){
        .name = r->name,
        .errors = atomic_load_explicit(&r->errors, memory_order_relaxed),
        .waits = atomic_load_explicit(&r->waits, memory_order_relaxed),
        .wait_seconds = (double)atomic_load_explicit(&r->wait_ns, memory_order_relaxed) / 1e9,
        .size = r->size,
    };
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->size; i++)
        out->busy += r->conn[i].busy;
    pthread_mutex_unlock(&r->mu);
}

redisReply *gw_redis_argv(gw_redis *r, int argc, const char **argv, const size_t *lens)
{
    int slot = acquire(r);
    if (slot < 0) {
        atomic_fetch_add_explicit(&r->errors, 1, memory_order_relaxed);
        return NULL;
    }
    redis_conn *rc = &r->conn[slot];
    int pooled = rc->c != NULL;
    if (rc->c == NULL)
        rc->c = connect_one(r);
    redisReply *rep = rc->c != NULL ? redisCommandArgv(rc->c, argc, argv, lens) : NULL;
    /* A pooled connection that Redis closed while it sat idle (Redis
     * restarted, or dropped idle clients) ends at its next command: the
     * command went to a socket no server reads. Once, on a new connection,
     * instead of failing the call and backing the whole pool off (a submit
     * right after a Redis restart was committed but not queued). A timeout
     * is not retried: Redis may have run the command. */
    if (rep == NULL && pooled && rc->c != NULL && rc->c->err == REDIS_ERR_EOF) {
        redisFree(rc->c);
        if ((rc->c = connect_one(r)) != NULL)
            rep = redisCommandArgv(rc->c, argc, argv, lens);
    }
    if (rep == NULL && rc->c != NULL) {
        log_failure(r, argv[0], rc->c->errstr);
        redisFree(rc->c);
        rc->c = NULL;
    }
    release(r, slot, rep == NULL);
    /* NOSCRIPT is how a script is taught again (gw_redis_eval), not a fault */
    if (rep == NULL || (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) != 0))
        atomic_fetch_add_explicit(&r->errors, 1, memory_order_relaxed);
    return rep;
}

/* The script's SHA-1 in sha (40 hex digits), asking Redis (SCRIPT LOAD)
 * the first time; "" when Redis could not be asked. */
static void script_sha1(gw_redis *r, gw_redis_script *s, char sha[41])
{
    pthread_mutex_lock(&scripts_mu);
    memcpy(sha, s->sha1, 41);
    pthread_mutex_unlock(&scripts_mu);
    if (sha[0])
        return;
    const char *argv[3] = {"SCRIPT", "LOAD", s->src};
    redisReply *rep = gw_redis_argv(r, 3, argv, NULL);
    if (rep && rep->type == REDIS_REPLY_STRING && rep->len == 40) {
        memcpy(sha, rep->str, 40);
        sha[40] = '\0';
        pthread_mutex_lock(&scripts_mu);
        memcpy(s->sha1, sha, 41);
        pthread_mutex_unlock(&scripts_mu);
    }
    freeReplyObject(rep);
}

redisReply *gw_redis_eval(gw_redis *r, gw_redis_script *s, int nkeys, int nargs,
                          const char *const *args)
{
    if (nargs < nkeys || nargs > GW_REDIS_EVAL_MAX)
        return NULL;
    const char *argv[3 + GW_REDIS_EVAL_MAX];
    char sha[41], numkeys[16];
    snprintf(numkeys, sizeof numkeys, "%d", nkeys);
    argv[2] = numkeys;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    script_sha1(r, s, sha);
    if (sha[0]) {
        argv[0] = "EVALSHA";
        argv[1] = sha;
        redisReply *rep = gw_redis_argv(r, 3 + nargs, argv, NULL);
        if (rep == NULL || rep->type != REDIS_REPLY_ERROR || strncmp(rep->str, "NOSCRIPT", 8) != 0)
            return rep;
        freeReplyObject(rep);
    }
    argv[0] = "EVAL";
    argv[1] = s->src;
    return gw_redis_argv(r, 3 + nargs, argv, NULL);
}
