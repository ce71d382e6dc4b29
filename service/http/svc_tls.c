/* svc_tls.c — server certificates for HTTPS (svc_tls.h). A pair is checked
 * by loading it into a throwaway GnuTLS credential (which refuses a key
 * that is not the certificate's), then imported as the pcert list and
 * private key the certificate callback hands out. */
#include "svc_tls.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Certificates a chain file may hold (the server's and intermediates). */
#define MAX_CHAIN 16

typedef struct tls_pair {
    struct tls_pair *older;  /* replaced pairs, kept until svc_tls_free */
    gnutls_pcert_st pcert[MAX_CHAIN];
    unsigned npcert;
    gnutls_privkey_t key;
} tls_pair;

struct svc_tls {
    char *cert_file, *key_file;
    pthread_mutex_t mu;
    tls_pair *cur;
};

static void pair_free(tls_pair *p)
{
    if (p == NULL)
        return;
    for (unsigned i = 0; i < p->npcert; i++)
        gnutls_pcert_deinit(&p->pcert[i]);
    if (p->key != NULL)
        gnutls_privkey_deinit(p->key);
    free(p);
}

/* Reads and checks the pair: a new one, or NULL with err filled. */
static tls_pair *pair_load(const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    gnutls_datum_t cert = {NULL, 0}, key = {NULL, 0};
    gnutls_certificate_credentials_t check = NULL;
    tls_pair *p = calloc(1, sizeof *p);
    int rc;
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if ((rc = gnutls_load_file(cert_file, &cert)) < 0) {
        snprintf(err, errlen, "cannot read the certificate %s: %s", cert_file, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_load_file(key_file, &key)) < 0) {
        snprintf(err, errlen, "cannot read the key %s: %s", key_file, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_certificate_allocate_credentials(&check)) < 0 ||
        (rc = gnutls_certificate_set_x509_key_mem(check, &cert, &key, GNUTLS_X509_FMT_PEM)) < 0) {
        snprintf(err, errlen, "%s and %s are not a PEM certificate and its key: %s", cert_file,
                 key_file, gnutls_strerror(rc));
        goto fail;
    }
    p->npcert = MAX_CHAIN;
    if ((rc = gnutls_pcert_list_import_x509_raw(p->pcert, &p->npcert, &cert, GNUTLS_X509_FMT_PEM,
                                                0)) < 0) {
        p->npcert = 0;
        snprintf(err, errlen, "%s: %s", cert_file, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&p->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(p->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        snprintf(err, errlen, "%s: %s", key_file, gnutls_strerror(rc));
        goto fail;
    }
    gnutls_certificate_free_credentials(check);
    gnutls_free(cert.data);
    gnutls_free(key.data);
    return p;
fail:
    if (check != NULL)
        gnutls_certificate_free_credentials(check);
    gnutls_free(cert.data);
    if (key.data != NULL)
        gnutls_memset(key.data, 0, key.size);
    gnutls_free(key.data);
    pair_free(p);
    return NULL;
}

svc_tls *svc_tls_new(const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    if (cert_file == NULL || key_file == NULL || !*cert_file || !*key_file) {
        snprintf(err, errlen, "TLS needs both a certificate and a key file");
        return NULL;
    }
    svc_tls *t = calloc(1, sizeof *t);
    if (t == NULL || (t->cert_file = strdup(cert_file)) == NULL ||
        (t->key_file = strdup(key_file)) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if ((t->cur = pair_load(cert_file, key_file, err, errlen)) == NULL)
        goto fail;
    pthread_mutex_init(&t->mu, NULL);
    return t;
fail:
    if (t != NULL) {
        free(t->cert_file);
        free(t->key_file);
    }
    free(t);
    return NULL;
}

int svc_tls_reload(svc_tls *t, char *err, size_t errlen)
{
    tls_pair *p = pair_load(t->cert_file, t->key_file, err, errlen);
    if (p == NULL)
        return -1;
    pthread_mutex_lock(&t->mu);
    p->older = t->cur;
    t->cur = p;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void svc_tls_free(svc_tls *t)
{
    if (t == NULL)
        return;
    for (tls_pair *p = t->cur, *older; p != NULL; p = older) {
        older = p->older;
        pair_free(p);
    }
    pthread_mutex_destroy(&t->mu);
    free(t->cert_file);
    free(t->key_file);
    free(t);
}

int svc_tls_current(svc_tls *t, void *pcerts, unsigned *npcerts, void *privkey)
{
    if (t == NULL)
        return -1;
    pthread_mutex_lock(&t->mu);
    *(gnutls_pcert_st **)pcerts = t->cur->pcert;
    *npcerts = t->cur->npcert;
    *(gnutls_privkey_t *)privkey = t->cur->key;
    pthread_mutex_unlock(&t->mu);
    return 0;
}
