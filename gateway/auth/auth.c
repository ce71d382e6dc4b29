/* auth.c — who is calling: tenants with API keys (only their SHA-256 is in
 * PostgreSQL, and PostgreSQL's answers are kept a moment in keycache.c;
 * each key's requests pass its rate limit); nodes are authenticated on the
 * cluster listener (auth_cluster.c). The server asks gw_authorize from the
 * request head, before the body is read; the caller it finds is kept on the
 * request, so handlers that ask again cost nothing. Failed attempts are
 * counted per client address (an IPv6 /64; behind --trusted-proxies the
 * address X-Forwarded-For names) and, past a burst, refused before any
 * lookup of a key this gateway does not know; a key it has seen valid is
 * always looked up, so that one client's failures never lock out another's
 * valid key on the same address. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "keycache.h"
#include "gw_limits.h"
#include "reply.h"
#include "svc_addr.h"
#include "svc_log.h"
#include "svc_util.h"

/* Failed attempts per address: a token bucket of burst that refills at
 * rps; an address without tokens is refused for the time one takes to
 * come back. Addresses share SLOTS slots (8 probes from a hash); a new one
 * takes the probed slot used least recently. */
#define AUTHFAIL_SLOTS 1024
#define AUTHFAIL_LOG_MS 10000

typedef struct authfail_slot {
    char ip[SVC_ADDR_TEXT]; /* the address's limit key (svc_addr_key_of) */
    double tokens;
    int64_t at_ms;     /* last refill */
    int64_t logged_ms; /* last log line for this address */
} authfail_slot;

struct gw_authfail {
    double burst, rps;     /* burst 0: no limit */
    pthread_mutex_t mu;
    authfail_slot slot[AUTHFAIL_SLOTS];
};

gw_authfail *gw_authfail_new(int burst, int rps)
{
    gw_authfail *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    f->burst = burst;
    f->rps = rps > 0 ? rps : 1;
    pthread_mutex_init(&f->mu, NULL);
    return f;
}

