/* cn_lease.h — how runs reach this node and how their outcomes go back: one
 * thread keeps a long poll open on the gateway (POST
 * /v1/cluster/nodes/{id}/lease), asking for as many runs as the node has
 * free slots and taking the cancels meant for its runs; another reports
 * finished runs in batches (POST /v1/cluster/nodes/{id}/results) and frees
 * each once the gateway says it is recorded. A gateway that is away is
 * normal: both threads retry with a back-off and lose nothing. */
#ifndef CN_LEASE_H
#define CN_LEASE_H

#include "cn_node.h"
#include "cn_register.h"

typedef struct cn_lease cn_lease;

/* Starts both threads. gateway is the base URL; reg says which node id the
 * gateway knows this node by (nothing is asked for while it has none); node
 * and reg are borrowed and must outlive the threads. 0 and *out, or a
 * negative errno value. */
int cn_lease_start(const char *gateway, const cn_node *node, cn_register *reg, cn_lease **out);

/* Stops taking runs at once (a draining node asks for none), but goes on
 * reporting until cn_lease_stop. */
void cn_lease_drain(cn_lease *l);

/* Starts no new poll from now on (the one open ends when the node
 * deregisters, which answers it at once); reports go on. Call before
 * cn_register_stop, so that no poll starts between the deregistration and
 * cn_lease_stop. NULL is a no-op. */
void cn_lease_stop_polls(cn_lease *l);

/* Stops and joins both threads (a report in flight is finished or given up
 * after its timeout) and frees l; NULL is a no-op. */
void cn_lease_stop(cn_lease *l);

#endif
