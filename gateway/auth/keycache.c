/* keycache.c — the API key cache (keycache.h) over the secrets' cache
 * (ttlcache.h), by the SHA-256 digest of each key. The key text itself is
 * never kept. */
#include "keycache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "svc_sha256.h"
#include "ttlcache.h"

/* The API keys' answers: a gw_ttlcache of gw_key_auth by the key's digest. */
struct gw_keycache {
    gw_ttlcache *tc;
};

gw_keycache *gw_keycache_new(int capacity, int ttl_ms)
{
    gw_keycache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    if ((c->tc = gw_ttlcache_new(capacity, ttl_ms, sizeof(gw_key_auth))) == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

void gw_keycache_free(gw_keycache *c)
{
    if (c == NULL)
        return;
    gw_ttlcache_free(c->tc);
    free(c);
}

/* The key's digest: 0, or -1 when libcrypto fails (the key is then simply
 * not cached). */
static int digest_of(const char *key, unsigned char digest[32])
{
    return svc_sha256_digest(key, strlen(key), digest) == 0 ? 0 : -1;
}

int gw_keycache_get(gw_keycache *c, const char *key, int64_t now_ms, gw_key_auth *out)
{
    unsigned char digest[32];
    if (c == NULL || digest_of(key, digest) != 0)
        return -ENOENT;
    return gw_ttlcache_get(c->tc, digest, now_ms, out);
}

int gw_keycache_was_valid(gw_keycache *c, const char *key)
{
    unsigned char digest[32];
    if (c == NULL || digest_of(key, digest) != 0)
        return 0;
    return gw_ttlcache_was_known(c->tc, digest);
}

void gw_keycache_put(gw_keycache *c, const char *key, const gw_key_auth *ka, int64_t asked_ms)
{
    unsigned char digest[32];
    /* with a TTL of 0 an answer is kept too, expired at once: only the
     * memory of a valid key (gw_keycache_was_valid) is of use */
    if (c == NULL || digest_of(key, digest) != 0)
        return;
    gw_ttlcache_put(c->tc, digest, ka, asked_ms);
}

void gw_keycache_clear(gw_keycache *c)
{
    if (c != NULL)
        gw_ttlcache_forget(c->tc, NULL, NULL);
}