void gw_authfail_free(gw_authfail *f)
{
    if (f == NULL)
        return;
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* The slot of ip's limit key (an IPv6 /64 is one client), refilled to now;
 * a new one (full bucket) when it has none. Called with f->mu held. */
static authfail_slot *authfail_slot_of(gw_authfail *f, const char *addr, int64_t now_ms)
{
    char ip[SVC_ADDR_TEXT];
    svc_addr_key_of(addr, ip, sizeof ip);
    size_t h = svc_fnv1a(ip);
    authfail_slot *oldest = NULL;
    for (int probe = 0; probe < 8; probe++) {
        authfail_slot *s = &f->slot[(h + (size_t)probe) % AUTHFAIL_SLOTS];
        if (strcmp(s->ip, ip) == 0) {
            s->tokens += (double)(now_ms - s->at_ms) * f->rps / 1000.0;
            if (s->tokens > f->burst)
                s->tokens = f->burst;
            s->at_ms = now_ms;
            return s;
        }
        if (oldest == NULL || s->at_ms < oldest->at_ms)
            oldest = s;
    }
    snprintf(oldest->ip, sizeof oldest->ip, "%s", ip);
    oldest->tokens = f->burst;
    oldest->at_ms = now_ms;
    oldest->logged_ms = 0;
    return oldest;
}

int gw_authfail_blocked(gw_authfail *f, const char *ip, int64_t now_ms)
{
    if (f == NULL || f->burst <= 0)
        return 0;
    pthread_mutex_lock(&f->mu);
    authfail_slot *s = authfail_slot_of(f, ip, now_ms);
    int wait_s = s->tokens >= 1.0 ? 0 : gw_retry_after_s((int64_t)((1.0 - s->tokens) * 1000.0 / f->rps));
    pthread_mutex_unlock(&f->mu);
    return wait_s;
}

void gw_authfail_count(gw_authfail *f, const char *ip, int64_t now_ms)
{
    if (f == NULL || f->burst <= 0)
        return;
    pthread_mutex_lock(&f->mu);
    authfail_slot *s = authfail_slot_of(f, ip, now_ms);
    s->tokens -= 1.0;
    int log_now = s->tokens < 1.0 && now_ms - s->logged_ms >= AUTHFAIL_LOG_MS;
    char key[SVC_ADDR_TEXT];
    if (log_now) {
        s->logged_ms = now_ms;
        memcpy(key, s->ip, sizeof key);
    }
    pthread_mutex_unlock(&f->mu);
    if (log_now)
        svc_warn("auth: more than %.0f failed authentications from %s; its requests with a key "
                 "this gateway does not know get 429 until it slows to %.0f a second", f->burst,
                 key, f->rps);
}

gw_reqctx *gw_reqctx_of(svc_req *req)
{
    gw_reqctx *ctx = svc_req_user(req);
    return ctx != NULL ? ctx : svc_req_user_alloc(req, sizeof *ctx);
}

int gw_authfail_refuse(svc_req *req)
{
    gw_app *app = svc_req_app(req);
    int wait_s = gw_authfail_blocked(app->authfail, svc_req_client_ip(req), svc_now_mono_ms());
    if (wait_s == 0)
        return 0;
    gw_reply_too_many(req, "rate_limited", wait_s,
                      "too many failed authentications from this address; retry in %d s", wait_s);
    return -1;
}

/* What PostgreSQL says of key (then kept in the cache). 0, -ENOENT for an
 * unknown or revoked key, -EIO. */
static int key_lookup_db(gw_app *app, const char *key, gw_key_auth *ka)
{
    int64_t asked = svc_now_mono_ms();
    int rc = gw_store_auth_key(app->store, key, ka);
    if (rc == 0 || rc == -ENOENT)
        gw_keycache_put(app->keys, key, rc == 0 ? ka : NULL, asked);
    return rc;
}

/* What key says of its caller, and whether the failure limiter may refuse
 * it first. A key the cache answers for costs nothing; one it remembers as
 * valid is looked up whatever its address did (a valid key is never
 * refused by the limiter); any other key, or none, is looked up only when
 * the address is not over its failures. 0, -ENOENT (unknown, revoked or
 * none), -EIO, or -EAGAIN after replying 429. */
static int key_check(svc_req *req, const char *key, gw_key_auth *ka)
{
    gw_app *app = svc_req_app(req);
    int cached = key != NULL ? gw_keycache_get(app->keys, key, svc_now_mono_ms(), ka) : -ENOENT;
    if (cached == 1)
        return 0;
    if (cached == -ENOENT && key != NULL && gw_keycache_was_valid(app->keys, key))
        return key_lookup_db(app, key, ka);
    if (gw_authfail_refuse(req) != 0)
        return -EAGAIN;
    return cached == 0 || key == NULL ? -ENOENT : key_lookup_db(app, key, ka);
}

int gw_reply_unauthenticated(svc_req *req, const char *challenge, const char *msg)
{
    gw_app *app = svc_req_app(req);
    gw_authfail_count(app->authfail, svc_req_client_ip(req), svc_now_mono_ms());
    svc_reply_header(req, "WWW-Authenticate", challenge);
    svc_reply_error(req, 401, "unauthenticated", NULL, NULL, "%s", msg);
    return -1;
}

/* gw_reply_unauthenticated on the public listener. */
static int reply_unauthenticated(svc_req *req, const char *msg)
{
    return gw_reply_unauthenticated(req, "Bearer realm=\"kowloon\"", msg);
}

int gw_auth_tenant(svc_req *req, gw_caller *who)
{
    return gw_auth_tenant_bucket(req, who, GW_RATE_READ);
}

int gw_auth_tenant_bucket(svc_req *req, gw_caller *who, int bucket)
{
    gw_reqctx *ctx = svc_req_user(req);
    if (ctx != NULL && ctx->authenticated) {
        *who = ctx->who;
        return 0;
    }
    memset(who, 0, sizeof(*who));
    const char *key = svc_req_bearer(req);
    if (key != NULL && (!*key || strlen(key) > 200))
        key = NULL; /* no key: nothing to look up */
    gw_key_auth ka;
    int rc = key_check(req, key, &ka);
    if (rc == -EAGAIN)
        return -1;
    if (rc == -ENOENT && svc_req_bearer(req) == NULL)
        return reply_unauthenticated(req, "send an API key as 'Authorization: Bearer <key>'");
    if (rc == -EIO) {
        gw_reply_unavailable(req, "PostgreSQL");
        return -1;
    }
    if (rc != 0)
        return reply_unauthenticated(req, "the API key is not valid or was revoked");
    *who = (gw_caller){.tenant_id = ka.tenant_id, .admin = ka.admin, .key_id = ka.key_id,
                       .rate_rps = ka.rate_rps, .rate_burst = ka.rate_burst,
                       .max_queued = ka.max_queued, .jobs_deleted = ka.jobs_deleted};
    if (gw_limits_rate(req, who, bucket) != 0)
        return -1;
    if ((ctx = gw_reqctx_of(req)) == NULL) {
        /* handlers read the caller from the request (gw_req_caller) */
        svc_reply_error(req, 500, "internal", NULL, NULL, "out of memory");
        return -1;
    }
    ctx->who = *who;
    ctx->authenticated = 1;
    return 0;
}

gw_caller gw_req_caller(svc_req *req)
{
    const gw_reqctx *ctx = svc_req_user(req);
    gw_caller none = {0};
    return ctx && ctx->authenticated ? ctx->who : none;
}

int gw_authorize(svc_req *req, int access)
{
    gw_app *app = svc_req_app(req);
    gw_caller who;
    int bucket = access & GW_ACCESS_WRITE ? GW_RATE_WRITE : GW_RATE_READ;
    switch (GW_ACCESS_ROLE(access)) {
    case GW_ACCESS_CLUSTER:
    case GW_ACCESS_NODE:
        /* the cluster token and nodes' credentials are never taken here:
         * nodes have a listener of their own (auth_cluster.c) */
        svc_reply_error(req, 404, "not_found", NULL, NULL, "no such resource on this listener");
        return -1;
    case GW_ACCESS_TENANT:
        return gw_auth_tenant_bucket(req, &who, bucket);
    case GW_ACCESS_METRICS:
        /* an operator's admin key here; Prometheus scrapes the cluster
         * listener with the cluster token */
        if (app->cfg.metrics_public)
            return 0;
        /* fall through */
    case GW_ACCESS_ADMIN:
        if (gw_auth_tenant_bucket(req, &who, bucket) != 0)
            return -1;
        if (who.admin)
            return 0;
        svc_reply_error(req, 403, "forbidden", NULL, NULL, "this operation needs an admin key");
        return -1;
    }
    /* A role nobody wrote a check for: closed, not open. */
    svc_error("auth: route access %#x is no role this gateway knows", (unsigned)access);
    svc_reply_error(req, 403, "forbidden", NULL, NULL, "this operation is not open to anyone");
    return -1;
}

int gw_tenant_arg(svc_req *req, const gw_caller *who, const char *what, const char **tenant)
{
    *tenant = svc_req_query(req, "tenant");
    if (*tenant && !who->admin) {
        svc_reply_error(req, 403, "forbidden", "tenant", NULL,
                        "only an admin key may ask for another tenant's %s", what);
        return -1;
    }
    if (*tenant && !gw_tenant_name_valid(*tenant)) {
        svc_reply_error(req, 400, "invalid_argument", "tenant", NULL,
                        "tenant must be a tenant's name: 1-128 characters, no control characters");
        return -1;
    }
    return 0;
}
