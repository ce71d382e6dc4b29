/* task_fw.h — what a gang part may not reach. Gang parts run on the host's
 * network (NCCL and Gloo need it, InfiniBand included), so the node puts
 * their traffic through a chain of iptables (and ip6tables) rules of its
 * own, jumped to from OUTPUT for the task uid only (-m owner
 * --uid-owner): TCP to the gateway, to the node's own API, and to every
 * --task-deny address (PostgreSQL, Redis, anything the operator lists) is
 * refused with a reset. A deny address that is this host's own (loopback
 * or an interface's) is refused on every local address
 * (-m addrtype --dst-type LOCAL), since a service listening on all
 * interfaces answers on each. Everything else — the peers — is reachable.
 * The chain is installed the first time a gang part runs and removed when
 * the node stops; a chain of the same name left by a killed node is
 * replaced. Needs root and iptables; without them gang parts are refused
 * (or run unfiltered with --task-firewall off). */
#ifndef CN_TASK_FW_H
#define CN_TASK_FW_H

#include <pthread.h>

#include "task_argv.h"

#define CN_TASK_FW_RULES 64

typedef struct cn_task_fw_rule {
    int family;           /* 4 or 6; 0: both (a local rule) */
    int local;            /* every local address, not addr */
    char addr[64];        /* an address or a CIDR block */
    int port;             /* TCP port; 0: every port and protocol */
} cn_task_fw_rule;

typedef struct cn_task_fw {
    pthread_mutex_t mu;
    char chain[32];       /* "KOWLOON-<node tag>" */
    unsigned uid;
    int nrules;
    cn_task_fw_rule rules[CN_TASK_FW_RULES];
    int state;            /* 0: not yet, 1: installed, -1: failed (why) */
    char why[512];
    char iptables[256], ip6tables[256];  /* "" when absent */
} cn_task_fw;

/* Sets fw up (nothing is installed yet) for the task uid and a chain
 * named after tag. */
void cn_task_fw_init(cn_task_fw *fw, const char *tag, unsigned uid);

/* Adds what one deny entry refuses: "HOST:PORT", "HOST" (every port),
 * "CIDR[:PORT]", "[V6]:PORT"; a name is resolved now. 0, or -1 with why. */
int cn_task_fw_add(cn_task_fw *fw, const char *entry, char *why, size_t whylen);

/* Adds the host and port of an http(s) URL (the gateway, the node's own
 * API). 0, or -1 with why. */
int cn_task_fw_add_url(cn_task_fw *fw, const char *url, char *why, size_t whylen);

/* The arguments (after the iptables executable) appending rule r to the
 * chain, for family 4 or 6; -1 when r is not of that family. Pure. */
int cn_task_fw_rule_args(const cn_task_fw *fw, const cn_task_fw_rule *r, int family,
                         cn_strv *out);

/* Installs the chain once (later calls answer at once). 0, or -1 with
 * fw->why. */
int cn_task_fw_ensure(cn_task_fw *fw);

/* Removes the chain and its jump when installed. */
void cn_task_fw_remove(cn_task_fw *fw);

#endif
