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

int svc_sha256_final_hex(svc_sha256 *h, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex((EVP_MD_CTX *)h, md, &len) == 1 && len == 32;
    EVP_MD_CTX_free((EVP_MD_CTX *)h);
    if (!ok)
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
