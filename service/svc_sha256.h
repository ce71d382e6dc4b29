/* svc_sha256.h — streaming SHA-256 (OpenSSL's libcrypto underneath): the
 * content address of a blob, computed while its bytes stream past. */
#ifndef SVC_SHA256_H
#define SVC_SHA256_H

#include <stddef.h>

typedef struct svc_sha256 svc_sha256;

/* A new running hash; NULL on ENOMEM. */
svc_sha256 *svc_sha256_new(void);
/* Adds n bytes; 0 or -1 (libcrypto failed). */
int svc_sha256_update(svc_sha256 *h, const void *data, size_t n);
/* Writes the digest as 64 lowercase hex characters plus NUL into hex and
 * frees h (whatever the outcome); 0 or -1. */
int svc_sha256_final_hex(svc_sha256 *h, char hex[65]);
/* Writes the 32-byte digest into out and frees h (whatever the outcome);
 * 0 or -1. */
int svc_sha256_final(svc_sha256 *h, unsigned char out[32]);
/* Frees a hash without a digest; NULL is a no-op. */
void svc_sha256_free(svc_sha256 *h);
/* The digest of n bytes in one call, as 32 raw bytes; 0 or -1. */
int svc_sha256_digest(const void *data, size_t n, unsigned char out[32]);

/* HMAC-SHA256 (RFC 2104) of msg under key, as 32 raw bytes; 0 or -1.
 * Keys longer than the 64-byte block are hashed first, as the RFC says. */
int svc_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                    unsigned char out[32]);

/* 1 if id is a blob id: "sha256:" followed by exactly 64 lowercase hex
 * digits (NULL is not). */
int svc_blob_id_valid(const char *id);

#endif
