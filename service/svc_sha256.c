/* svc_sha256.c — streaming SHA-256 on libcrypto's EVP interface. */
#include "svc_sha256.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

/* An svc_sha256 is an EVP_MD_CTX under another name: one allocation. */

svc_sha256 *svc_sha256_new(void)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return NULL;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return NULL;
    }
    return (svc_sha256 *)ctx;
}

int svc_sha256_update(svc_sha256 *h, const void *data, size_t n)
{
    return n == 0 || EVP_DigestUpdate((EVP_MD_CTX *)h, data, n) == 1 ? 0 : -1;
}

int svc_sha256_final(svc_sha256 *h, unsigned char out[32])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex((EVP_MD_CTX *)h, md, &len) == 1 && len == 32;
    EVP_MD_CTX_free((EVP_MD_CTX *)h);
    if (ok)
        memcpy(out, md, 32);
    return ok ? 0 : -1;
}

int svc_sha256_final_hex(svc_sha256 *h, char hex[65])
{
    unsigned char md[32];
    if (svc_sha256_final(h, md) != 0)
        return -1;
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

int svc_blob_id_valid(const char *id)
{
    if (id == NULL || strncmp(id, "sha256:", 7) != 0 || strlen(id) != 7 + 64)
        return 0;
    return strspn(id + 7, "0123456789abcdef") == 64;
}

void svc_sha256_free(svc_sha256 *h)
{
    EVP_MD_CTX_free((EVP_MD_CTX *)h);
}

int svc_sha256_digest(const void *data, size_t n, unsigned char out[32])
{
    unsigned int len = 0;
    return EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32 ? 0 : -1;
}

/* H((K ^ opad) || H((K ^ ipad) || msg)), K the key padded to the block. */
int svc_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                    unsigned char out[32])
{
    unsigned char k[64] = {0}, pad[64], inner[32];
    if (klen > sizeof k) {
        if (svc_sha256_digest(key, klen, k) != 0)
            return -1;
    } else if (klen > 0) {
        memcpy(k, key, klen);
    }
    int rc = -1;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < sizeof pad; i++)
            pad[i] = k[i] ^ (pass == 0 ? 0x36 : 0x5c);
        svc_sha256 *h = svc_sha256_new();
        if (!h)
            goto out;
        if (svc_sha256_update(h, pad, sizeof pad) != 0 ||
            svc_sha256_update(h, pass == 0 ? msg : inner, pass == 0 ? mlen : sizeof inner) != 0) {
            svc_sha256_free(h);
            goto out;
        }
        if (svc_sha256_final(h, pass == 0 ? inner : out) != 0)
            goto out;
    }
    rc = 0;
out:
    memset(k, 0, sizeof k);
    memset(pad, 0, sizeof pad);
    return rc;
}
