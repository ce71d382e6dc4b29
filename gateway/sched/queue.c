/* queue.c — the ready queue, the delayed set and the scheduler lock in
 * Redis (queue.h), through a connection pool of redis.c. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "gw_task.h"
#include "redis.h"
#include "store.h"
#include "svc_log.h"
#include "svc_util.h"

#define READY_PREFIX "kowloon:ready:"
#define TENANTS_KEY "kowloon:ready-tenants"
#define DELAYED_KEY "kowloon:delayed"
/* The one ready set of versions before fair share. */
#define LEGACY_READY_KEY "kowloon:ready"

struct gw_queue {
    gw_redis *redis;
    pthread_mutex_t hook_mu;       /* guards on_push against its removal */
    void (*on_push)(void *arg);
    void *on_push_arg;
    unsigned long long peeks;      /* turns the first tenant a peek reads (atomic) */
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
    pthread_mutex_init(&q->hook_mu, NULL);
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
    pthread_mutex_destroy(&q->hook_mu);
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

/* A ready entry: "<job_id> <backend> <gpus> <tenant_id> <nodes> <gpu_mem_mb>
 * <timeout_s>[ <image>]" (image: a task's image key in hex, absent for a
 * kernel job), all placement needs (the tenant for its running quota and
 * its share, the rest to fit and to backfill). It lives in its tenant's
 * sorted set (READY_PREFIX + tenant id); TENANTS_KEY lists the tenants that
 * may have entries. Entries of the single set of earlier versions (three
 * or four fields) are read with defaults. */
static void member_format(char *out, size_t len, const gw_queued *j)
{
    int n = snprintf(out, len, "%s %s %d %lld %d %d %d", j->id, j->backend, j->gpus,
                     (long long)j->tenant_id, j->nodes > 0 ? j->nodes : 1, j->gpu_mem_mb, j->timeout_s);
    if (j->image && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, " %x", j->image);
}

static void tenant_text(char *out, size_t len, int64_t tenant_id)
{
    snprintf(out, len, "%lld", (long long)tenant_id);
}

/* ARGV[1]: "NX" or "", ARGV[2]: READY_PREFIX, then (score, member, tenant)
 * triples; each member goes to its tenant's set, and the tenant to
 * KEYS[1]. Returns how many were added. */
static gw_redis_script push_script = {.src =
    "local added = 0 "
    "for i = 3, #ARGV, 3 do "
    "  if ARGV[1] == 'NX' then "
    "    added = added + redis.call('ZADD', ARGV[2] .. ARGV[i + 2], 'NX', ARGV[i], ARGV[i + 1]) "
    "  else added = added + redis.call('ZADD', ARGV[2] .. ARGV[i + 2], ARGV[i], ARGV[i + 1]) end "
    "  redis.call('SADD', KEYS[1], ARGV[i + 2]) "
    "end "
    "return added"};

/* Pushes n ready jobs in one script run per PUSH_BATCH; *added (may be
 * NULL) counts the new entries. */
#define PUSH_BATCH 256
static int push_ready(gw_queue *q, const gw_queued *const *jobs, int n, int nx, int *added)
{
    static __thread char score[PUSH_BATCH][32], member[PUSH_BATCH][128], tenant[PUSH_BATCH][24];
    const char *args[3 + 3 * PUSH_BATCH];
    for (int start = 0; start < n; start += PUSH_BATCH) {
        int argc = 0;
        args[argc++] = TENANTS_KEY;
        args[argc++] = nx ? "NX" : "";
        args[argc++] = READY_PREFIX;
        for (int i = start; i < n && i < start + PUSH_BATCH; i++) {
            const gw_queued *j = jobs[i];
            snprintf(score[i - start], 32, "%.0f", gw_queue_score(j->priority, j->seq));
            member_format(member[i - start], 128, j);
            tenant_text(tenant[i - start], 24, j->tenant_id);
            args[argc++] = score[i - start];
            args[argc++] = member[i - start];
            args[argc++] = tenant[i - start];
        }
        redisReply *r = script_run(q, &push_script, 1, argc, args);
        if (!r)
            return -EIO;
        if (added)
            *added += (int)r->integer;
        freeReplyObject(r);
    }
    return 0;
}

int gw_queue_push(gw_queue *q, const gw_queued *j)
{
    const gw_queued *one[1] = {j};
    return push_ready(q, one, 1, 0, NULL);
}

/* A delayed entry carries its ready score, so promotion needs no lookup:
 * "<ready score> <ready member>". */
static void delayed_format(char *out, size_t len, const gw_queued *j)
{
    char member[128];
    member_format(member, sizeof member, j);
    snprintf(out, len, "%.0f %s", gw_queue_score(j->priority, j->seq), member);
}

static int delayed(const gw_queued *j, int64_t now_ms)
{
    return j->not_before_ms > now_ms;
}

/* One ZADD NX of up to PUSH_BATCH jobs of list into the delayed set. */
static int push_delayed(gw_queue *q, const gw_queued *const *jobs, int n, int *added)
{
    static __thread char score[PUSH_BATCH][32], member[PUSH_BATCH][160];
    const char *argv[3 + 2 * PUSH_BATCH];
    for (int start = 0; start < n; start += PUSH_BATCH) {
        int argc = 0;
        argv[argc++] = "ZADD";
        argv[argc++] = DELAYED_KEY;
        argv[argc++] = "NX";
        for (int i = start; i < n && i < start + PUSH_BATCH; i++) {
            snprintf(score[i - start], 32, "%lld", (long long)jobs[i]->not_before_ms);
            delayed_format(member[i - start], 160, jobs[i]);
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

void gw_queue_on_push(gw_queue *q, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&q->hook_mu);
    q->on_push = fn;
    q->on_push_arg = arg;
    pthread_mutex_unlock(&q->hook_mu);
}

int gw_queue_push_queued(gw_queue *q, const gw_queued *j)
{
    int added = 0, rc;
    if (!delayed(j, svc_now_wall_ms())) {
        rc = gw_queue_push(q, j);
    } else {
        const gw_queued *one[1] = {j};
        rc = push_delayed(q, one, 1, &added);
    }
    /* told even when Redis failed: the scheduler's pass rebuilds the
     * queue from PostgreSQL then */
    pthread_mutex_lock(&q->hook_mu);
    if (q->on_push)
        q->on_push(q->on_push_arg);
    pthread_mutex_unlock(&q->hook_mu);
    return rc;
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
        rc = push_ready(q, ready, nr, 1, added);
        if (!rc)
            rc = push_delayed(q, later, nl, added);
    }
    free(ready);
    free(later);
    return rc;
}

int gw_queue_promote_due(gw_queue *q, int *moved)
{
    /* An entry of an earlier version reads "<id> <backend> <gpus> <score>
     * [<tenant>]" (its first word, a UUID, has a '-'; a score has none). */
    static gw_redis_script script = {.src =
        "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 512) "
        "for _, m in ipairs(due) do "
        "  local score, rm = string.match(m, '^(%d+) (.+)$') "
        "  if not score then "
        "    local id, b, g, sc, t = string.match(m, '^(%S+) (%S+) (%S+) (%S+) ?(%S*)$') "
        "    if id then score = sc; rm = id .. ' ' .. b .. ' ' .. g .. ' ' .. (t ~= '' and t or '0') .. ' 1 0 0' end "
        "  end "
        "  if rm then "
        "    local t = string.match(rm, '^%S+ %S+ %S+ (%S+)') or '0' "
        "    redis.call('ZADD', ARGV[2] .. t, score, rm) "
        "    redis.call('SADD', KEYS[2], t) "
        "  end "
        "  redis.call('ZREM', KEYS[1], m) "
        "end "
        "return #due"};
    char now[32];
    snprintf(now, sizeof(now), "%lld", (long long)svc_now_wall_ms());
    const char *args[4] = {DELAYED_KEY, TENANTS_KEY, now, READY_PREFIX};
    *moved = 0;
    redisReply *r = script_run(q, &script, 2, 4, args);
    if (!r)
        return -EIO;
    *moved = (int)r->integer;
    freeReplyObject(r);
    return 0;
}

/* The word of at most max - 1 bytes at *p (after spaces) into out, *p
 * past it; 0, or -1 when there is none or it is longer. */
static int ready_word(const char **p, char *out, size_t max)
{
    while (**p == ' ')
        (*p)++;
    size_t w = strcspn(*p, " ");
    if (w == 0 || w >= max)
        return -1;
    memcpy(out, *p, w);
    out[w] = '\0';
    *p += w;
    return 0;
}

/* The integer (base 10, or 16) at *p into *v, *p past it; 0, or -1 when
 * there is none. */
static int ready_num(const char **p, int base, long long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(*p, &end, base);
    if (end == *p || errno)
        return -1;
    *v = x;
    *p = end;
    return 0;
}

/* Fills e from member m ("<job> <backend> <gpus> [<tenant> <nodes>
 * <gpu MiB> <timeout_s> <image, hex>]": entries of earlier versions stop
 * after gpus, or after any field); 0, or -1 when m is not an entry. By
 * hand, not sscanf: a pass reads thousands of entries, and sscanf was
 * most of the scheduler's parsing. */
static int ready_parse(gw_ready *e, const char *m)
{
    size_t len = strlen(m);
    if (len >= sizeof(e->member))
        len = sizeof(e->member) - 1;
    memcpy(e->member, m, len);
    e->member[len] = '\0';
    e->tenant_id = 0;
    e->nodes = 1;
    e->gpu_mem_mb = e->timeout_s = 0;
    e->image = 0;
    const char *p = m;
    long long v;
    if (ready_word(&p, e->job_id, sizeof(e->job_id)) != 0 ||
        ready_word(&p, e->backend, sizeof(e->backend)) != 0 || ready_num(&p, 10, &v) != 0)
        return -1;
    e->gpus = (int)v;
    if (ready_num(&p, 10, &v) == 0) {
        e->tenant_id = v;
        int *more[3] = {&e->nodes, &e->gpu_mem_mb, &e->timeout_s};
        int k = 0;
        for (; k < 3 && ready_num(&p, 10, &v) == 0; k++)
            *more[k] = (int)v;
        if (k == 3 && ready_num(&p, 16, &v) == 0)
            e->image = (uint32_t)v;
    }
    if (e->nodes < 1)
        e->nodes = 1;
    return 0;
}

int gw_queue_peek(gw_queue *q, int per_tenant, gw_ready *out, int max, int *n)
{
    /* Tenants whose set is found empty leave TENANTS_KEY (in the script,
     * so that no push between the look and the removal is lost). Each
     * tenant gets at most its part of max (max / tenants, at least 1):
     * per_tenant entries of each until max was reached left the tenants
     * after the first max / per_tenant unseen, in the order SMEMBERS gives
     * (the deep scan's 512 a tenant saw 8 of 50 tenants, which got 1.42
     * times their share in the scale bench). Where there are more tenants
     * than max, the start turns with ARGV[4]. */
    static gw_redis_script script = {.src =
        "local out = {} "
        "local left = tonumber(ARGV[3]) "
        "local ts = redis.call('SMEMBERS', KEYS[1]) "
        "local nt = #ts "
        "if nt == 0 then return out end "
        "local per = math.min(tonumber(ARGV[2]), math.max(1, math.floor(left / nt))) "
        "local first = tonumber(ARGV[4]) % nt "
        "for k = 0, nt - 1 do "
        "  if left <= 0 then break end "
        "  local t = ts[(first + k) % nt + 1] "
        "  local ms = redis.call('ZRANGE', ARGV[1] .. t, 0, math.min(per, left) - 1, 'WITHSCORES') "
        "  if #ms == 0 then redis.call('SREM', KEYS[1], t) end "
        "  for i = 1, #ms do out[#out + 1] = ms[i] end "
        "  left = left - #ms / 2 "
        "end "
        "return out"};
    char per[16], all[16], turn[32];
    snprintf(per, sizeof per, "%d", per_tenant);
    snprintf(all, sizeof all, "%d", max);
    /* max tenants further on each call (where max is less than them); kept
     * below 2^53, the integers Lua's numbers hold exactly */
    snprintf(turn, sizeof turn, "%llu",
             (unsigned long long)__atomic_fetch_add(&q->peeks, 1, __ATOMIC_RELAXED) *
                 (unsigned long long)(max > 0 ? max : 1) % 1000000007ULL);
    const char *args[5] = {TENANTS_KEY, READY_PREFIX, per, all, turn};
    *n = 0;
    redisReply *r = script_run(q, &script, 1, 5, args);
    if (!r)
        return -EIO;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements && *n < max; i += 2) {
        gw_ready *e = &out[*n];
        if (ready_parse(e, r->element[i]->str) != 0) {
            svc_warn("redis: ignoring malformed ready-queue entry '%s'", r->element[i]->str);
            continue;
        }
        e->score = strtod(r->element[i + 1]->str, NULL);
        (*n)++;
    }
    freeReplyObject(r);
    return 0;
}

int gw_queue_rank(gw_queue *q, const gw_queued *j, int64_t *ahead)
{
    char member[128], key[64];
    member_format(member, sizeof(member), j);
    snprintf(key, sizeof key, READY_PREFIX "%lld", (long long)j->tenant_id);
    const char *argv[3] = {"ZRANK", key, member};
    redisReply *r = command(q, 3, argv, NULL);
    if (!r)
        return -EIO;
    int rc = r->type == REDIS_REPLY_INTEGER ? 0 : -ENOENT;
    if (rc == 0)
        *ahead = r->integer;
    freeReplyObject(r);
    return rc;
}

int gw_queue_take_many(gw_queue *q, const char *const *members, int n, int *taken)
{
    /* Each member leaves its tenant's set (the tenant is its 4th word). */
    static gw_redis_script script = {.src =
        "local r = {} "
        "for i = 2, #ARGV do "
        "  local t = string.match(ARGV[i], '^%S+ %S+ %S+ (%S+)') or '0' "
        "  r[i - 1] = redis.call('ZREM', ARGV[1] .. t, ARGV[i]) "
        "end "
        "return r"};
    enum { MAX = 256 };
    const char *args[1 + MAX];
    for (int start = 0; start < n; start += MAX) {
        int k = n - start < MAX ? n - start : MAX, argc = 0;
        args[argc++] = READY_PREFIX;
        for (int i = 0; i < k; i++)
            args[argc++] = members[start + i];
        redisReply *r = script_run(q, &script, 0, argc, args);
        if (!r)
            return -EIO;
        for (int i = 0; i < k; i++)
            taken[start + i] = r->type == REDIS_REPLY_ARRAY && (size_t)i < r->elements &&
                               r->element[i]->integer == 1;
        freeReplyObject(r);
    }
    return 0;
}

int gw_queue_take(gw_queue *q, const char *member)
{
    int taken = 0;
    if (gw_queue_take_many(q, &member, 1, &taken) != 0)
        return -EIO;
    return taken;
}

int gw_queue_drop_job(gw_queue *q, const gw_queued *j)
{
    char member[128];
    const char *m = member;
    int taken;
    member_format(member, sizeof(member), j);
    return gw_queue_take_many(q, &m, 1, &taken);
}

int gw_queue_forget_legacy(gw_queue *q)
{
    const char *argv[2] = {"DEL", LEGACY_READY_KEY};
    redisReply *r = command(q, 2, argv, NULL);
    freeReplyObject(r);
    return r ? 0 : -EIO;
}

void gw_queued_from_job(const json_t *job, int64_t tenant_id, gw_queued *q)
{
    const json_t *res = json_object_get(job, "resources");
    memset(q, 0, sizeof(*q));
    snprintf(q->id, sizeof q->id, "%s", json_string_value(json_object_get(job, "id")) ?: "");
    snprintf(q->backend, sizeof q->backend, "%s", json_string_value(json_object_get(res, "backend")) ?: "any");
    q->gpus = (int)json_integer_value(json_object_get(res, "gpus"));
    q->nodes = (int)json_integer_value(json_object_get(res, "nodes"));
    q->gpu_mem_mb = (int)(json_number_value(json_object_get(res, "gpu_memory_gb")) * 1024 + 0.5);
    q->timeout_s = (int)json_integer_value(json_object_get(job, "timeout_s"));
    q->tenant_id = tenant_id;
    const char *image = json_string_value(json_object_get(json_object_get(job, "task"), "image"));
    q->image = image ? gw_task_image_key(image) : 0;
    if (q->nodes < 1)
        q->nodes = 1;
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
