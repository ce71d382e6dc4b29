/* webhooks.c — the delivery worker (webhooks.h). One thread per gateway;
 * it never touches the HTTP server's threads. Deliveries run side by side
 * on one curl multi handle (svc_poster) with no batch to wait for: each
 * attempt is recorded as it ends and its slot claims the next due
 * delivery at once. Claims are fair between tenants (gw_store_wh_claim):
 * a tenant holds at most --webhook-tenant-inflight of the
 * --webhook-max-inflight slots, so receivers that hang (each attempt
 * lasting its whole --webhook-timeout-s) slow only their own tenant. */
#include "webhooks.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_client.h"
#include "svc_log.h"
#include "svc_sha256.h"
#include "svc_util.h"
#include "webhook_net.h"

/* How often a worker with free slots looks for due deliveries. */
#define WH_POLL_MS 250
#define WH_BACKOFF_MAX_MS (3600 * 1000LL)
/* Ended deliveries are trimmed this often, at most this many a statement
 * (one statement a round: a large backlog goes over several rounds). */
#define WH_TRIM_EVERY_MS 60000
#define WH_TRIM_BATCH 10000
/* At a stop, attempts in flight get this long to end; the rest are given
 * back unrecorded, due again at once for any gateway. */
#define WH_STOP_GRACE_MS 1000

/* The tenants this worker has deliveries in flight for. */
typedef struct wh_tenant {
    int64_t id;
    int n;
} wh_tenant;

struct gw_webhooks {
    gw_app *app;
    svc_poster *poster;
    pthread_t thread;
    volatile int stopping;
    /* the thread's own */
    int inflight;
    wh_tenant *tenants;
    int ntenants, cap_tenants;
    int64_t *released;             /* ids given back at a stop */
    int nreleased;
};

int gw_webhook_sign(const char *secret, const char *msg_id, int64_t timestamp, const char *body,
                    size_t len, char *out, size_t outlen)
{
    if (strncmp(secret, "whsec_", 6) != 0 || outlen < 64)
        return -1;
    unsigned char key[64], mac[32];
    size_t klen;
    if (svc_b64_decode_to(secret + 6, strlen(secret + 6), key, sizeof key, &klen) != 0)
        return -1;
    char head[96];
    int hl = snprintf(head, sizeof head, "%s.%" PRId64 ".", msg_id, timestamp);
    char *msg = malloc((size_t)hl + len);
    if (!msg || hl < 0 || (size_t)hl >= sizeof head) {
        free(msg);
        return -1;
    }
    memcpy(msg, head, (size_t)hl);
    memcpy(msg + hl, body, len);
    int rc = svc_hmac_sha256(key, klen, msg, (size_t)hl + len, mac);
    free(msg);
    memset(key, 0, sizeof key);
    if (rc != 0)
        return -1;
    memcpy(out, "v1,", 3);
    out[3 + svc_b64_encode_to(mac, sizeof mac, out + 3)] = '\0';
    return 0;
}

int64_t gw_webhook_backoff_ms(int base_ms, int n, uint32_t rnd)
{
    int64_t d = base_ms > 0 ? base_ms : 1;
    for (int i = 1; i < n && d < WH_BACKOFF_MAX_MS; i++)
        d *= 2;
    if (d > WH_BACKOFF_MAX_MS)
        d = WH_BACKOFF_MAX_MS;
    return d / 2 + (int64_t)((double)(d / 2) * ((double)rnd / 4294967296.0));
}

/* The attempt's error, which the tenant reads (GET .../deliveries), says
 * only that the address was refused: the address and its kind, a DNS
 * answer inside the gateway's network, go to the log. */
static int addr_ok(const void *cls, const struct sockaddr *sa, char *why, size_t whylen)
{
    char detail[128];
    if (gw_whnet_addr_ok(cls, sa, detail, sizeof detail))
        return 1;
    svc_info("webhooks: a delivery's connection refused: %s", detail);
    snprintf(why, whylen, "the address is not allowed");
    return 0;
}

/* The headers of one message; hdr points into the other fields. */
typedef struct wh_msg {
    char id_h[48], ts_h[48], sig_h[112];
    const char *hdr[6];
} wh_msg;

/* Signs d's payload now (webhook-timestamp is the attempt's time) with
 * its tenant's secret, made here on the tenant's first delivery. 0, or -1
 * when the secret cannot be had. */
