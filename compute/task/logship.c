/* logship.c — live task logs to the gateway (logship.h). The thread holds
 * the lock only to look at the sources; reading files, encoding and
 * sending happen outside it. */
#include "logship.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cn_args.h"
#include "svc_client.h"
#include "svc_log.h"
#include "svc_util.h"

#define CN_LS_BACKOFF_MAX_MS 5000
#define CN_LS_TIMEOUT_MS 10000

struct cn_logship_src {
    char job_id[CN_JOB_ID_MAX + 1];
    int attempt, part;
    int fd;
    const int64_t *size;       /* the writer's count, until ended */
    int64_t final;             /* once ended */
    int ended;
    int64_t ended_mono;
    int64_t offset;            /* bytes the gateway took */
    struct cn_logship_src *next;
};

struct cn_logship {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stop;
    int kicked;                /* ship without waiting for the interval */
    cn_logship_sink sink;
    cn_logship_opts o;
    cn_logship_src *head;
    cn_logship_stats stats;
    char problem[256];         /* the last failure logged */
    pthread_t th;
};

static int64_t src_size(const cn_logship_src *src)
{
    return src->ended ? src->final : __atomic_load_n(src->size, __ATOMIC_ACQUIRE);
}

/* Drops ended sources that are shipped, or offered for long enough (lock
 * held). */
static void prune(cn_logship *s)
{
    int64_t now = svc_now_mono_ms();
    for (cn_logship_src **pp = &s->head; *pp;) {
        cn_logship_src *src = *pp;
        if (src->ended && (src->offset >= src->final || now - src->ended_mono >= s->o.linger_ms)) {
            if (src->offset < src->final)
                svc_debug("log shipping gave up run=%s.%d part=%d at %lld of %lld bytes",
                          src->job_id, src->attempt, src->part, (long long)src->offset,
                          (long long)src->final);
            *pp = src->next;
            close(src->fd);
            free(src);
            continue;
        }
        pp = &src->next;
    }
}

/* One batch of what the sources gained: the JSON and, in taken[], how far
 * each source's entry goes. NULL when there is nothing to send. */
static json_t *build(cn_logship *s, cn_logship_src **srcs, int64_t *upto, int *n)
{
    json_t *runs = json_array();
    size_t budget = s->o.batch_bytes;
    char *buf = NULL;
    *n = 0;
    pthread_mutex_lock(&s->mu);
    int count = 0;
    for (cn_logship_src *src = s->head; src && count < 64; src = src->next)
        if (src_size(src) > src->offset)
            srcs[count++] = src;
    int64_t from[64], to[64];
    for (int i = 0; i < count; i++) {
        from[i] = srcs[i]->offset;
        to[i] = src_size(srcs[i]);
    }
    pthread_mutex_unlock(&s->mu);
    /* the sources stay while this thread alone prunes them */
    for (int i = 0; runs && i < count && budget > 0; i++) {
        size_t want = (size_t)(to[i] - from[i]);
        if (want > budget)
            want = budget;
        char *nb = realloc(buf, want ? want : 1);
        if (!nb)
            break;
        buf = nb;
        ssize_t got = pread(srcs[i]->fd, buf, want, from[i]);
        if (got <= 0)
            continue;
        char *b64 = svc_b64_encode(buf, (size_t)got);
        json_t *e = b64 ? json_pack("{s:s, s:i, s:i, s:I, s:s}", "job_id", srcs[i]->job_id,
                                    "attempt", srcs[i]->attempt, "part", srcs[i]->part, "offset",
                                    (json_int_t)from[i], "data_b64", b64)
                        : NULL;
        free(b64);
        if (!e || json_array_append_new(runs, e) < 0)
            break;
        srcs[*n] = srcs[i];
        upto[(*n)++] = from[i] + got;
        budget -= (size_t)got;
    }
    free(buf);
    if (*n == 0) {
        json_decref(runs);
        return NULL;
    }
    return json_pack("{s:o}", "runs", runs);
}

