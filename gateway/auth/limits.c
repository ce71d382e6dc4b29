/* limits.c — rate limits (a token bucket per API key, kept in Redis and
 * updated by one Lua script so every gateway shares it: one round trip per
 * request, none when the key's rate is unlimited) and the queued and
 * running quotas of tenants (indexed counts in PostgreSQL; the queued count
 * is kept here a second between counts, see gw_limits_admit_submit). A
 * Redis outage lets requests through; a PostgreSQL outage fails the submit
 * anyway. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "gw_limits.h"
#include "redis.h"
#include "reply.h"
#include "svc_log.h"
#include "svc_util.h"

#define LIMITS_POOL 4
#define REDIS_TIMEOUT_MS 300
#define REDIS_RETRY_MS 1000      /* after a failure, skip Redis this long */
#define WARN_EVERY_MS 5000
#define BLOCKED_MEMO 256
#define BLOCKED_MEMO_MS 250
#define QUEUED_SLOTS 1024        /* tenants whose queued count is kept */
#define QUEUED_WAYS 8
#define QUEUED_TTL_MS 1000       /* a count is trusted this long */

/* A tenant's queued jobs as last counted, plus the submits this gateway
 * admitted since. */
typedef struct queued_slot {
    int64_t tenant_id;           /* 0: empty */
    int64_t counted, admitted;
    int64_t counted_ms;          /* when the count was asked (monotonic) */
} queued_slot;

struct gw_limits {
    gw_redis *redis;             /* short timeouts; backs off after a failure */
    gw_rate def[2];              /* the gateway's buckets, by GW_RATE_* */
    int max_queued, max_running;

    pthread_mutex_t mu;          /* guards next_warn_ms and queued */
    int64_t next_warn_ms;
    queued_slot queued[QUEUED_SLOTS];

    struct { char job_id[37]; int64_t until_ms; } blocked[BLOCKED_MEMO];
};

/* The bucket of one key, a hash {tokens, ts}: refilled by the time passed
 * since ts (Redis's clock, so gateways on different hosts agree), then one
 * token taken if there is one. Returns {allowed, ms until the next token}.
 * The key expires once a full bucket would have refilled. */
static gw_redis_script bucket_lua = {.src =
    "local rate = tonumber(ARGV[1]) / 1000 "
    "local burst = tonumber(ARGV[2]) "
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts') "
    "local tokens, ts = tonumber(b[1]), tonumber(b[2]) "
    "if not tokens or not ts then tokens, ts = burst, now end "
    "if now > ts then tokens = tokens + (now - ts) * rate ts = now end "
    "if tokens > burst then tokens = burst end "
    "local allowed = 0 "
    "if tokens >= 1 then tokens = tokens - 1 allowed = 1 end "
    "local wait = 0 "
    "if tokens < 1 then wait = math.ceil((1 - tokens) / rate) end "
    "redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'ts', ts) "
    "redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate) + 1000) "
    "return {allowed, wait}"};

gw_rate gw_rate_resolve(int def_rps, int def_burst, int tenant_rps, int tenant_burst)
{
    gw_rate r = {tenant_rps >= 0 ? tenant_rps : def_rps, tenant_burst >= 0 ? tenant_burst : def_burst};
    if (r.rps < 0)
        r.rps = 0;
    if (r.burst <= 0)
        r.burst = r.rps > 0 ? r.rps : 1;
    return r;
}

int gw_tenant_name_valid(const char *name)
{
    if (name == NULL)
        return 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    size_t chars = svc_utf8_chars(name);
    return chars >= 1 && chars <= 128;
}

const char *const gw_limit_names[GW_LIM__COUNT] = {"rate_rps", "rate_burst", "max_queued",
                                                    "max_running"};

/* A tenant body's task settings: task_egress (-1: not given) and
 * task_images (null: back to the gateway's --task-images). */
