/* webhooks.c — the delivery worker (webhooks.h). One thread per gateway;
 * it never touches the HTTP server's threads. A batch is claimed, sent at
 * once (svc_poster: curl multi), and every attempt recorded, whatever its
 * outcome, before the next claim. */
#include "webhooks.h"

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

/* Deliveries claimed and sent at once by one gateway. */
#define WH_BATCH 16
/* How often an idle worker looks for due deliveries. */
#define WH_POLL_MS 250
#define WH_BACKOFF_MAX_MS (3600 * 1000LL)

struct gw_webhooks {
    gw_app *app;
    svc_poster *poster;
    pthread_t thread;
    volatile int stopping;
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

static int addr_ok(const void *cls, const struct sockaddr *sa, char *why, size_t whylen)
{
    return gw_whnet_addr_ok(cls, sa, why, whylen);
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

/* Sends one claimed batch and records every attempt made. */
static void deliver(gw_webhooks *w, gw_wh_delivery *d, int n)
{
    gw_app *app = w->app;
    svc_post posts[WH_BATCH];
    wh_msg msgs[WH_BATCH];
    int of[WH_BATCH], k = 0;
    for (int i = 0; i < n && i < WH_BATCH; i++) {
        if (msg_build(app, &d[i], &msgs[k]) != 0) {
            /* no attempt: the claim lapses and it comes due again */
            svc_warn("webhooks: msg_%" PRId64 " not sent: its tenant's secret is unavailable",
                     d[i].id);
            continue;
        }
        posts[k] = (svc_post){.url = d[i].url, .body = d[i].payload,
                              .len = strlen(d[i].payload), .headers = msgs[k].hdr};
        of[k++] = i;
    }
    if (k == 0)
        return;
    svc_poster_post(w->poster, posts, k, (long)app->cfg.webhook_timeout_s * 1000, addr_ok, app->whnet);
    for (int j = 0; j < k; j++)
        record(app, &d[of[j]], &posts[j]);
}

static void *wh_main(void *arg)
{
    gw_webhooks *w = arg;
    gw_app *app = w->app;
    /* a claim hides its deliveries until every attempt of the batch has
     * ended, with room for recording them */
    int lease_s = app->cfg.webhook_timeout_s + 30;
    while (!w->stopping) {
        gw_wh_delivery *d = NULL;
        int n = 0;
        int rc = gw_store_wh_claim(app->store, WH_BATCH, lease_s, &d, &n);
        if (rc == 0 && n > 0)
            deliver(w, d, n);
        gw_wh_deliveries_free(d, n);
        if (rc != 0 || n < WH_BATCH)
            for (int t = 0; t < WH_POLL_MS && !w->stopping; t += 50)
                svc_sleep_ms(50);
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
    free(w);
}
