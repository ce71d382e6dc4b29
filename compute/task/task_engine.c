/* task_engine.c — the OCI engine (task_engine.h). Every call goes through
 * cn_proc_run: argv, never a shell. */
#include "task_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cn_proc.h"
#include "svc_log.h"
#include "svc_util.h"

#define CN_ENGINE_TIMEOUT_MS 30000
/* What of the node's environment an engine may need: its paths and
 * configuration, never the node's own settings (KOWLOON_*: the token). */
static const char *const cn__engine_env[] = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF", "REGISTRY_AUTH_FILE", NULL};

extern char **environ;

const char *cn_engine_name(const cn_engine *e)
{
    return e->kind == CN_ENGINE_PODMAN ? "podman" : e->kind == CN_ENGINE_DOCKER ? "docker" : "none";
}

static int build_env(cn_engine *e, const char *conf)
{
    cn_strv sv = {0};
    int has_path = 0;
    for (char **v = environ; v && *v; v++) {
        for (int i = 0; cn__engine_env[i]; i++) {
            size_t n = strlen(cn__engine_env[i]);
            if (strncmp(*v, cn__engine_env[i], n) == 0 && (*v)[n] == '=' &&
                !(conf && strcmp(cn__engine_env[i], "CONTAINERS_CONF") == 0)) {
                cn_strv_add(&sv, *v);
                has_path |= i == 0;
            }
        }
    }
    if (!has_path)
        cn_strv_add(&sv, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    if (conf)
        cn_strv_addf(&sv, "CONTAINERS_CONF=%s", conf);
    if (sv.oom) {
        cn_strv_free(&sv);
        return -1;
    }
    if (!sv.v)
        cn_strv_add(&sv, "PATH=/usr/bin:/bin");
    e->envp = sv.v;
    return sv.oom ? -1 : 0;
}

int cn_engine_exec(const cn_engine *e, const char *const *args, int timeout_ms, char *out,
                   size_t outlen)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = e->cmd;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return cn_proc_run((char *const *)argv, e->envp, timeout_ms, out, outlen);
}

/* The last non-empty line of s (where an error ends up: stderr follows
 * stdout), trimmed, into out. */
static void last_line(const char *s, char *out, size_t len)
{
    const char *end = s + strlen(s);
    while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > s && start[-1] != '\n')
        start--;
    snprintf(out, len, "%.*s", (int)(end - start), start);
}

/* The first line of s, trimmed, into out. */
static void first_line(const char *s, char *out, size_t len)
{
    size_t n = strcspn(s, "\r\n");
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    snprintf(out, len, "%.*s", (int)n, s);
}

