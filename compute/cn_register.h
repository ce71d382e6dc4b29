/* cn_register.h — the node's side of the cluster API: register with the
 * gateway (retrying with backoff until it answers, or until the name is
 * free: a live holder of the same name keeps it), heartbeat with the node's
 * load, register again when the gateway has forgotten the node, and
 * deregister on shutdown. One background thread. */
#ifndef CN_REGISTER_H
#define CN_REGISTER_H

#include <stdint.h>

#include "cn_node.h"

typedef struct cn_register cn_register;

/* Starts the thread. gateway is the base URL ("http://127.0.0.1:8080");
 * heartbeat_s the most seconds between heartbeats (the gateway may ask for
 * less). node is borrowed and must outlive the thread. Returns 0 and *out,
 * or a negative errno value. */
int cn_register_start(const char *gateway, int heartbeat_s, const cn_node *node,
                      cn_register **out);

/* 1 and the node's id in id while the node is registered, else 0. Any
 * thread. */
int cn_register_node_id(cn_register *r, char id[64]);

/* Stops and joins the thread, then, when the node is registered, sends
 * DELETE /v1/cluster/nodes/{id} so the gateway knows at once that it left
 * (its name is free, its credential forgotten here and there); the node
 * has no id from then on. NULL is a no-op. */
void cn_register_stop(cn_register *r);

/* Sends a heartbeat now, out of turn (the node's state changed: it lost
 * its GPU), and waits up to wait_ms until the gateway has taken one that
 * began after the call. 1 when it has, 0 otherwise (not registered, the
 * gateway away, stopping). */
int cn_register_beat_now(cn_register *r, int64_t wait_ms);
/* Frees a stopped r; NULL is a no-op. */
void cn_register_free(cn_register *r);

#endif
