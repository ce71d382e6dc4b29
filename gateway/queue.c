/* queue.c — the ready queue, the delayed set and the scheduler lock in
 * Redis (queue.h), through a connection pool of redis.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "redis.h"
#include "store.h"
#include "svc_log.h"
#include "svc_util.h"

#define READY_KEY "kowloon:ready"
#define DELAYED_KEY "kowloon:delayed"

struct gw_queue {
    gw_redis *redis;
};

struct gw_redis *gw_queue_redis(gw_queue *q)
{
    return q->redis;
}

gw_queue *gw_queue_open(const char *url, int pool_size)
{
    char err[256];
    gw_queue *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    gw_redis_opts o = {.name = "queue", .size = pool_size, .timeout_ms = 2000};
    if (!(q->redis = gw_redis_open(url, &o, err, sizeof(err)))) {
        svc_error("redis: %s", err);
        free(q);
        return NULL;
    }
    return q;
}

void gw_queue_close(gw_queue *q)
{
    if (!q)
        return;
    gw_redis_close(q->redis);
    free(q);
}

/* Runs one command given as argv; returns the reply (caller frees) or NULL
 * (the pool logged why). Error replies count as failures. */
static redisReply *command(gw_queue *q, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = gw_redis_argv(q->redis, argc, argv, lens);
    if (r && r->type == REDIS_REPLY_ERROR) {
        svc_warn("redis: %s: %s", argv[0], r->str);
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* Runs a Lua script (gw_redis_eval) with command's handling of errors. */
static redisReply *script_run(gw_queue *q, gw_redis_script *s, int nkeys, int nargs,
                              const char *const *args)
{
    redisReply *r = gw_redis_eval(q->redis, s, nkeys, nargs, args);
    if (r && r->type == REDIS_REPLY_ERROR) {
        svc_warn("redis: script: %s", r->str);
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

int gw_queue_ping(gw_queue *q)
{
    const char *argv[1] = {"PING"};
    redisReply *r = command(q, 1, argv, NULL);
    freeReplyObject(r);
    return r ? 0 : -EIO;
}

double gw_queue_score(int priority, int64_t seq)
{
    /* 2^40 jobs per priority band keeps every score an exact double. */
    return (double)(9 - priority) * 1099511627776.0 + (double)seq;
}

/* A ready entry: "<job_id> <backend> <gpus> <tenant_id>", all placement
 * needs (the tenant for its running quota). Entries written before the
 * tenant was added have three fields and are still read. */
static void member_format(char *out, size_t len, const char *job_id, const char *backend, int gpus,
                          int64_t tenant_id)
{
    snprintf(out, len, "%s %s %d %lld", job_id, backend, gpus, (long long)tenant_id);
}

int gw_queue_push(gw_queue *q, const char *job_id, int priority, int64_t seq,
                  const char *backend, int gpus, int64_t tenant_id)
{
    char score[32], member[80];
    snprintf(score, sizeof(score), "%.0f", gw_queue_score(priority, seq));
    member_format(member, sizeof(member), job_id, backend, gpus, tenant_id);
    const char *argv[4] = {"ZADD", READY_KEY, score, member};
    redisReply *r = command(q, 4, argv, NULL);
    freeReplyObject(r);
    return r ? 0 : -EIO;
}

/* A delayed entry carries its ready score, so promotion needs no lookup:
 * "<job_id> <backend> <gpus> <ready score> <tenant_id>". */
static void delayed_format(char *out, size_t len, const gw_queued *j)
{
    snprintf(out, len, "%s %s %d %.0f %lld", j->id, j->backend, j->gpus,
             gw_queue_score(j->priority, j->seq), (long long)j->tenant_id);
}

static int delayed(const gw_queued *j, int64_t now_ms)
{
    return j->not_before_ms > now_ms;
}

int gw_queue_push_queued(gw_queue *q, const gw_queued *j)
{
    if (!delayed(j, svc_now_wall_ms()))
        return gw_queue_push(q, j->id, j->priority, j->seq, j->backend, j->gpus, j->tenant_id);
    char score[32], member[112];
    snprintf(score, sizeof(score), "%lld", (long long)j->not_before_ms);
    delayed_format(member, sizeof(member), j);
    const char *argv[4] = {"ZADD", DELAYED_KEY, score, member};
    redisReply *r = command(q, 4, argv, NULL);
    freeReplyObject(r);
    return r ? 0 : -EIO;
}

/* One ZADD NX of up to BATCH jobs of list into key (ready or delayed). */
static int push_batch(gw_queue *q, const char *key, const gw_queued *const *jobs, int n, int *added)
{
    enum { BATCH = 256 };
    static __thread char score[BATCH][32], member[BATCH][112];
    const char *argv[3 + 2 * BATCH];
    int is_ready = strcmp(key, READY_KEY) == 0;
    for (int start = 0; start < n; start += BATCH) {
        int argc = 0;
        argv[argc++] = "ZADD";
        argv[argc++] = key;
        argv[argc++] = "NX";
        for (int i = start; i < n && i < start + BATCH; i++) {
            const gw_queued *j = jobs[i];
            if (is_ready) {
                snprintf(score[i - start], 32, "%.0f", gw_queue_score(j->priority, j->seq));
                member_format(member[i - start], 112, j->id, j->backend, j->gpus, j->tenant_id);
            } else {
                snprintf(score[i - start], 32, "%lld", (long long)j->not_before_ms);
                delayed_format(member[i - start], 112, j);
            }
            argv[argc++] = score[i - start];
            argv[argc++] = member[i - start];
        }
        redisReply *r = command(q, argc, argv, NULL);
        if (!r)
            return -EIO;
        *added += (int)r->integer;
        freeReplyObject(r);
    }
    return 0;
}

int gw_queue_push_missing(gw_queue *q, const gw_queued *list, int n, int *added)
{
    *added = 0;
    const gw_queued **ready = malloc(sizeof(*ready) * (size_t)(n ? n : 1));
    const gw_queued **later = malloc(sizeof(*later) * (size_t)(n ? n : 1));
    int nr = 0, nl = 0, rc = -ENOMEM;
    int64_t now = svc_now_wall_ms();
    if (ready && later) {
        for (int i = 0; i < n; i++) {
            if (delayed(&list[i], now))
                later[nl++] = &list[i];
            else
                ready[nr++] = &list[i];
        }
        rc = push_batch(q, READY_KEY, ready, nr, added);
        if (!rc)
            rc = push_batch(q, DELAYED_KEY, later, nl, added);
    }
    free(ready);
    free(later);
    return rc;
}

int gw_queue_promote_due(gw_queue *q, int *moved)
{
    static gw_redis_script script = {.src =
        "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 512) "
        "for _, m in ipairs(due) do "
        "  local id, b, g, score, t = string.match(m, '^(%S+) (%S+) (%S+) (%S+) (%S+)$') "
        "  if not id then id, b, g, score = string.match(m, '^(%S+) (%S+) (%S+) (%S+)$') end "
        "  if id then redis.call('ZADD', KEYS[2], score, id .. ' ' .. b .. ' ' .. g"
        "                       .. (t and (' ' .. t) or '')) end "
        "  redis.call('ZREM', KEYS[1], m) "
        "end "
        "return #due"};
    char now[32];
    snprintf(now, sizeof(now), "%lld", (long long)svc_now_wall_ms());
    const char *args[3] = {DELAYED_KEY, READY_KEY, now};
    *moved = 0;
    redisReply *r = script_run(q, &script, 2, 3, args);
    if (!r)
        return -EIO;
    *moved = (int)r->integer;
    freeReplyObject(r);
    return 0;
}

int gw_queue_peek(gw_queue *q, int offset, gw_ready *out, int max, int *n)
{
    char start[16], stop[16];
    snprintf(start, sizeof(start), "%d", offset);
    snprintf(stop, sizeof(stop), "%d", offset + max - 1);
    const char *argv[4] = {"ZRANGE", READY_KEY, start, stop};
    *n = 0;
    redisReply *r = command(q, 4, argv, NULL);
    if (!r)
        return -EIO;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && *n < max; i++) {
        gw_ready *e = &out[*n];
        const char *m = r->element[i]->str;
        snprintf(e->member, sizeof(e->member), "%s", m);
        long long tenant = 0;
        if (sscanf(m, "%36s %7s %d %lld", e->job_id, e->backend, &e->gpus, &tenant) >= 3) {
            e->tenant_id = tenant;
            (*n)++;
        }
        else
            svc_warn("redis: ignoring malformed ready-queue entry '%s'", m);
    }
    freeReplyObject(r);
    return 0;
}

int gw_queue_rank(gw_queue *q, const char *job_id, const char *backend, int gpus,
                  int64_t tenant_id, int64_t *ahead)
{
    char member[80];
    member_format(member, sizeof(member), job_id, backend, gpus, tenant_id);
    const char *argv[3] = {"ZRANK", READY_KEY, member};
    redisReply *r = command(q, 3, argv, NULL);
    if (!r)
        return -EIO;
    int rc = r->type == REDIS_REPLY_INTEGER ? 0 : -ENOENT;
    if (rc == 0)
        *ahead = r->integer;
    freeReplyObject(r);
    return rc;
}

int gw_queue_take(gw_queue *q, const char *member)
{
    const char *argv[3] = {"ZREM", READY_KEY, member};
    redisReply *r = command(q, 3, argv, NULL);
    if (!r)
        return -EIO;
    int removed = r->integer == 1;
    freeReplyObject(r);
    return removed;
}

int gw_queue_drop_job(gw_queue *q, const char *job_id, const char *backend, int gpus,
                      int64_t tenant_id)
{
    char member[80], old[80];
    member_format(member, sizeof(member), job_id, backend, gpus, tenant_id);
    snprintf(old, sizeof(old), "%s %s %d", job_id, backend, gpus);   /* written before the tenant */
    const char *argv[4] = {"ZREM", READY_KEY, member, old};
    redisReply *r = command(q, 4, argv, NULL);
    freeReplyObject(r);
    return r ? 0 : -EIO;
}

int gw_queue_lock(gw_queue *q, const char *name, const char *owner, int ttl_ms)
{
    static gw_redis_script script = {.src =
        "local v = redis.call('GET', KEYS[1]) "
        "if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end "
        "if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end "
        "return 0"};
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%d", ttl_ms);
    const char *args[3] = {name, owner, ttl};
    redisReply *r = script_run(q, &script, 1, 3, args);
    if (!r)
        return -EIO;
    int held = r->integer == 1;
    freeReplyObject(r);
    return held;
}

int gw_queue_take_many(gw_queue *q, const char *const *members, int n, int *taken)
{
    static const char script[] =
        "local r = {} "
        "for i, m in ipairs(ARGV) do r[i] = redis.call('ZREM', KEYS[1], m) end "
        "return r";
    enum { MAX = 256 };
    const char *argv[4 + MAX];
    for (int start = 0; start < n; start += MAX) {
        int k = n - start < MAX ? n - start : MAX, argc = 0;
        argv[argc++] = "EVAL";
        argv[argc++] = script;
        argv[argc++] = "1";
        argv[argc++] = READY_KEY;
        for (int i = 0; i < k; i++)
            argv[argc++] = members[start + i];
        redisReply *r = command(q, argc, argv, NULL);
        if (!r)
            return -EIO;
        for (int i = 0; i < k; i++)
            taken[start + i] = r->type == REDIS_REPLY_ARRAY && (size_t)i < r->elements &&
                               r->element[i]->integer == 1;
        freeReplyObject(r);
    }
    return 0;
}