static int tenant_task_parse(const json_t *body, gw_tenant_body *out, char field[32],
                             char *msg, size_t msglen)
{
    const json_t *ti = json_object_get(body, "task_images"), *te = json_object_get(body, "task_egress");
    out->task_egress = te ? json_is_true(te) : -1;
    if (te && !json_is_boolean(te)) {
        snprintf(field, 32, "task_egress");
        snprintf(msg, msglen, "task_egress must be true or false");
        return -1;
    }
    if (ti) {
        size_t i;
        json_t *p;
        int ok = json_is_null(ti) || (json_is_array(ti) && json_array_size(ti) <= 64);
        json_array_foreach(ok && !json_is_null(ti) ? ti : NULL, i, p) {
            const char *pat = json_string_value(p);
            ok &= pat && *pat && json_string_length(p) <= 255 && !strpbrk(pat, ", ");
        }
        if (!ok) {
            snprintf(field, 32, "task_images");
            snprintf(msg, msglen, "task_images must be null (the gateway's --task-images) or a "
                     "list of at most 64 image patterns (fnmatch, 1-255 characters, no comma or "
                     "space)");
            return -1;
        }
        out->task_images_set = 1;
        if (!json_is_null(ti) && !(out->task_images_json = json_dumps(ti, JSON_COMPACT))) {
            snprintf(field, 32, "task_images");
            snprintf(msg, msglen, "out of memory");
            return -1;
        }
    }
    return 0;
}

int gw_tenant_body_parse(const json_t *body, gw_tenant_body *out, char field[32],
                         char *msg, size_t msglen)
{
    static const long max[GW_LIM__COUNT] = {1000000, 1000000, 100000000, 100000000};
    memset(out, 0, sizeof(*out));
    field[0] = '\0';
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v) {
        int ok = strcmp(k, "name") == 0 || strcmp(k, "weight") == 0 ||
                 strcmp(k, "task_images") == 0 || strcmp(k, "task_egress") == 0;
        for (int i = 0; i < GW_LIM__COUNT && !ok; i++)
            ok = strcmp(k, gw_limit_names[i]) == 0;
        if (!ok) {
            snprintf(field, 32, "%.31s", k);
            snprintf(msg, msglen, "unknown field \"%.64s\"", k);
            return -1;
        }
    }
    const char *name = json_string_value(json_object_get(body, "name"));
    if (!gw_tenant_name_valid(name)) {
        snprintf(field, 32, "name");
        snprintf(msg, msglen, "name must be a string of 1-128 characters without control characters");
        return -1;
    }
    out->name = name;
    const json_t *w = json_object_get(body, "weight");
    if (w && (!json_is_number(w) || json_number_value(w) < 0.001 || json_number_value(w) > 1000000)) {
        snprintf(field, 32, "weight");
        snprintf(msg, msglen, "weight must be a number from 0.001 to 1000000 (the default is 1)");
        return -1;
    }
    out->weight = w ? json_number_value(w) : 0;
    if (tenant_task_parse(body, out, field, msg, msglen) != 0)
        return -1;
    for (int i = 0; i < GW_LIM__COUNT; i++) {
        const json_t *l = json_object_get(body, gw_limit_names[i]);
        out->lim[i].set = l != NULL;
        out->lim[i].value = -1;
        if (!l || json_is_null(l))
            continue;
        if (!json_is_integer(l) || json_integer_value(l) < 0 || json_integer_value(l) > max[i]) {
            snprintf(field, 32, "%s", gw_limit_names[i]);
            snprintf(msg, msglen, "%s must be null or an integer from 0 to %ld", gw_limit_names[i], max[i]);
            return -1;
        }
        out->lim[i].value = (int)json_integer_value(l);
    }
    return 0;
}

struct gw_redis *gw_limits_redis(gw_limits *l)
{
    return l->redis;
}

