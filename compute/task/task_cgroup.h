/* task_cgroup.h — how the node tells an OOM kill on a cgroup v1 host with
 * the cgroupfs manager, where the engine cannot (conmon leaves
 * State.OOMKilled false there, and the container's cgroup is gone by the
 * time anyone looks). Each part gets a parent memory cgroup of the node's,
 * <memory root>/kowloon/<node tag>/<part>, that holds its memory limit (the
 * container gets no --memory of its own) and an eventfd on its
 * memory.oom_control (cgroup.event_control), which the kernel signals when
 * the parent is out of memory. The engine is told --cgroup-parent and
 * makes the container's cgroups under it, in every controller; the node
 * removes them all afterwards. On other hosts (cgroup v2, systemd) the
 * engine's --memory and its inspect report are used instead (task.c). */
#ifndef CN_TASK_CGROUP_H
#define CN_TASK_CGROUP_H

#include <stdint.h>

typedef struct cn_task_cg {
    char rel[256];            /* "/kowloon/<node tag>/<part>" (--cgroup-parent) */
    int efd;                  /* the eventfd, -1 without */
    int ofd;                  /* memory.oom_control, kept open with it */
} cn_task_cg;

/* 1 when this host has the cgroup v1 memory controller with OOM events
 * at /sys/fs/cgroup/memory (root: the default). */
int cn_task_cg_available(const char *root);

/* Creates the part's parent under root/<base>/<part> with a limit of
 * bytes (memory and memory+swap) and the OOM eventfd. 0 or -errno (then
 * nothing is left). */
int cn_task_cg_create(cn_task_cg *cg, const char *root, const char *base, const char *part,
                      int64_t bytes);

/* 1 once the kernel has said the part ran out of memory (reads the
 * eventfd without blocking; stays 1 once seen). */
int cn_task_cg_oom(cn_task_cg *cg);

/* Closes the eventfd and removes the part's cgroups under every
 * controller of fsroot (/sys/fs/cgroup: what the engine made there too).
 * Returns 1 when they are gone, 0 while a process still holds one (the
 * engine's monitor, conmon, outlives the container by a moment): cg->rel
 * is kept then for cn_task_cg_remove later. */
int cn_task_cg_destroy(cn_task_cg *cg, const char *fsroot);
/* Removes the cgroups rel (a cn_task_cg's rel) under every controller; 1
 * when they are gone. */
int cn_task_cg_remove(const char *fsroot, const char *rel);

/* Removes what a killed node left under <fsroot>/<controller>/<base>. */
void cn_task_cg_sweep(const char *fsroot, const char *base);
/* Removes <fsroot>/<controller>/<dir> under every controller where it is
 * empty (another node's cgroups in it keep it). */
void cn_task_cg_unlink_top(const char *fsroot, const char *dir);

#endif
