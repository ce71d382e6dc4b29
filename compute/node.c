/* node.c — the node's self-description, shared by registration and
 * GET /v1/info so the two can never disagree. */
#include "node.h"

#include "register.h"

json_t *cn_node_describe(const cn_node *n)
{
    int count;
    const kl_kernel *const *cat = kl_catalog(&count);
    json_t *kernels = json_array();

    for (int i = 0; kernels && i < count; i++)
        if (json_array_append_new(kernels, json_string(cat[i]->name)) < 0) {
            json_decref(kernels);
            kernels = NULL;
        }
    /* json_pack's "o" steals even on failure, so nothing leaks here. */
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:i, s:o}", "name", n->name, "url", n->url,
                     "backend", cn_backend_name(n->backend), "backend_reason",
                     n->backend->reason, "gpus", cn_backend_gpus_json(n->backend), "slots",
                     n->slots, "kernels", kernels);
}

int cn_node_draining(const cn_node *n)
{
    return __atomic_load_n(&n->draining, __ATOMIC_ACQUIRE);
}

int cn_node_ready(const cn_node *n)
{
    cn_register *reg = __atomic_load_n(&n->reg, __ATOMIC_ACQUIRE);
    char id[64];

    return reg && cn_register_node_id(reg, id) && !cn_node_draining(n);
}
