/* task_argv.c — the engine's command line and the program's environment
 * (task_argv.h). Every isolation flag of contract §4 is written here and
 * nowhere else, so one unit test sees all of them. */
#include "task_argv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cn_strv_add(cn_strv *sv, const char *s)
{
    if (sv->oom)
        return;
    if (sv->n + 2 > sv->cap) {
        int cap = sv->cap ? sv->cap * 2 : 64;
        char **v = realloc(sv->v, (size_t)cap * sizeof *v);
        if (!v) {
            sv->oom = 1;
            return;
        }
        sv->v = v;
        sv->cap = cap;
    }
    if (!(sv->v[sv->n] = strdup(s))) {
        sv->oom = 1;
        return;
    }
    sv->v[++sv->n] = NULL;
}

void cn_strv_addf(cn_strv *sv, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        sv->oom = 1;
        return;
    }
    cn_strv_add(sv, s);
    free(s);
}

void cn_strv_free(cn_strv *sv)
{
    for (int i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    memset(sv, 0, sizeof *sv);
}

/* -v SRC:DST[:ro] cannot quote: a ':' or ',' in a path would be read as a
 * separator, so such a path is refused rather than misread. */
static int mount_ok(const cn_task_mount *m, char *why, size_t whylen)
{
    if (strpbrk(m->src, ":,") || strpbrk(m->dst, ":,") || m->src[0] != '/' || m->dst[0] != '/') {
        snprintf(why, whylen, "cannot mount %s at %s: an engine mount needs absolute paths "
                              "without ':' or ','", m->src, m->dst);
        return 0;
    }
    return 1;
}

int cn_task_argv_build(const cn_task_argv_in *in, cn_strv *out, char *why, size_t whylen)
{
    cn_strv_add(out, in->engine);
    cn_strv_add(out, "run");
    cn_strv_addf(out, "--name=%s", in->name);
    cn_strv_addf(out, "--label=kowloon.run=%s", in->run_label);
    cn_strv_addf(out, "--label=kowloon.node=%s", in->node_label);
    cn_strv_addf(out, "--label=kowloon.gateway=%s", in->gateway_label);
    /* Images are the operator's: never fetched behind its back. */
    cn_strv_add(out, "--pull=never");
    /* The node captures stdout and stderr itself (capped); the engine
     * keeping a second copy would be a log flood's way around the cap. */
    cn_strv_add(out, "--log-driver=none");
    /* An init as PID 1 passes SIGTERM on to the program (a PID 1 without a
     * handler ignores it) and reaps what it leaves behind. */
    cn_strv_add(out, "--init");
    cn_strv_addf(out, "--user=%d:%d", in->uid, in->gid);
    for (int i = 0; i < in->ngroups; i++)
        cn_strv_addf(out, "--group-add=%u", in->groups[i]);
    cn_strv_add(out, "--read-only");
    cn_strv_add(out, "--security-opt=no-new-privileges");
    cn_strv_add(out, "--cap-drop=ALL");
    cn_strv_addf(out, "--pids-limit=%lld", (long long)in->pids);
    if (in->memory_bytes > 0) {
        /* swap equal to memory: no swap at all, so the limit is the limit */
        cn_strv_addf(out, "--memory=%lld", (long long)in->memory_bytes);
        cn_strv_addf(out, "--memory-swap=%lld", (long long)in->memory_bytes);
    }
    if (in->cpus > 0)
        cn_strv_addf(out, "--cpus=%.2f", in->cpus);
    if (in->cgroup_parent)
        cn_strv_addf(out, "--cgroup-parent=%s", in->cgroup_parent);
    if (in->network == CN_TASK_NET_NONE)
        cn_strv_add(out, "--network=none");
    else if (in->network == CN_TASK_NET_PEERS)
        cn_strv_add(out, "--network=host");
    /* CN_TASK_NET_EGRESS: the engine's default network */
    if (in->rm)
        cn_strv_add(out, "--rm");
    cn_strv_addf(out, "--tmpfs=/tmp:rw,nosuid,nodev,size=%lld,mode=1777",
                 (long long)in->tmp_bytes);
    cn_strv_addf(out, "--shm-size=%lld", (long long)in->tmp_bytes);
    for (int i = 0; i < in->nmounts; i++) {
        if (!mount_ok(&in->mounts[i], why, whylen))
            goto fail;
        cn_strv_addf(out, "--volume=%s:%s:%s", in->mounts[i].src, in->mounts[i].dst,
                     in->mounts[i].ro ? "ro" : "rw");
    }
    cn_strv_addf(out, "--workdir=%s", in->workdir);
    if (in->ngpus > 0 && in->kind == CN_ENGINE_PODMAN) {
        /* CDI (nvidia-ctk cdi generate): exactly the placed devices */
        for (int i = 0; i < in->ngpus; i++)
            cn_strv_addf(out, "--device=nvidia.com/gpu=%d", in->gpus[i]);
    } else if (in->ngpus > 0) {
        /* docker's --gpus takes a CSV field: the quotes keep its commas */
        char list[16 * 4 + 1] = "";
        size_t len = 0;
        for (int i = 0; i < in->ngpus && i < 16; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", i ? "," : "",
                                    in->gpus[i]);
        cn_strv_addf(out, "--gpus=\"device=%s\"", list);
    }
    for (int i = 0; i < in->nenv; i++) {
        cn_strv_add(out, "--env");
        cn_strv_add(out, in->env[i]);
    }
    /* The image ends the engine's options: what follows is the program's. */
    cn_strv_add(out, in->image);
    for (int i = 0; i < in->argc; i++)
        cn_strv_add(out, in->argv[i]);
    if (!out->oom)
        return 0;
    snprintf(why, whylen, "out of memory");
fail:
    cn_strv_free(out);
    return -1;
}

void cn_task_input_path(const cn_task_input *in, char *out, size_t len)
{
    snprintf(out, len, "/kowloon/in/%s%s", in->name, in->npy ? ".npy" : "");
}

/* Whether the tenant's environment sets name. */
static int env_has(const cn_task_spec *s, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < s->nenv; i++)
        if (strncmp(s->env[i], name, n) == 0 && s->env[i][n] == '=')
            return 1;
    return 0;
}

