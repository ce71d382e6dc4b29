/* nodecred.c — the cluster token's strength, node credentials and their
 * cache (nodecred.h). The cache is a set-associative table of credential
 * hashes, 8 ways per set, one mutex per set; the credential itself is never
 * kept. */
#include "nodecred.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "svc_sha256.h"
#include "svc_util.h"

#define WAYS 8
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

int gw_nodecred_hash(const char *cred, char hex[GW_NODECRED_HASH_SIZE])
{
    unsigned char d[32];
    if (svc_sha256_digest(cred, strlen(cred), d) != 0)
        return -1;
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return 0;
}

/* ---- the cache ------------------------------------------------------- */

typedef struct nc_entry {
    char hex[GW_NODECRED_HASH_SIZE];
    int64_t expires_ms;          /* 0: empty */
    char node_id[37];
    char name[128];
} nc_entry;

typedef struct nc_set {
    pthread_mutex_t mu;
    nc_entry way[WAYS];
} nc_set;

struct gw_nodecreds {
    int ttl_ms;
    size_t nsets;
    nc_set *sets;
};

gw_nodecreds *gw_nodecreds_new(int capacity, int ttl_ms)
{
    gw_nodecreds *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->ttl_ms = ttl_ms > 0 ? ttl_ms : 0;
    c->nsets = capacity > 0 ? ((size_t)capacity + WAYS - 1) / WAYS : 1;
    if ((c->sets = calloc(c->nsets, sizeof *c->sets)) == NULL) {
        free(c);
        return NULL;
    }
    for (size_t i = 0; i < c->nsets; i++)
        pthread_mutex_init(&c->sets[i].mu, NULL);
    return c;
}

void gw_nodecreds_free(gw_nodecreds *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nsets; i++)
        pthread_mutex_destroy(&c->sets[i].mu);
    free(c->sets);
    free(c);
}

/* The set of a hash: its leading 16 hex digits spread uniformly already. */
static nc_set *set_of(gw_nodecreds *c, const char *hex)
{
    char lead[17];
    snprintf(lead, sizeof lead, "%.16s", hex);
    return &c->sets[strtoull(lead, NULL, 16) % c->nsets];
}

int gw_nodecreds_get(gw_nodecreds *c, const char *hex, int64_t now_ms, char node_id[37],
                     char *name, size_t namelen)
{
    if (c == NULL || c->ttl_ms == 0 || strlen(hex) != GW_NODECRED_HASH_SIZE - 1)
        return -ENOENT;
    nc_set *s = set_of(c, hex);
    int rc = -ENOENT;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < WAYS && rc != 0; i++) {
        nc_entry *e = &s->way[i];
        if (e->expires_ms > now_ms && strcmp(e->hex, hex) == 0) {
            memcpy(node_id, e->node_id, 37);
            snprintf(name, namelen, "%s", e->name);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void gw_nodecreds_put(gw_nodecreds *c, const char *hex, const char *node_id, const char *name,
                      int64_t asked_ms)
{
    if (c == NULL || c->ttl_ms == 0 || strlen(hex) != GW_NODECRED_HASH_SIZE - 1)
        return;
    nc_set *s = set_of(c, hex);
    pthread_mutex_lock(&s->mu);
    /* the same hash, else an empty or expired way, else the one expiring first */
    nc_entry *pick = &s->way[0];
    for (int i = 0; i < WAYS; i++) {
        nc_entry *e = &s->way[i];
        if (strcmp(e->hex, hex) == 0) {
            pick = e;
            break;
        }
        if (e->expires_ms < pick->expires_ms)
            pick = e;
    }
    snprintf(pick->hex, sizeof pick->hex, "%s", hex);
    snprintf(pick->node_id, sizeof pick->node_id, "%s", node_id);
    snprintf(pick->name, sizeof pick->name, "%s", name);
    pick->expires_ms = asked_ms + c->ttl_ms;
    pthread_mutex_unlock(&s->mu);
}

void gw_nodecreds_forget(gw_nodecreds *c, const char *node_id)
{
    if (c == NULL)
        return;
    for (size_t k = 0; k < c->nsets; k++) {
        nc_set *s = &c->sets[k];
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < WAYS; i++)
            if (s->way[i].expires_ms != 0 && strcmp(s->way[i].node_id, node_id) == 0)
                memset(&s->way[i], 0, sizeof s->way[i]);
        pthread_mutex_unlock(&s->mu);
    }
}
