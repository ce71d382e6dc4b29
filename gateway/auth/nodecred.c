/* nodecred.c — the cluster token's strength, node credentials and their
 * cache (nodecred.h), the latter over the secrets' cache (ttlcache.h); the
 * credential itself is never kept. */
#include "nodecred.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "svc_sha256.h"
#include "svc_util.h"
#include "ttlcache.h"

#define CRED_PREFIX "kn_"
#define CRED_BYTES 32
#define CRED_CHARS 43 /* base64url of 32 bytes, without its padding */

/* Defaults that were ever shipped or that people type: a token holding one
 * of these is known to an attacker, however long it is. Compared without
 * regard to case. */
static const char *const known_defaults[] = {
    "kowloon-dev-cluster-token", "changeme", "change-me", "change_me", "replace-me",
    "replaceme", "password", "example", "placeholder", "your-token", "secret-token", NULL};

/* 1 when s is a shorter string repeated (and perhaps cut): s[i] ==
 * s[i - p] for every i >= p, with p at most half of s. */
static int periodic(const char *s, size_t n)
{
    for (size_t p = 1; p <= n / 2; p++) {
        size_t i = p;
        while (i < n && s[i] == s[i - p])
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

int gw_cluster_token_check(const char *token, char *why, size_t whylen)
{
    size_t n = token ? strlen(token) : 0;
    if (n == 0) {
        snprintf(why, whylen, "no cluster token was given");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7f) {
            snprintf(why, whylen, "the cluster token holds a space, a control or a non-ASCII "
                                  "character (byte %zu); it travels in an HTTP header", i);
            return -EINVAL;
        }
    if (n < GW_CLUSTER_TOKEN_MIN) {
        snprintf(why, whylen, "the cluster token has %zu characters; at least %d random ones are "
                              "needed (e.g. `openssl rand -hex 32`)", n, GW_CLUSTER_TOKEN_MIN);
        return -EINVAL;
    }
    for (int k = 0; known_defaults[k]; k++) {
        size_t m = strlen(known_defaults[k]);
        for (size_t i = 0; i + m <= n; i++)
            if (strncasecmp(token + i, known_defaults[k], m) == 0) {
                snprintf(why, whylen, "the cluster token contains \"%s\", a well-known default; "
                                      "make a random one (e.g. `openssl rand -hex 32`)",
                         known_defaults[k]);
                return -EINVAL;
            }
    }
    int seen[256] = {0}, distinct = 0;
    for (size_t i = 0; i < n; i++)
        distinct += seen[(unsigned char)token[i]]++ == 0;
    if (distinct < 8 || periodic(token, n)) {
        snprintf(why, whylen, "the cluster token is trivially repetitive (%d distinct characters%s); "
                              "make a random one (e.g. `openssl rand -hex 32`)",
                 distinct, distinct < 8 ? "" : ", a shorter string repeated");
        return -EINVAL;
    }
    return 0;
}

int gw_nodecred_make(char cred[GW_NODECRED_SIZE])
{
    unsigned char raw[CRED_BYTES];
    char b64[((CRED_BYTES + 2) / 3) * 4 + 1];
    int rc = svc_random_bytes(raw, sizeof raw);
    if (rc != 0)
        return rc;
    size_t n = svc_b64_encode_to(raw, sizeof raw, b64);
    /* base64url (RFC 4648 §5): safe in a header, a file, a URL */
    while (n > 0 && b64[n - 1] == '=')
        n--;
    for (size_t i = 0; i < n; i++)
        b64[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
    snprintf(cred, GW_NODECRED_SIZE, CRED_PREFIX "%.*s", (int)n, b64);
    memset(raw, 0, sizeof raw);
    return 0;
}

int gw_nodecred_valid(const char *s)
{
    size_t p = strlen(CRED_PREFIX);
    if (s == NULL || strncmp(s, CRED_PREFIX, p) != 0 || strlen(s) != p + CRED_CHARS)
        return 0;
    for (s += p; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
            return 0;
    return 1;
}

/* digest as 64 lowercase hex digits: what PostgreSQL keeps and is asked. */
static void hex_of(const unsigned char digest[32], char hex[GW_NODECRED_HASH_SIZE])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

int gw_nodecred_hash(const char *cred, char hex[GW_NODECRED_HASH_SIZE])
{
    unsigned char d[32];
    if (svc_sha256_digest(cred, strlen(cred), d) != 0)
        return -1;
    hex_of(d, hex);
    return 0;
}

/* ---- the cache ------------------------------------------------------- */

/* What a credential names: a gw_ttlcache of these by the credential's
 * digest (its hash's 64 hex digits read back as 32 bytes). */
typedef struct nc_value {
    char node_id[37];
    char name[128];
} nc_value;

struct gw_nodecreds {
    gw_ttlcache *tc;
    int capacity, ttl_ms;
    /* the refresh thread (gw_nodecreds_refresh_start) */
    gw_nodecreds_lookup lookup;
    void *lookup_arg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stop;
};

gw_nodecreds *gw_nodecreds_new(int capacity, int ttl_ms)
{
    gw_nodecreds *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    if ((c->tc = gw_ttlcache_new(capacity, ttl_ms, sizeof(nc_value))) == NULL) {
        free(c);
        return NULL;
    }
    c->capacity = capacity > 8 ? capacity : 8;
    c->ttl_ms = gw_ttlcache_ttl_ms(c->tc);
    svc_cond_init_mono(&c->cv);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void gw_nodecreds_free(gw_nodecreds *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->running)
        pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    gw_ttlcache_free(c->tc);
    free(c);
}

/* hex (64 hex digits) as 32 bytes: 0, or -1 when it is not one. */
static int digest_of(const char *hex, unsigned char digest[32])
{
    if (strlen(hex) != GW_NODECRED_HASH_SIZE - 1)
        return -1;
    for (int i = 0; i < 32; i++) {
        char byte[3] = {hex[2 * i], hex[2 * i + 1], 0};
        if (!isxdigit((unsigned char)byte[0]) || !isxdigit((unsigned char)byte[1]))
            return -1;
        digest[i] = (unsigned char)strtoul(byte, NULL, 16);
    }
    return 0;
}

int gw_nodecreds_get(gw_nodecreds *c, const char *hex, int64_t now_ms, char node_id[37],
                     char *name, size_t namelen)
{
    unsigned char digest[32];
    nc_value v;
    if (c == NULL || digest_of(hex, digest) != 0 || gw_ttlcache_get(c->tc, digest, now_ms, &v) != 1)
        return -ENOENT;
    memcpy(node_id, v.node_id, 37);
    snprintf(name, namelen, "%s", v.name);
    return 0;
}

/* The digest and the value of an answer: 0, or -1 when hex is not a hash. */
static int answer_of(const char *hex, const char *node_id, const char *name,
                     unsigned char digest[32], nc_value *v)
{
    memset(v, 0, sizeof *v);
    snprintf(v->node_id, sizeof v->node_id, "%s", node_id);
    snprintf(v->name, sizeof v->name, "%s", name);
    return digest_of(hex, digest);
}

void gw_nodecreds_put(gw_nodecreds *c, const char *hex, const char *node_id, const char *name,
                      int64_t asked_ms)
{
    unsigned char digest[32];
    nc_value v;
    if (c != NULL && gw_ttlcache_ttl_ms(c->tc) != 0 && answer_of(hex, node_id, name, digest, &v) == 0)
        gw_ttlcache_put(c->tc, digest, &v, asked_ms);
}

static int names_node(const void *value, const void *node_id)
{
    return strcmp(((const nc_value *)value)->node_id, node_id) == 0;
}

void gw_nodecreds_forget(gw_nodecreds *c, const char *node_id)
{
    if (c != NULL)
        gw_ttlcache_forget(c->tc, names_node, node_id);
}

/* ---- the refresh ----------------------------------------------------- */

/* The hashes of the answers due, as hex. */
typedef struct nc_due {
    char (*hex)[GW_NODECRED_HASH_SIZE];
    int n, cap;
} nc_due;

static void collect_due(const unsigned char digest[32], void *arg)
{
    nc_due *d = arg;
    if (d->n < d->cap)
        hex_of(digest, d->hex[d->n++]);
}

void gw_nodecreds_refreshed(gw_nodecreds *c, const char *hex, const char *node_id,
                            const char *name, int64_t asked_ms)
{
    unsigned char digest[32];
    nc_value v;
    if (c != NULL && answer_of(hex, node_id, name, digest, &v) == 0)
        gw_ttlcache_refresh(c->tc, digest, &v, asked_ms);
}

int gw_nodecreds_refresh_once(gw_nodecreds *c, int64_t now_ms, gw_nodecreds_lookup lookup,
                              void *arg)
{
    if (c == NULL || c->ttl_ms == 0 || lookup == NULL)
        return 0;
    nc_due d = {.hex = malloc((size_t)c->capacity * sizeof *d.hex), .cap = c->capacity};
    if (d.hex == NULL)
        return -ENOMEM;
    gw_ttlcache_due(c->tc, now_ms, c->ttl_ms / 2, GW_NODECRED_KEEP_MS, collect_due, &d);
    int rc = 0;
    const char **v = d.n > 0 ? malloc((size_t)d.n * sizeof *v) : NULL;
    if (d.n > 0 && v == NULL)
        rc = -ENOMEM;
    for (int i = 0; v != NULL && i < d.n; i++)
        v[i] = d.hex[i];
    /* asked now: what the statement reads was committed after it */
    if (v != NULL)
        rc = lookup(arg, c, v, d.n, now_ms);
    free(v);
    free(d.hex);
    return rc < 0 ? rc : d.n;
}

static void *refresh_main(void *arg)
{
    gw_nodecreds *c = arg;
    int period = c->ttl_ms / 4 > 10 ? c->ttl_ms / 4 : 10;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec ts = svc_deadline_ts(CLOCK_MONOTONIC, period);
        while (!c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT)
            ;
        if (c->stop)
            break;
        pthread_mutex_unlock(&c->mu);
        gw_nodecreds_refresh_once(c, svc_now_mono_ms(), c->lookup, c->lookup_arg);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int gw_nodecreds_refresh_start(gw_nodecreds *c, gw_nodecreds_lookup lookup, void *arg)
{
    if (c == NULL || lookup == NULL)
        return -EINVAL;
    c->lookup = lookup;
    c->lookup_arg = arg;
    if (c->ttl_ms == 0)
        return 0;
    int e = pthread_create(&c->thread, NULL, refresh_main, c);
    if (e != 0)
        return -e;
    c->running = 1;
    return 0;
}
