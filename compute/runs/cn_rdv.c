/* cn_rdv.c — a node's rendezvous store over the gateway (cn_rdv.h). A get that
 * finds no value yet asks again after 2 ms, doubling to 50 ms, until its
 * timeout, the run's cancel, or the attempt being fenced out. */
#include "cn_rdv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cn_cred.h"
#include "svc_client.h"
#include "svc_log.h"
#include "svc_url.h"
#include "svc_util.h"

/* Largest value the gateway keeps for a key. */
#define CN_RDV_VALUE_MAX (64 * 1024)
/* A transfer silent this long fails (the gateway answers at once). */
#define CN_RDV_STALL_MS 5000

int cn_rdv_key_escape(const char *key, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
        if (o + 4 > outlen)
            return -1;
        if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
            *k == '_' || *k == '.' || *k == '-') {
            out[o++] = (char)*k;
        } else {
            out[o++] = '~';
            out[o++] = hex[*k >> 4];
            out[o++] = hex[*k & 15];
        }
    }
    if (o + 1 > outlen || o == 0)
        return -1;
    out[o] = '\0';
    return 0;
}

void cn_rdv_host_of(const char *url, char *host, size_t len)
{
    svc_url u;
    host[0] = '\0';
    if (url && svc_url_parse(url, "http", &u) == 0)
        snprintf(host, len, "%s", u.host);
}

/* The URL of key in r's attempt; -1 when the key cannot be one. */
static int rdv_url(const cn_rdv *r, const char *key, char *url, size_t len)
{
    char esc[640];
    if (cn_rdv_key_escape(key, esc, sizeof esc) != 0)
        return -1;
    int n = snprintf(url, len, "%s/v1/cluster/rendezvous/%s/%d/%s", r->cfg->gateway, r->job_id,
                     r->attempt, esc);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static int rdv_cancelled(const cn_rdv *r)
{
    return r->cancel && __atomic_load_n(r->cancel, __ATOMIC_ACQUIRE);
}

static int rdv_set(void *ctx, const char *key, const void *data, size_t len)
{
    cn_rdv *r = ctx;
    char url[1024];
    if (len > CN_RDV_VALUE_MAX || rdv_url(r, key, url, sizeof url) != 0)
        return KL_EINVAL;
    int64_t deadline = svc_now_mono_ms() + r->cfg->timeout_ms, nap = 2;
    for (;;) {
        svc_response resp;
        char cred[CN_CRED_SIZE];
        cn_cred_get(r->cfg->cred, cred);
        int rc = svc_http_send_raw("PUT", url, cred, "application/octet-stream", data, len,
                                   CN_RDV_STALL_MS, r->cancel, &resp);
        memset(cred, 0, sizeof cred);
        int status = resp.status;
        svc_response_clear(&resp);
        if (rc == 0 && status == 200)
            return 0;
        if (rc == SVC_XFER_ABORTED || rdv_cancelled(r) || (rc == 0 && status == 409))
            return KL_ECANCELED;
        /* the gateway or its Redis is briefly away (transport error, 503):
         * again, within the timeout; anything else is final */
        if (rc == 0 && status != 503)
            return KL_EBACKEND;
        if (svc_now_mono_ms() >= deadline)
            return KL_ETIMEDOUT;
        svc_sleep_ms(nap);
        nap = nap * 2 > 50 ? 50 : nap * 2;
    }
}

static int rdv_get(void *ctx, const char *key, void **data, size_t *len, int timeout_ms)
{
    cn_rdv *r = ctx;
    char url[1024];
    *data = NULL;
    *len = 0;
    if (rdv_url(r, key, url, sizeof url) != 0)
        return KL_EINVAL;
    unsigned char *buf = malloc(CN_RDV_VALUE_MAX);
    if (!buf)
        return KL_ENOMEM;
    int64_t deadline = svc_now_mono_ms() + (timeout_ms > 0 ? timeout_ms : r->cfg->timeout_ms);
    int64_t nap = 2;
    int ret;
    for (;;) {
        svc_response resp;
        char cred[CN_CRED_SIZE];
        cn_cred_get(r->cfg->cred, cred);
        int rc = svc_http_get_into(url, cred, buf, CN_RDV_VALUE_MAX, NULL, NULL,
                                   CN_RDV_STALL_MS, r->cancel, &resp);
        int status = resp.status;
        int64_t got = resp.length;
        svc_response_clear(&resp);
        if (rc == 0 && status == 200) {
            void *out = malloc(got > 0 ? (size_t)got : 1);
            if (!out) {
                ret = KL_ENOMEM;
                break;
            }
            memcpy(out, buf, (size_t)got);
            *data = out;
            *len = (size_t)got;
            ret = 0;
            break;
        }
        if (rc == SVC_XFER_ABORTED || rdv_cancelled(r) || (rc == 0 && status == 409)) {
            ret = KL_ECANCELED;
            break;
        }
        if (rc == 0 && status != 404 && status != 503) {
            ret = KL_EBACKEND;
            break;
        }
        if (svc_now_mono_ms() >= deadline) {
            ret = KL_ETIMEDOUT;
            break;
        }
        svc_sleep_ms(nap);
        nap = nap * 2 > 50 ? 50 : nap * 2;
    }
    free(buf);
    return ret;
}

void cn_rdv_init(cn_rdv *r, const cn_dist_cfg *cfg, const char *job_id, int attempt,
                 const volatile int *cancel)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    snprintf(r->job_id, sizeof r->job_id, "%s", job_id);
    r->attempt = attempt;
    r->cancel = cancel;
    r->store = (kl_store){.ctx = r, .set = rdv_set, .get = rdv_get};
}
