/* cn_slurm.h — what a node started by srun inside a Slurm allocation takes from
 * that allocation (--slurm): a name unique per host and allocation, the CPUs
 * of its task, and the GPUs Slurm gave it. Only parsing of the environment,
 * read through a getenv-like function so that it is tested without Slurm. */
#ifndef CN_SLURM_H
#define CN_SLURM_H

#include <stddef.h>

/* Most GPUs a node drives (the plugin's table holds as many). */
#define CN_SLURM_MAX_GPUS 16

typedef const char *(*cn_getenv_fn)(const char *name);

typedef struct cn_slurm {
    char job_id[32];        /* SLURM_JOB_ID */
    char host[128];         /* SLURMD_NODENAME: Slurm's name of this host */
    char name[176];         /* "<host>-slurm<job_id>": two allocations on one host
                               are two Kowloon nodes */
    int cpus;               /* CPUs of this task: SLURM_CPUS_PER_TASK, else
                               SLURM_CPUS_ON_NODE; >= 1 */
    int ngpus;              /* GPUs of the allocation on this host; 0 = none */
    char gpus[256];         /* what CUDA_VISIBLE_DEVICES must be ("" hides every
                               GPU); the variable itself when Slurm set it, else
                               SLURM_STEP_GPUS, else SLURM_JOB_GPUS */
    const char *gpus_from;  /* which variable gpus came from; NULL: none was set */
    char state_dir[256];    /* where the node keeps its credential (--state-dir):
                               "<TMPDIR>/kowloon-node-<job_id>" on the host's own
                               disk ($TMPDIR when it is an absolute path, else
                               /tmp), so that a node restarted within the
                               allocation gets its name back at once */
} cn_slurm;

/* Reads the allocation from get. 0, or -1 with err saying which variable is
 * missing or malformed (not inside an allocation, a CPU count that is not a
 * positive integer, a GPU list that is not indices or GPU-/MIG- UUIDs, more
 * than CN_SLURM_MAX_GPUS GPUs). */
int cn_slurm_read(cn_getenv_fn get, cn_slurm *out, char *err, size_t errlen);

/* Concurrent runs the allocation is good for: one per GPU on a GPU host,
 * one per CPU on a CPU host (at most 256). */
int cn_slurm_slots(const cn_slurm *s);

/* CPU kernel threads per run so that slots runs together use the task's
 * CPUs and no more (at least 1). */
int cn_slurm_threads(const cn_slurm *s, int slots);

#endif