int cn_engine_open(cn_engine *e, const char *which, const char *cmd, const char *conf, char *err,
                   size_t errlen)
{
    char out[4096];
    memset(e, 0, sizeof *e);
    pthread_mutex_init(&e->mu, NULL);
    e->images = json_array();
    int named = which && strcmp(which, "auto") != 0;
    if (which && strcmp(which, "none") == 0) {
        snprintf(e->reason, sizeof e->reason, "--task-engine none");
        return 0;
    }
    cn_engine_kind kind = which && strcmp(which, "docker") == 0 ? CN_ENGINE_DOCKER
                          : !which || strcmp(which, "auto") == 0 || strcmp(which, "podman") == 0
                              ? CN_ENGINE_PODMAN
                              : CN_ENGINE_NONE;
    if (kind == CN_ENGINE_NONE) {
        snprintf(err, errlen, "--task-engine must be podman, docker, none or auto");
        return -1;
    }
    if (build_env(e, kind == CN_ENGINE_PODMAN ? conf : NULL) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *name = cmd && cmd[0] ? cmd : kind == CN_ENGINE_PODMAN ? "podman" : "docker";
    if (cn_proc_which(name, e->envp, e->cmd, sizeof e->cmd) < 0) {
        snprintf(e->reason, sizeof e->reason, "%s not found", name);
        goto absent;
    }
    int rc = cn_engine_exec(e, (const char *[]){"version", "--format", "{{.Client.Version}}", NULL},
                            CN_ENGINE_TIMEOUT_MS, out, sizeof out);
    if (rc != 0) {
        char line[256];
        last_line(out, line, sizeof line);
        snprintf(e->reason, sizeof e->reason, "%.200s version failed (%d): %.250s", e->cmd, rc, line);
        goto absent;
    }
    first_line(out, e->version, sizeof e->version);
    e->kind = kind;
    /* how the engine makes cgroups decides how the node sees an OOM kill */
    const char *info = kind == CN_ENGINE_PODMAN ? "{{.Host.CgroupManager}}" : "{{.CgroupDriver}}";
    if (cn_engine_exec(e, (const char *[]){"info", "--format", info, NULL}, CN_ENGINE_TIMEOUT_MS,
                       out, sizeof out) == 0)
        first_line(out, e->cgroup_manager, sizeof e->cgroup_manager);
    cn_engine_images_refresh(e);
    svc_info("task engine %s %s at %s cgroup_manager=%s images=%zu", cn_engine_name(e),
             e->version, e->cmd, e->cgroup_manager[0] ? e->cgroup_manager : "?",
             json_array_size(e->images));
    return 0;
absent:
    if (named) {
        snprintf(err, errlen, "--task-engine %s: %s", which, e->reason);
        return -1;
    }
    svc_info("no task engine: %s (tasks are refused)", e->reason);
    return 0;
}

void cn_engine_close(cn_engine *e)
{
    for (int i = 0; e->envp && e->envp[i]; i++)
        free(e->envp[i]);
    free(e->envp);
    json_decref(e->images);
    pthread_mutex_destroy(&e->mu);
    memset(e, 0, sizeof *e);
}

int cn_engine_images_refresh(cn_engine *e)
{
    static char out[1 << 16];
    static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
    if (e->kind == CN_ENGINE_NONE)
        return -1;
    pthread_mutex_lock(&out_mu);
    int rc = cn_engine_exec(e, (const char *[]){"images", "--format", "{{.Repository}}:{{.Tag}}",
                                                NULL},
                            CN_ENGINE_TIMEOUT_MS, out, sizeof out);
    json_t *list = rc == 0 ? json_array() : NULL;
    for (char *line = out, *next; list && *line; line = next) {
        size_t n = strcspn(line, "\n");
        next = line + n + (line[n] == '\n');
        line[n] = '\0';
        if (n == 0 || strstr(line, "<none>") || json_array_size(list) >= CN_ENGINE_IMAGES_MAX)
            continue;
        json_array_append_new(list, json_string(line));
    }
    pthread_mutex_unlock(&out_mu);
    if (!list)
        return -1;
    pthread_mutex_lock(&e->mu);
    if (!json_equal(e->images, list))
        e->images_gen++;
    json_decref(e->images);
    e->images = list;
    e->images_at = svc_now_mono_ms();
    pthread_mutex_unlock(&e->mu);
    return 0;
}

unsigned cn_engine_images_gen(cn_engine *e, int64_t max_age_ms)
{
    if (e->kind == CN_ENGINE_NONE)
        return 0;
    pthread_mutex_lock(&e->mu);
    int stale = svc_now_mono_ms() - e->images_at >= max_age_ms;
    pthread_mutex_unlock(&e->mu);
    if (stale)
        cn_engine_images_refresh(e);
    pthread_mutex_lock(&e->mu);
    unsigned gen = e->images_gen;
    pthread_mutex_unlock(&e->mu);
    return gen;
}

json_t *cn_engine_describe(cn_engine *e)
{
    if (e->kind == CN_ENGINE_NONE)
        return json_pack("{s:s, s:s}", "engine", "none", "reason", e->reason);
    pthread_mutex_lock(&e->mu);
    json_t *images = json_deep_copy(e->images);
    pthread_mutex_unlock(&e->mu);
    return json_pack("{s:s, s:s, s:o}", "engine", cn_engine_name(e), "version", e->version,
                     "images", images ? images : json_array());
}

int cn_engine_remove_orphans(cn_engine *e, const char *node, const char *gateway)
{
    static char out[1 << 16];
    char f1[600], f2[600], msg[512];
    int n = 0;
    if (e->kind == CN_ENGINE_NONE)
        return 0;
    snprintf(f1, sizeof f1, "label=kowloon.node=%s", node);
    snprintf(f2, sizeof f2, "label=kowloon.gateway=%s", gateway);
    int rc = cn_engine_exec(e, (const char *[]){"ps", "-a", "--filter", f1, "--filter", f2,
                                                "--format", "{{.Names}}", NULL},
                            CN_ENGINE_TIMEOUT_MS, out, sizeof out);
    if (rc != 0) {
        first_line(out, msg, sizeof msg);
        svc_warn("task engine: cannot list this node's old containers (%d): %s", rc, msg);
        return -1;
    }
    for (char *line = out, *next; *line; line = next) {
        size_t len = strcspn(line, "\n");
        next = line + len + (line[len] == '\n');
        line[len] = '\0';
        if (len == 0)
            continue;
        if (cn_engine_rm(e, line) == 0) {
            svc_warn("removed orphaned task container %s (left by an earlier process of node %s)",
                     line, node);
            n++;
        }
    }
    return n;
}

int cn_engine_kill(const cn_engine *e, const char *name, const char *sig)
{
    char out[512];
    int rc = cn_engine_exec(e, (const char *[]){"kill", "--signal", sig, name, NULL},
                            CN_ENGINE_TIMEOUT_MS, out, sizeof out);
    if (rc != 0)
        svc_debug("%s kill --signal %s %s: %d %s", cn_engine_name(e), sig, name, rc, out);
    return rc == 0 ? 0 : -1;
}

int cn_engine_rm(const cn_engine *e, const char *name)
{
    char out[512], line[256];
    int rc = cn_engine_exec(e, (const char *[]){"rm", "-f", name, NULL}, CN_ENGINE_TIMEOUT_MS,
                            out, sizeof out);
    if (rc != 0 && !strstr(out, "no such container") && !strstr(out, "No such container")) {
        first_line(out, line, sizeof line);
        svc_warn("%s rm -f %s failed (%d): %s", cn_engine_name(e), name, rc, line);
        return -1;
    }
    return 0;
}

int cn_engine_oom_killed(const cn_engine *e, const char *name)
{
    char out[256];
    int rc = cn_engine_exec(e, (const char *[]){"inspect", "--format", "{{.State.OOMKilled}}",
                                                name, NULL},
                            CN_ENGINE_TIMEOUT_MS, out, sizeof out);
    if (rc != 0)
        return -1;
    return strncmp(out, "true", 4) == 0;
}

int cn_engine_image_exists(const cn_engine *e, const char *image)
{
    char out[512];
    int rc = cn_engine_exec(e, (const char *[]){"image", "inspect", "--format", "{{.Id}}", image,
                                                NULL},
                            CN_ENGINE_TIMEOUT_MS, out, sizeof out);
    if (rc == 0)
        return 1;
    /* podman: "image not known"; docker: "No such image" */
    return strstr(out, "not known") || strstr(out, "No such image") || strstr(out, "no such image")
               ? 0 : -1;
}
