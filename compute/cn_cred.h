/* cn_cred.h — the node's own credential. The cluster token only registers the
 * node; the gateway answers with a credential bound to the node's id, and
 * every later call carries it. It lives in this process's memory and in
 * one file of the state directory (mode 0600, in a directory of mode 0700),
 * so that a node restarted under the same name (after kill -9, a crash, a
 * reboot) proves at once that it holds that name: without it the name
 * stays its earlier process's until that one is silent for the gateway's
 * node timeout. Nothing else ever sees it: it is never logged, never put
 * in a child's environment or command line, never in a run's files. */
#ifndef CN_CRED_H
#define CN_CRED_H

#include <stddef.h>

/* A credential and its NUL ("kn_" + 43 base64url characters), rounded up. */
#define CN_CRED_SIZE 64

typedef struct cn_cred cn_cred;

/* The holder of node name's credential, kept in dir (created with mode
 * 0700 when missing) as <dir>/<name, %XX-escaped>.credential; what an
 * earlier process of this node left there is loaded. dir NULL or "": in
 * memory only. A state directory that cannot be used is not fatal: the
 * credential is then kept in memory only, and the reason is in err (the
 * caller logs it). 0 and *out, -ENOMEM. */
int cn_cred_open(const char *dir, const char *name, cn_cred **out, char *err, size_t errlen);
void cn_cred_free(cn_cred *c);

/* The credential into out; 0, or -ENOENT when the node has none (never
 * registered, or it left). Any thread. */
int cn_cred_get(const cn_cred *c, char out[CN_CRED_SIZE]);
/* The gateway gave the node cred: kept in memory at once, then written to
 * the state file (a temporary file, fsynced, renamed over it). 0, or
 * -errno when the file could not be written (the credential is in memory
 * anyway; the caller logs it). -EINVAL for a credential that does not fit. */
int cn_cred_set(cn_cred *c, const char *cred);
/* The node left (deregistered): the credential is forgotten and its file
 * removed. */
void cn_cred_clear(cn_cred *c);
/* The state file's path ("" when in memory only); borrowed. */
const char *cn_cred_path(const cn_cred *c);

#endif