int cn_task_env_build(const cn_task_env_in *in, cn_strv *out)
{
    const cn_task_spec *s = in->spec;
    char path[128], upper[SVC_TASK_INPUT_NAME_MAX + 1];

    int home = 0;
    for (int i = 0; i < s->nenv; i++) {
        cn_strv_add(out, s->env[i]);
        home |= strncmp(s->env[i], "HOME=", 5) == 0;
    }
    cn_strv_addf(out, "KOWLOON_JOB_ID=%s", in->job_id);
    cn_strv_addf(out, "KOWLOON_ATTEMPT=%d", in->attempt);
    cn_strv_addf(out, "KOWLOON_NODE_RANK=%d", in->node_rank);
    cn_strv_addf(out, "KOWLOON_NNODES=%d", in->nnodes);
    cn_strv_add(out, "KOWLOON_OUT=/kowloon/out");
    cn_strv_add(out, "KOWLOON_INPUTS=/kowloon/in");
    cn_strv_add(out, "KOWLOON_PROGRESS=/kowloon/meta/progress.jsonl");
    if (!home)
        cn_strv_add(out, "HOME=/kowloon/work");
    for (int i = 0; i < s->ninputs; i++) {
        svc_task_input_env_name(s->inputs[i].name, upper, sizeof upper);
        cn_task_input_path(&s->inputs[i], path, sizeof path);
        cn_strv_addf(out, "KOWLOON_INPUT_%s=%s", upper, path);
    }
    if (in->gpus > 0) {
        /* the engine shows the placed devices as 0..n-1 */
        char list[16 * 3 + 1] = "";
        size_t len = 0;
        for (int i = 0; i < in->gpus && i < 16; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", i ? "," : "", i);
        cn_strv_addf(out, "CUDA_VISIBLE_DEVICES=%s", list);
    }
    /* One process per node: torchrun computes its own ranks from these. */
    int local = in->gpus > 0 ? in->gpus : 1;
    cn_strv_addf(out, "NNODES=%d", in->nnodes);
    cn_strv_addf(out, "NODE_RANK=%d", in->node_rank);
    cn_strv_addf(out, "WORLD_SIZE=%d", in->nnodes);
    cn_strv_addf(out, "RANK=%d", in->node_rank);
    cn_strv_add(out, "LOCAL_RANK=0");
    cn_strv_addf(out, "LOCAL_WORLD_SIZE=%d", local);
    cn_strv_addf(out, "KOWLOON_WORLD_SIZE=%d", in->nnodes);
    cn_strv_addf(out, "KOWLOON_LOCAL_WORLD_SIZE=%d", local);
    if (in->master_addr) {
        cn_strv_addf(out, "MASTER_ADDR=%s", in->master_addr);
        cn_strv_addf(out, "MASTER_PORT=%d", in->master_port);
        cn_strv_addf(out, "KOWLOON_MASTER_ADDR=%s", in->master_addr);
        cn_strv_addf(out, "KOWLOON_MASTER_PORT=%d", in->master_port);
    }
    /* left to themselves, Gloo binds the address the host name resolves to
     * (127.0.1.1 in Debian's /etc/hosts) and NCCL takes the first
     * interface it likes (a container bridge): neither reaches a peer */
    if (in->master_addr && in->ifname && in->ifname[0]) {
        if (!env_has(s, "GLOO_SOCKET_IFNAME"))
            cn_strv_addf(out, "GLOO_SOCKET_IFNAME=%s", in->ifname);
        if (!env_has(s, "NCCL_SOCKET_IFNAME"))
            cn_strv_addf(out, "NCCL_SOCKET_IFNAME==%s", in->ifname);  /* "=": exactly this one */
    }
    if (!out->oom)
        return 0;
    cn_strv_free(out);
    return -1;
}
