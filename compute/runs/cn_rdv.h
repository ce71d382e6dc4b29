/* cn_rdv.h — the rendezvous store of a node's part of a multi-node job: a
 * kl_store over HTTP to the gateway's /v1/cluster/rendezvous/{job}/{attempt}
 * (contract §3), scoped to one job attempt. Gloo's store and NCCL's unique
 * id live there; a stale attempt is refused by the gateway (409), which the
 * store reports as KL_ECANCELED. */
#ifndef CN_RDV_H
#define CN_RDV_H

#include "cn_args.h"
#include "kl.h"

/* What every multi-node run of this node shares; main fills it. */
typedef struct cn_dist_cfg {
    const char *gateway;      /* borrowed: the gateway's base URL */
    const struct cn_cred *cred; /* borrowed: the node's credential (cn_cred.h) */
    char host[256];           /* the address other nodes reach this one on */
    char ifname[64];          /* the interface that has it ("" when none has:
                                 NAT, a proxy), found once at start */
    int timeout_ms;           /* rendezvous and each collective (--dist-timeout-s) */
} cn_dist_cfg;

typedef struct cn_rdv {
    const cn_dist_cfg *cfg;
    char job_id[CN_JOB_ID_MAX + 1];
    int attempt;
    const volatile int *cancel;   /* the run's flag: a wait stops when it rises */
    kl_store store;               /* ctx is this cn_rdv */
} cn_rdv;

/* Fills r (which must not move afterwards: r->store.ctx points to it). */
void cn_rdv_init(cn_rdv *r, const cn_dist_cfg *cfg, const char *job_id, int attempt,
                 const volatile int *cancel);

/* The URL path segment of key: [A-Za-z0-9_.-] as they are, any other byte
 * as ~XX (hex), which the gateway accepts. out holds at least 3 * strlen +
 * 1 bytes; -1 when it does not. */
int cn_rdv_key_escape(const char *key, char *out, size_t outlen);

/* The host of url ("http://host:port/..."), or "" when it has none. */
void cn_rdv_host_of(const char *url, char *host, size_t len);

#endif