gw_limits *gw_limits_open(const gw_config *cfg)
{
    gw_limits *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    char err[256];
    gw_redis_opts o = {.name = "limits", .size = LIMITS_POOL, .timeout_ms = REDIS_TIMEOUT_MS,
                       .backoff_ms = REDIS_RETRY_MS};
    if (!(l->redis = gw_redis_open(cfg->redis_url, &o, err, sizeof(err)))) {
        svc_error("limits: %s", err);
        free(l);
        return NULL;
    }
    l->def[GW_RATE_WRITE] = (gw_rate){cfg->rate_limit_rps, cfg->rate_limit_burst};
    l->def[GW_RATE_READ] = (gw_rate){cfg->read_rate_limit_rps, cfg->read_rate_limit_burst};
    l->max_queued = cfg->max_queued_per_tenant;
    l->max_running = cfg->max_running_per_tenant;
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void gw_limits_close(gw_limits *l)
{
    if (!l)
        return;
    gw_redis_close(l->redis);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* Writes keep the key's bucket name from before reads were split off, so
 * a rolling upgrade keeps its write buckets. */
void gw_rate_key(char *out, size_t len, int64_t key_id, int bucket)
{
    snprintf(out, len, bucket == GW_RATE_WRITE ? "kowloon:rate:%lld" : "kowloon:rate:read:%lld",
             (long long)key_id);
}

int gw_limits_take(gw_limits *l, int64_t key_id, int bucket, const gw_rate *r, int *allowed,
                   int64_t *wait_ms)
{
    *allowed = 1;
    *wait_ms = 0;
    char key[48], rps[16], burst[16];
    gw_rate_key(key, sizeof key, key_id, bucket);
    snprintf(rps, sizeof(rps), "%d", r->rps);
    snprintf(burst, sizeof(burst), "%d", r->burst);
    const char *args[3] = {key, rps, burst};
    redisReply *rep = gw_redis_eval(l->redis, &bucket_lua, 1, 3, args);
    int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
             rep->element[0]->type == REDIS_REPLY_INTEGER &&
             rep->element[1]->type == REDIS_REPLY_INTEGER;
    if (ok) {
        *allowed = rep->element[0]->integer == 1;
        *wait_ms = rep->element[1]->integer;
    } else if (rep && rep->type == REDIS_REPLY_ERROR) {
        svc_warn("limits: rate script failed: %s", rep->str);
    }
    freeReplyObject(rep);
    return ok ? 0 : -EIO;
}

/* Logs a fail-open at most every WARN_EVERY_MS. */
static void warn_fail_open(gw_limits *l)
{
    int64_t now = svc_now_mono_ms();
    pthread_mutex_lock(&l->mu);
    int due = now >= l->next_warn_ms;
    if (due)
        l->next_warn_ms = now + WARN_EVERY_MS;
    pthread_mutex_unlock(&l->mu);
    if (due)
        svc_warn("limits: Redis cannot be asked; rate limits are not enforced until it answers");
}

int gw_limits_rate(svc_req *req, const gw_caller *who, int bucket)
{
    gw_app *app = svc_req_app(req);
    gw_limits *l = app->limits;
    if (!l)
        return 0;
    const gw_rate *def = &l->def[bucket == GW_RATE_WRITE];
    gw_rate r = gw_rate_resolve(def->rps, def->burst, who->rate_rps, who->rate_burst);
    if (r.rps == 0)
        return 0;
    int allowed;
    int64_t wait_ms;
    if (gw_limits_take(l, who->key_id, bucket, &r, &allowed, &wait_ms) != 0) {
        warn_fail_open(l);
        return 0;
    }
    if (allowed)
        return 0;
    int after = gw_retry_after_s(wait_ms);
    gw_reply_too_many(req, "rate_limited", after,
                      "this API key is over its rate limit for %s (%d requests/s, burst %d); retry "
                      "after %d s", bucket == GW_RATE_WRITE ? "writes" : "reads", r.rps, r.burst, after);
    return -1;
}

/* The slot of tenant_id; with take, one for it (an empty one, else the
 * one counted longest ago among its ways) when it has none. Called with
 * l->mu held. */
static queued_slot *queued_slot_of(gw_limits *l, int64_t tenant_id, int take)
{
    size_t set = (size_t)((uint64_t)tenant_id * 0x9E3779B97F4A7C15ull >> 40) % (QUEUED_SLOTS / QUEUED_WAYS);
    queued_slot *ways = &l->queued[set * QUEUED_WAYS], *victim = NULL;
    for (int i = 0; i < QUEUED_WAYS; i++) {
        if (ways[i].tenant_id == tenant_id)
            return &ways[i];
        if (victim == NULL || ways[i].tenant_id == 0 ||
            (victim->tenant_id != 0 && ways[i].counted_ms < victim->counted_ms))
            victim = &ways[i];
    }
    if (!take)
        return NULL;
    *victim = (queued_slot){.tenant_id = tenant_id};
    return victim;
}

/* Admits one more submit of tenant_id on what this gateway knows without
 * asking: 1 when the count is younger than QUEUED_TTL_MS and the count plus
 * the submits admitted since stay under limit (the submit is then counted
 * as admitted), 0 when PostgreSQL must be asked. */
static int queued_admit_cached(gw_limits *l, int64_t tenant_id, int limit, int64_t now)
{
    pthread_mutex_lock(&l->mu);
    queued_slot *s = queued_slot_of(l, tenant_id, 0);
    int ok = s != NULL && now - s->counted_ms < QUEUED_TTL_MS && s->counted + s->admitted < limit;
    if (ok)
        s->admitted++;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

/* Keeps a fresh count asked at asked_ms; counts the submit that asked for
 * it as admitted when there is room for it. Returns whether there is. */
static int queued_recount(gw_limits *l, int64_t tenant_id, int limit, int64_t queued, int64_t asked_ms)
{
    int ok = queued < limit;
    pthread_mutex_lock(&l->mu);
    queued_slot *s = queued_slot_of(l, tenant_id, 1);
    if (asked_ms >= s->counted_ms) {
        s->counted = queued;
        s->admitted = ok;
        s->counted_ms = asked_ms;
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

/* The queued quota costs no round trip on most submits. A tenant's count
 * comes from PostgreSQL at most once a second per gateway while it stays
 * under quota; in between, this gateway adds the submits it admitted
 * (counted from the quota check on, so one that then fails validation
 * counts until the next count, never longer). A refusal is never decided
 * on a kept count: PostgreSQL counts again first, so a quota that made
 * room (jobs started or were cancelled, or the admin raised it) admits the
 * very next submit.
 *
 * The error bound: a kept count does not see what other gateways admitted
 * since it was taken, so with G gateways a tenant may pass its quota by
 * what the other G - 1 admitted in the last second (at most their rate
 * limit for the tenant's keys), plus, as before, the submits in flight at
 * the same moment. Jobs that left the queue in that second only make the
 * kept count high, which costs a recount, not a wrong refusal. */
int gw_limits_admit_submit(svc_req *req, const gw_caller *who)
{
    gw_app *app = svc_req_app(req);
    gw_limits *l = app->limits;
    if (!l)
        return 0;
    int limit = who->max_queued >= 0 ? who->max_queued : l->max_queued;
    if (limit == 0)
        return 0;
    int64_t now = svc_now_mono_ms();
    if (queued_admit_cached(l, who->tenant_id, limit, now))
        return 0;
    int64_t queued = 0;
    int rc = gw_store_tenant_queued(app->store, who->tenant_id, limit, &queued);
    if (rc == -EIO) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    if (rc != 0 || queued_recount(l, who->tenant_id, limit, queued, now))
        return 0;
    /* Nothing tells when a queued job will start; a few seconds is a
     * polite pace for a client that retries. */
    gw_reply_too_many(req, "quota_queued", 5,
                      "the tenant has %lld queued jobs, its quota; submit again when some have started",
                      (long long)queued);
    return -1;
}

int gw_limits_running_allowed(gw_app *app, const char *job_id)
{
    gw_limits *l = app->limits;
    if (!l)
        return 1;
    unsigned h = svc_fnv1a(job_id) % BLOCKED_MEMO;
    int64_t now = svc_now_mono_ms();
    if (l->blocked[h].until_ms > now && strcmp(l->blocked[h].job_id, job_id) == 0)
        return 0;
    int ok = 1;
    if (gw_store_tenant_running_ok(app->store, job_id, l->max_running, &ok) != 0)
        return 1;
    if (!ok) {
        snprintf(l->blocked[h].job_id, sizeof(l->blocked[h].job_id), "%s", job_id);
        l->blocked[h].until_ms = now + BLOCKED_MEMO_MS;
        svc_debug("job %s waits: its tenant is at its running quota", job_id);
    }
    return ok;
}
