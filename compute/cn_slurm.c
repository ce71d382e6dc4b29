/* cn_slurm.c — a node's allocation from the SLURM_* environment (cn_slurm.h).
 * Everything is checked: a node that guessed its GPUs or CPUs wrong would
 * use devices or cores another job was given. */
#include "cn_slurm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when s is non-empty and every character is in set. */
static int cn__only(const char *s, const char *set)
{
    return s && s[0] && strspn(s, set) == strlen(s);
}

#define CN__DIGITS "0123456789"
#define CN__HOSTCHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" CN__DIGITS ".-_"

/* A positive CPU count from variable name; 0 when unset, -1 when malformed. */
static int cn__cpus(cn_getenv_fn get, const char *name, char *err, size_t errlen)
{
    const char *v = get(name);
    if (!v || !v[0])
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!cn__only(v, CN__DIGITS) || *end || errno || n < 1 || n > 1 << 20) {
        snprintf(err, errlen, "%s='%s' is not a positive CPU count", name, v);
        return -1;
    }
    return (int)n;
}

/* One entry of a GPU list: a device index, or a GPU-/MIG- UUID (what
 * CUDA_VISIBLE_DEVICES may hold). */
static int cn__gpu_item(const char *s, size_t n)
{
    char item[96];
    if (n == 0 || n >= sizeof item)
        return 0;
    memcpy(item, s, n);
    item[n] = '\0';
    if (cn__only(item, CN__DIGITS))
        return 1;
    return (strncmp(item, "GPU-", 4) == 0 || strncmp(item, "MIG-", 4) == 0) &&
           cn__only(item + 4, "0123456789abcdefABCDEF-/");
}

/* Checks a comma-separated GPU list and counts it into out. 0, or -1 with
 * err naming the variable. "NoDevFiles" (what Slurm writes when the
 * allocation has no GPUs) counts as none. */
static int cn__gpus(const char *name, const char *v, cn_slurm *out, char *err, size_t errlen)
{
    out->gpus_from = name;
    out->ngpus = 0;
    out->gpus[0] = '\0';
    if (!v[0] || strcmp(v, "NoDevFiles") == 0)
        return 0;
    if (strlen(v) >= sizeof out->gpus) {
        snprintf(err, errlen, "%s is too long (%zu characters)", name, strlen(v));
        return -1;
    }
    for (const char *p = v;;) {
        size_t n = strcspn(p, ",");
        if (!cn__gpu_item(p, n)) {
            snprintf(err, errlen, "%s='%s' is not a comma-separated list of GPU indices or UUIDs",
                     name, v);
            return -1;
        }
        if (++out->ngpus > CN_SLURM_MAX_GPUS) {
            snprintf(err, errlen, "%s lists more than %d GPUs", name, CN_SLURM_MAX_GPUS);
            return -1;
        }
        if (!p[n])
            break;
        p += n + 1;
    }
    snprintf(out->gpus, sizeof out->gpus, "%s", v);
    return 0;
}

int cn_slurm_read(cn_getenv_fn get, cn_slurm *out, char *err, size_t errlen)
{
    static const char *const gpu_vars[] = {"CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS",
                                           "SLURM_JOB_GPUS"};
    memset(out, 0, sizeof *out);
    const char *job = get("SLURM_JOB_ID"), *host = get("SLURMD_NODENAME");
    if (!job || !job[0]) {
        snprintf(err, errlen, "SLURM_JOB_ID is not set: not started inside a Slurm allocation");
        return -1;
    }
    if (!cn__only(job, CN__DIGITS) || strlen(job) >= sizeof out->job_id) {
        snprintf(err, errlen, "SLURM_JOB_ID='%s' is not a job number", job);
        return -1;
    }
    if (!host || !host[0]) {
        snprintf(err, errlen, "SLURMD_NODENAME is not set: start the node with srun, so that "
                              "it runs as a task on its host");
        return -1;
    }
    if (!cn__only(host, CN__HOSTCHARS) || strlen(host) >= sizeof out->host) {
        snprintf(err, errlen, "SLURMD_NODENAME='%s' is not a host name", host);
        return -1;
    }
    snprintf(out->job_id, sizeof out->job_id, "%s", job);
    snprintf(out->host, sizeof out->host, "%s", host);
    snprintf(out->name, sizeof out->name, "%s-slurm%s", host, job);
    const char *tmp = get("TMPDIR");
    if (!tmp || tmp[0] != '/' || strlen(tmp) > 160 || strstr(tmp, "/.."))
        tmp = "/tmp";
    snprintf(out->state_dir, sizeof out->state_dir, "%s/kowloon-node-%s", tmp, job);

    /* A task's own CPUs when srun was given --cpus-per-task, else every
     * CPU the allocation holds on this host (one task per host). */
    int per_task = cn__cpus(get, "SLURM_CPUS_PER_TASK", err, errlen);
    int on_node = per_task ? 0 : cn__cpus(get, "SLURM_CPUS_ON_NODE", err, errlen);
    if (per_task < 0 || on_node < 0)
        return -1;
    out->cpus = per_task ? per_task : on_node;
    if (out->cpus == 0) {
        snprintf(err, errlen, "neither SLURM_CPUS_PER_TASK nor SLURM_CPUS_ON_NODE is set");
        return -1;
    }

    /* Slurm sets CUDA_VISIBLE_DEVICES for a GPU allocation (gres/gpu); the
     * bare lists stand in where it did not. None at all: no GPU is ours. */
    for (size_t i = 0; i < sizeof gpu_vars / sizeof gpu_vars[0]; i++) {
        const char *v = get(gpu_vars[i]);
        if (v)
            return cn__gpus(gpu_vars[i], v, out, err, errlen);
    }
    return 0;
}

int cn_slurm_slots(const cn_slurm *s)
{
    int slots = s->ngpus > 0 ? s->ngpus : s->cpus;
    return slots > 256 ? 256 : slots < 1 ? 1 : slots;
}

int cn_slurm_threads(const cn_slurm *s, int slots)
{
    int t = slots > 0 ? s->cpus / slots : s->cpus;
    return t < 1 ? 1 : t;
}
