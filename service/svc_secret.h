/* svc_secret.h — a secret kept in a file (the cluster token under compose,
 * Slurm or an operator's vault), read without ever passing through argv or
 * the environment of children. */
#ifndef SVC_SECRET_H
#define SVC_SECRET_H

#include <stddef.h>

/* Reads the secret in path into buf (len bytes; trailing newlines and
 * spaces dropped). Refuses a file others may read or write (mode o+rwx: a
 * secret for one user or group), a file that is not a regular one, an empty
 * one and one that does not fit. 0, or -errno with err filled. */
int svc_secret_read(const char *path, char *buf, size_t len, char *err, size_t errlen);

#endif