static int msg_build(gw_app *app, gw_wh_delivery *d, wh_msg *m)
{
    char created[32], sig[80];
    char id[32]; /* msg_<delivery id>: the same for every attempt */
    if (!d->secret[0] && gw_store_wh_secret(app->store, d->tenant_id, 0, d->secret, created) != 0)
        return -1;
    int64_t now_s = svc_now_wall_ms() / 1000;
    snprintf(id, sizeof id, "msg_%" PRId64, d->id);
    if (gw_webhook_sign(d->secret, id, now_s, d->payload, strlen(d->payload), sig, sizeof sig))
        return -1;
    snprintf(m->id_h, sizeof m->id_h, "webhook-id: %s", id);
    snprintf(m->ts_h, sizeof m->ts_h, "webhook-timestamp: %" PRId64, now_s);
    snprintf(m->sig_h, sizeof m->sig_h, "webhook-signature: %s", sig);
    m->hdr[0] = "Content-Type: application/json";
    m->hdr[1] = "User-Agent: kowloon-webhooks/1";
    m->hdr[2] = m->id_h;
    m->hdr[3] = m->ts_h;
    m->hdr[4] = m->sig_h;
    m->hdr[5] = NULL;
    return 0;
}

/* Records how post p went for delivery d, logging a delivery that failed
 * for good. */
static void record(gw_app *app, const gw_wh_delivery *d, const svc_post *p)
{
    int delivered = p->status >= 200 && p->status <= 299;
    char err[300], state[12];
    if (p->status && !delivered)
        snprintf(err, sizeof err, "HTTP %d", p->status);
    else
        snprintf(err, sizeof err, "%s", p->error);
    uint32_t rnd = 0;
    svc_random_bytes(&rnd, sizeof rnd);
    int64_t retry = gw_webhook_backoff_ms(app->cfg.webhook_retry_base_ms, d->attempts + 1, rnd);
    if (gw_store_wh_record(app->store, d->id, p->status, delivered ? NULL : err, p->duration_ms,
                           delivered, retry, app->cfg.webhook_max_age_s, state) != 0) {
        svc_warn("webhooks: attempt %d of msg_%" PRId64 " not recorded (PostgreSQL); it is made "
                 "again once its claim lapses", d->attempts + 1, d->id);
        return;
    }
    if (strcmp(state, "failed") == 0)
        svc_warn("webhooks: msg_%" PRId64 " failed for good after %d attempts (last: %s)", d->id,
                 d->attempts + 1, err);
    else if (strcmp(state, "pending") == 0)
        svc_debug("webhooks: msg_%" PRId64 " attempt %d: %s; next in %" PRId64 " ms", d->id,
                  d->attempts + 1, err, retry);
}

/* One delivery in flight: the claim, its signed headers, its transfer. */
typedef struct wh_xfer {
    gw_wh_delivery d;              /* owns url and payload */
    wh_msg m;
    svc_post post;                 /* post.user is this */
} wh_xfer;

static void wh_xfer_free(wh_xfer *x)
{
    free(x->d.url);
    free(x->d.payload);
    free(x);
}

/* Counts one more (+1) or one fewer (-1) in flight for tenant id; 0 or
 * -ENOMEM. */
static int tenant_add(gw_webhooks *w, int64_t id, int delta)
{
    for (int i = 0; i < w->ntenants; i++) {
        if (w->tenants[i].id != id)
            continue;
        w->tenants[i].n += delta;
        if (w->tenants[i].n <= 0)
            w->tenants[i] = w->tenants[--w->ntenants];
        return 0;
    }
    if (delta < 0)
        return 0;
    if (w->ntenants == w->cap_tenants) {
        int cap = w->cap_tenants ? 2 * w->cap_tenants : 16;
        wh_tenant *t = realloc(w->tenants, (size_t)cap * sizeof *t);
        if (!t)
            return -ENOMEM;
        w->tenants = t;
        w->cap_tenants = cap;
    }
    w->tenants[w->ntenants++] = (wh_tenant){id, delta};
    return 0;
}

/* svc_poster's hand-back: the attempt is recorded and its slot freed. */
static void on_done(void *ctx, svc_post *post)
{
    gw_webhooks *w = ctx;
    wh_xfer *x = post->user;
    record(w->app, &x->d, post);
    tenant_add(w, x->d.tenant_id, -1);
    w->inflight--;
    wh_xfer_free(x);
}

/* A stop's hand-back of what did not end in time: no attempt recorded,
 * the claim given back. */
static void on_abort(void *ctx, svc_post *post)
{
    gw_webhooks *w = ctx;
    wh_xfer *x = post->user;
    if (w->released)
        w->released[w->nreleased++] = x->d.id;
    tenant_add(w, x->d.tenant_id, -1);
    w->inflight--;
    wh_xfer_free(x);
}

/* Claims up to room due deliveries and starts them; returns how many were
 * claimed, -1 when PostgreSQL did not answer. */
