/* cn_proc.c — child processes without a shell (cn_proc.h). */
#include "cn_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "svc_util.h"

int cn_proc_status(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return 255;
}

int cn_proc_which(const char *name, char *const envp[], char *out, size_t outlen)
{
    const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    if (strchr(name, '/')) {
        snprintf(out, outlen, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -ENOENT;
    }
    for (int i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0)
            path = envp[i] + 5;
    while (*path) {
        size_t len = strcspn(path, ":");
        struct stat st;
        if (len > 0 && (size_t)snprintf(out, outlen, "%.*s/%s", (int)len, path, name) < outlen &&
            stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return 0;
        path += len + (path[len] == ':');
    }
    return -ENOENT;
}

int cn_proc_spawn(char *const argv[], char *const envp[], const char *cwd, pid_t *pid, int *out_fd,
                  int *err_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, rc;
    char exe[4096];

    if ((rc = cn_proc_which(argv[0], envp, exe, sizeof exe)) < 0)
        return rc;
    if ((out_fd && pipe2(po, O_CLOEXEC | O_NONBLOCK) != 0) ||
        (err_fd && pipe2(pe, O_CLOEXEC | O_NONBLOCK) != 0)) {
        rc = -errno;
        goto cleanup_pipes;
    }
    /* the child's ends block: a program may not expect a non-blocking stdout */
    if ((po[1] >= 0 && fcntl(po[1], F_SETFL, 0) != 0) ||
        (pe[1] >= 0 && fcntl(pe[1], F_SETFL, 0) != 0)) {
        rc = -errno;
        goto cleanup_pipes;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (po[1] >= 0)
        posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (pe[1] >= 0)
        posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    else
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawn_file_actions_addchdir_np(&fa, cwd ? cwd : "/");
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    rc = -posix_spawn(pid, exe, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
cleanup_pipes:
    if (po[1] >= 0)
        close(po[1]);
    if (pe[1] >= 0)
        close(pe[1]);
    if (rc < 0) {
        if (po[0] >= 0)
            close(po[0]);
        if (pe[0] >= 0)
            close(pe[0]);
        return rc;
    }
    if (out_fd)
        *out_fd = po[0];
    if (err_fd)
        *err_fd = pe[0];
    return 0;
}

/* A child's two output pipes as cn_proc_run reads them: what fits of each
 * into its buffer (one byte kept for the NUL), the rest read and dropped. */
typedef struct cn_pipes {
    int fds[2];                 /* stdout, stderr; -1 once closed */
    char *buf[2];
    size_t cap[2], len[2];
} cn_pipes;

/* Reads one chunk of pipe i that poll found ready; closes it at its end. */
static void cn__pipe_read(cn_pipes *p, int i)
{
    char buf[4096];
    ssize_t r = read(p->fds[i], buf, sizeof buf);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close(p->fds[i]);
        p->fds[i] = -1;
        return;
    }
    if (r < 0)
        return;
    size_t take = p->cap[i] > p->len[i] + 1 ? p->cap[i] - p->len[i] - 1 : 0;
    if ((size_t)r < take)
        take = (size_t)r;
    if (take) {
        memcpy(p->buf[i] + p->len[i], buf, take);
        p->len[i] += take;
    }
}

/* Reads both pipes until they close or the deadline passes, then closes
 * them. */
static void cn__pipes_drain(cn_pipes *p, int64_t deadline)
{
    while (p->fds[0] >= 0 || p->fds[1] >= 0) {
        struct pollfd pf[2];
        int np = 0;
        for (int i = 0; i < 2; i++)
            if (p->fds[i] >= 0)
                pf[np++] = (struct pollfd){.fd = p->fds[i], .events = POLLIN};
        int64_t left = deadline - svc_now_mono_ms();
        if (left <= 0)
            break;
        if (poll(pf, (nfds_t)np, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++)
            if (p->fds[i] >= 0)
                cn__pipe_read(p, i);
    }
    for (int i = 0; i < 2; i++)
        if (p->fds[i] >= 0)
            close(p->fds[i]);
}

/* Reaps pid into *wstatus, killing it once the deadline has passed: 0, or
 * -ETIMEDOUT when it had to be killed. */
static int cn__reap(pid_t pid, int64_t deadline, int *wstatus)
{
    for (;;) {
        pid_t w = waitpid(pid, wstatus, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            return 0;
        if (svc_now_mono_ms() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR)
                ;
            return -ETIMEDOUT;
        }
        svc_sleep_ms(5);
    }
}

int cn_proc_run(char *const argv[], char *const envp[], int timeout_ms, char *out, size_t outlen)
{
    char errbuf[4096];
    cn_pipes p = {.fds = {-1, -1}, .buf = {out, errbuf}, .cap = {out ? outlen : 0, sizeof errbuf}};
    int wstatus = 0;
    pid_t pid;

    int rc = cn_proc_spawn(argv, envp, NULL, &pid, &p.fds[0], &p.fds[1]);
    if (rc < 0)
        return rc;
    int64_t deadline = svc_now_mono_ms() + timeout_ms;
    cn__pipes_drain(&p, deadline);
    /* the pipes closed (or time ran out): reap, killing it past the deadline */
    if (cn__reap(pid, deadline, &wstatus) < 0) {
        if (out && outlen)
            out[p.len[0]] = '\0';
        return -ETIMEDOUT;
    }
    if (out && outlen) {
        size_t olen = p.len[0], elen = p.len[1];
        size_t take = outlen - 1 - olen < elen ? outlen - 1 - olen : elen;
        memcpy(out + olen, errbuf, take);
        out[olen + take] = '\0';
    }
    return cn_proc_status(wstatus);
}
