/* svc_tls.h — a server certificate and its key for HTTPS listeners
 * (svc_server_opts.tls), read from PEM files and read again on demand
 * (SIGHUP): handshakes after a reload get the new certificate, connections
 * already up keep theirs and are not dropped. GnuTLS, as libmicrohttpd
 * uses it: the server hands each handshake the current pair through
 * gnutls's certificate callback. */
#ifndef SVC_TLS_H
#define SVC_TLS_H

#include <stddef.h>

typedef struct svc_tls svc_tls;

/* Reads cert_file (the certificate, then any intermediates, PEM) and
 * key_file (its private key, PEM). NULL with err filled when a file cannot
 * be read or parsed, or the key is not the certificate's. */
svc_tls *svc_tls_new(const char *cert_file, const char *key_file, char *err, size_t errlen);
/* Reads both files again. 0, or -1 with err filled: then the pair in use
 * stays as it was. Any thread. */
int svc_tls_reload(svc_tls *t, char *err, size_t errlen);
/* Frees every pair ever loaded (pairs are kept until then: a handshake may
 * still be using one a reload replaced). NULL is a no-op. */
void svc_tls_free(svc_tls *t);

/* The current pair as gnutls's certificate callback returns it
 * (gnutls_pcert_st ** and gnutls_privkey_t *, void here so that this header
 * needs no GnuTLS). 0, or -1 when t is NULL. */
int svc_tls_current(svc_tls *t, void *pcerts, unsigned *npcerts, void *privkey);

#endif