static int claim(gw_webhooks *w, int room)
{
    gw_app *app = w->app;
    /* a claim hides its delivery until its attempt has ended, with room
     * for recording it */
    int lease_s = app->cfg.webhook_timeout_s + 30;
    int64_t ids[w->ntenants + 1];
    int ns[w->ntenants + 1];
    for (int i = 0; i < w->ntenants; i++) {
        ids[i] = w->tenants[i].id;
        ns[i] = w->tenants[i].n;
    }
    gw_wh_delivery *d = NULL;
    int n = 0;
    if (gw_store_wh_claim(app->store, room, lease_s, app->cfg.webhook_tenant_inflight, ids, ns,
                          w->ntenants, &d, &n) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        wh_xfer *x = calloc(1, sizeof *x);
        if (!x || msg_build(app, &d[i], &x->m) != 0 || tenant_add(w, d[i].tenant_id, 1) != 0) {
            /* no attempt: the claim lapses and it comes due again */
            svc_warn("webhooks: msg_%" PRId64 " not sent: %s", d[i].id,
                     x ? "its tenant's secret is unavailable" : "out of memory");
            free(x);
            continue;
        }
        x->d = d[i];
        d[i].url = d[i].payload = NULL;
        x->post = (svc_post){.url = x->d.url, .body = x->d.payload, .len = strlen(x->d.payload),
                             .headers = x->m.hdr, .user = x};
        if (svc_poster_add(w->poster, &x->post, (long)app->cfg.webhook_timeout_s * 1000, addr_ok,
                           app->whnet) != 0) {
            svc_warn("webhooks: msg_%" PRId64 " not sent: out of memory", x->d.id);
            tenant_add(w, x->d.tenant_id, -1);
            wh_xfer_free(x);
            continue;
        }
        w->inflight++;
    }
    gw_wh_deliveries_free(d, n);
    return n;
}

/* Deletes what --webhook-retention-s no longer keeps. */
static void trim(gw_webhooks *w)
{
    int deleted = 0;
    if (gw_store_wh_trim(w->app->store, w->app->cfg.webhook_retention_s, WH_TRIM_BATCH, &deleted) == 0 &&
        deleted > 0)
        svc_info("webhooks: %d ended deliveries older than %ld s deleted", deleted,
                 w->app->cfg.webhook_retention_s);
}

static void *wh_main(void *arg)
{
    gw_webhooks *w = arg;
    gw_app *app = w->app;
    int max = app->cfg.webhook_max_inflight > 0 ? app->cfg.webhook_max_inflight : 64;
    int64_t next_claim = 0, next_trim = svc_now_mono_ms() + WH_POLL_MS;
    while (!w->stopping) {
        int64_t now = svc_now_mono_ms();
        if (w->inflight < max && now >= next_claim) {
            int room = max - w->inflight;
            int got = claim(w, room);
            /* all it asked for: more may be due at once */
            next_claim = got == room ? now : now + WH_POLL_MS;
        }
        if (now >= next_trim) {
            trim(w);
            next_trim = now + WH_TRIM_EVERY_MS;
        }
        int wait = next_claim > now ? (int)(next_claim - now) : 0;
        if (w->inflight == 0) {
            for (int t = 0; t < wait && !w->stopping; t += 50)
                svc_sleep_ms(wait - t < 50 ? wait - t : 50);
            continue;
        }
        int before = w->inflight;
        svc_poster_run(w->poster, wait > 50 ? 50 : wait, on_done, w);
        if (w->inflight < before)
            next_claim = 0; /* a slot is free: the next delivery starts now */
    }
    /* a stop: what is in flight ends within the grace, or is given back */
    int64_t until = svc_now_mono_ms() + WH_STOP_GRACE_MS;
    while (w->inflight > 0 && svc_now_mono_ms() < until)
        svc_poster_run(w->poster, 50, on_done, w);
    if (w->inflight > 0) {
        w->released = calloc((size_t)w->inflight, sizeof *w->released);
        svc_poster_abort(w->poster, on_abort, w);
        if (gw_store_wh_release(app->store, w->released, w->nreleased) != 0)
            svc_warn("webhooks: %d deliveries in flight at the stop come due again when their "
                     "claims lapse (PostgreSQL)", w->nreleased);
        free(w->released);
        w->released = NULL;
    }
    return NULL;
}

gw_webhooks *gw_webhooks_start(gw_app *app)
{
    gw_webhooks *w = calloc(1, sizeof *w);
    if (!w || !(w->poster = svc_poster_new())) {
        svc_error("webhooks: out of memory");
        free(w);
        return NULL;
    }
    w->app = app;
    int e = pthread_create(&w->thread, NULL, wh_main, w);
    if (e != 0) {
        svc_error("webhooks: cannot start the delivery thread: %s", strerror(e));
        svc_poster_free(w->poster);
        free(w);
        return NULL;
    }
    return w;
}

void gw_webhooks_stop(gw_webhooks *w)
{
    if (!w)
        return;
    w->stopping = 1;
    pthread_join(w->thread, NULL);
    svc_poster_free(w->poster);
    free(w->tenants);
    free(w);
}