static void *ship_main(void *arg)
{
    cn_logship *s = arg;
    int64_t wait = s->o.interval_ms;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int64_t until = svc_now_mono_ms() + wait;
        struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (long)(until % 1000) * 1000000L};
        while (!s->stop && !s->kicked && svc_now_mono_ms() < until)
            pthread_cond_timedwait(&s->cond, &s->mu, &ts);
        s->kicked = 0;
        prune(s);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        cn_logship_src *srcs[64];
        int64_t upto[64];
        int n;
        json_t *batch = build(s, srcs, upto, &n);
        if (!batch) {
            wait = s->o.interval_ms;
            continue;
        }
        char msg[256] = "";
        int rc = s->sink.send(s->sink.cls, batch, msg, sizeof msg);
        json_decref(batch);
        pthread_mutex_lock(&s->mu);
        if (rc == 0) {
            for (int i = 0; i < n; i++) {
                s->stats.bytes += (uint64_t)(upto[i] - srcs[i]->offset);
                srcs[i]->offset = upto[i];
            }
            s->stats.batches++;
            if (s->problem[0])
                svc_info("log shipping: the gateway takes logs again");
            s->problem[0] = '\0';
            wait = s->o.interval_ms;
        } else {
            s->stats.failures++;
            if (strcmp(msg, s->problem) != 0) {
                svc_warn("log shipping failed: %s (sent again; the whole log also goes with "
                         "each result)", msg);
                snprintf(s->problem, sizeof s->problem, "%s", msg);
            }
            wait = wait * 2 > CN_LS_BACKOFF_MAX_MS ? CN_LS_BACKOFF_MAX_MS : wait * 2;
        }
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

int cn_logship_start(const cn_logship_sink *sink, const cn_logship_opts *opts, cn_logship **out)
{
    *out = NULL;
    cn_logship *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->sink = *sink;
    s->o.interval_ms = opts && opts->interval_ms > 0 ? opts->interval_ms : 250;
    s->o.batch_bytes = opts && opts->batch_bytes ? opts->batch_bytes : 1 << 20;
    s->o.linger_ms = opts && opts->linger_ms > 0 ? opts->linger_ms : 30000;
    pthread_mutex_init(&s->mu, NULL);
    svc_cond_init_mono(&s->cond);
    int rc = -pthread_create(&s->th, NULL, ship_main, s);
    if (rc < 0) {
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void cn_logship_stop(cn_logship *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    while (s->head) {
        cn_logship_src *src = s->head;
        s->head = src->next;
        close(src->fd);
        free(src);
    }
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

cn_logship_src *cn_logship_add(cn_logship *s, const char *job_id, int attempt, int part, int fd,
                               const int64_t *size)
{
    cn_logship_src *src = calloc(1, sizeof *src);
    if (!src)
        return NULL;
    if ((src->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        free(src);
        return NULL;
    }
    snprintf(src->job_id, sizeof src->job_id, "%s", job_id);
    src->attempt = attempt;
    src->part = part;
    src->size = size;
    pthread_mutex_lock(&s->mu);
    src->next = s->head;
    s->head = src;
    pthread_mutex_unlock(&s->mu);
    return src;
}

void cn_logship_end(cn_logship *s, cn_logship_src *src, int64_t final)
{
    if (!src)
        return;
    pthread_mutex_lock(&s->mu);
    src->final = final;
    src->ended = 1;
    src->ended_mono = svc_now_mono_ms();
    s->kicked = 1;                      /* ship the rest now */
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

void cn_logship_kick(cn_logship *s)
{
    pthread_mutex_lock(&s->mu);
    s->kicked = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

void cn_logship_stats_get(cn_logship *s, cn_logship_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

static int http_send(void *cls, const json_t *batch, char *msg, size_t msglen)
{
    cn_logship_http *h = cls;
    char id[64], url[1024];
    svc_response r;
    if (!h->node_id(h->node_cls, id)) {
        snprintf(msg, msglen, "the node is not registered yet");
        return -1;
    }
    size_t len = strlen(h->gateway);
    while (len > 0 && h->gateway[len - 1] == '/')
        len--;
    snprintf(url, sizeof url, "%.*s/v1/cluster/nodes/%s/logs", (int)len, h->gateway, id);
    char cred[CN_CRED_SIZE];
    cn_cred_get(h->cred, cred);
    int rc = svc_http_call("POST", url, cred, batch, CN_LS_TIMEOUT_MS, &r);
    memset(cred, 0, sizeof cred);
    int ok = rc == 0 && (r.status == 200 || r.status == 204);
    if (!ok) {
        if (rc < 0)
            snprintf(msg, msglen, "%s", r.error);
        else
            snprintf(msg, msglen, "POST %s answered %d", url, r.status);
    }
    svc_response_clear(&r);
    return ok ? 0 : -1;
}

void cn_logship_http_init(cn_logship_sink *sink, cn_logship_http *h)
{
    sink->send = http_send;
    sink->cls = h;
}
