/* task_cgroup.c — a part's parent memory cgroup and its OOM events on
 * cgroup v1 (task_cgroup.h). */
#include "task_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

int cn_task_cg_available(const char *root)
{
    char path[512];
    snprintf(path, sizeof path, "%s/cgroup.event_control", root);
    if (access(path, W_OK) != 0)
        return 0;
    snprintf(path, sizeof path, "%s/memory.oom_control", root);
    return access(path, R_OK) == 0;
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int rc = n == (ssize_t)strlen(text) ? 0 : n < 0 ? -errno : -EIO;
    close(fd);
    return rc;
}

/* Removes dir and the cgroups under it, deepest first (a cgroup's files
 * go with it; only its subdirectories need removing). 1 when dir is gone
 * (or never was), 0 while a process keeps some of it. */
static int rmdir_tree(const char *dir, int depth)
{
    DIR *d = depth < 8 ? opendir(dir) : NULL;
    if (d) {
        for (struct dirent *de; (de = readdir(d));) {
            char sub[1024];
            if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
                strcmp(de->d_name, "..") == 0)
                continue;
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            rmdir_tree(sub, depth + 1);
        }
        closedir(d);
    }
    return rmdir(dir) == 0 || errno == ENOENT;
}

/* rmdir_tree of rel under every controller of fsroot; 1 when it is gone
 * from all of them. */
static int remove_everywhere(const char *fsroot, const char *rel)
{
    int gone = 1;
    DIR *d = opendir(fsroot);
    if (!d)
        return 1;
    for (struct dirent *de; (de = readdir(d));) {
        char dir[1024];
        if (de->d_name[0] == '.')
            continue;
        snprintf(dir, sizeof dir, "%s/%s%s", fsroot, de->d_name, rel);
        gone &= rmdir_tree(dir, 0);
    }
    closedir(d);
    return gone;
}

int cn_task_cg_create(cn_task_cg *cg, const char *root, const char *base, const char *part,
                      int64_t bytes)
{
    char dir[1024], num[32], ctl[1100];
    int rc;
    memset(cg, 0, sizeof *cg);
    cg->efd = cg->ofd = -1;
    snprintf(cg->rel, sizeof cg->rel, "/%s/%s", base, part);
    /* the node's own levels first: mkdir makes one level at a time */
    snprintf(dir, sizeof dir, "%s", root);
    for (const char *p = cg->rel + 1;;) {
        size_t len = strcspn(p, "/");
        size_t n = strlen(dir);
        snprintf(dir + n, sizeof dir - n, "/%.*s", (int)len, p);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return -errno;
        if (!p[len])
            break;
        p += len + 1;
    }
    snprintf(num, sizeof num, "%lld", (long long)bytes);
    /* memory first: memsw may not be lowered below it, nor exist at all
     * (swap accounting off), which leaves no swap to count anyway */
    if ((rc = write_file(dir, "memory.limit_in_bytes", num)) < 0)
        goto fail;
    write_file(dir, "memory.memsw.limit_in_bytes", num);
    snprintf(ctl, sizeof ctl, "%s/memory.oom_control", dir);
    cg->ofd = open(ctl, O_RDONLY | O_CLOEXEC);
    cg->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cg->ofd < 0 || cg->efd < 0) {
        rc = -errno;
        goto fail;
    }
    snprintf(ctl, sizeof ctl, "%d %d", cg->efd, cg->ofd);
    if ((rc = write_file(dir, "cgroup.event_control", ctl)) < 0)
        goto fail;
    return 0;
fail:
    if (cg->efd >= 0)
        close(cg->efd);
    if (cg->ofd >= 0)
        close(cg->ofd);
    cg->efd = cg->ofd = -1;
    rmdir(dir);
    return rc;
}

int cn_task_cg_oom(cn_task_cg *cg)
{
    uint64_t v;
    if (cg->efd == -2)
        return 1;
    if (cg->efd < 0)
        return 0;
    if (read(cg->efd, &v, sizeof v) == (ssize_t)sizeof v && v > 0) {
        /* seen once is enough: the fd is closed, the answer kept */
        close(cg->efd);
        cg->efd = -2;
    }
    return cg->efd == -2;
}

int cn_task_cg_destroy(cn_task_cg *cg, const char *fsroot)
{
    if (cg->efd >= 0)
        close(cg->efd);
    if (cg->ofd >= 0)
        close(cg->ofd);
    cg->ofd = -1;
    if (cg->efd != -2)
        cg->efd = -1;
    int gone = !cg->rel[0] || remove_everywhere(fsroot, cg->rel);
    if (gone)
        cg->rel[0] = '\0';
    return gone;
}

int cn_task_cg_remove(const char *fsroot, const char *rel)
{
    return remove_everywhere(fsroot, rel);
}

void cn_task_cg_sweep(const char *fsroot, const char *base)
{
    char rel[300];
    snprintf(rel, sizeof rel, "/%s", base);
    remove_everywhere(fsroot, rel);
}

void cn_task_cg_unlink_top(const char *fsroot, const char *dir)
{
    DIR *d = opendir(fsroot);
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));) {
        char path[1024];
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/%s", fsroot, de->d_name, dir);
        rmdir(path);   /* EBUSY while another node's cgroups are in it */
    }
    closedir(d);
}
