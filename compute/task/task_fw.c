/* task_fw.c — the gang parts' firewall chain (task_fw.h). */
#include "task_fw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cn_proc.h"
#include "svc_log.h"
#include "svc_url.h"

#define CN_FW_TIMEOUT_MS 15000

static char *const cn__fw_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

void cn_task_fw_init(cn_task_fw *fw, const char *tag, unsigned uid)
{
    memset(fw, 0, sizeof *fw);
    pthread_mutex_init(&fw->mu, NULL);
    snprintf(fw->chain, sizeof fw->chain, "KOWLOON-%.16s", tag);
    fw->uid = uid;
    if (cn_proc_which("iptables", cn__fw_env, fw->iptables, sizeof fw->iptables) < 0)
        fw->iptables[0] = '\0';
    if (cn_proc_which("ip6tables", cn__fw_env, fw->ip6tables, sizeof fw->ip6tables) < 0)
        fw->ip6tables[0] = '\0';
}

/* 1 when sa is one of this host's addresses: the unspecified address, a
 * loopback one, or one a socket can bind. */
static int is_local(const struct sockaddr *sa, socklen_t len)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        if (a == 0 || (a >> 24) == 127)
            return 1;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a))
            return 1;
    }
    struct sockaddr_storage ss;
    memcpy(&ss, sa, len);
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&ss, len) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static int add_rule(cn_task_fw *fw, const cn_task_fw_rule *r, char *why, size_t whylen)
{
    for (int i = 0; i < fw->nrules; i++)
        if (memcmp(&fw->rules[i], r, sizeof *r) == 0)
            return 0;
    if (fw->nrules == CN_TASK_FW_RULES) {
        snprintf(why, whylen, "more than %d deny rules", CN_TASK_FW_RULES);
        return -1;
    }
    fw->rules[fw->nrules++] = *r;
    return 0;
}

/* Adds host (a name, an address or a CIDR block) and port (0: all). */
static int add_host(cn_task_fw *fw, const char *host, int port, char *why, size_t whylen)
{
    cn_task_fw_rule r = {.port = port};
    const char *slash = strchr(host, '/');
    if (slash) {
        /* a block: never local as a whole; its family by its spelling */
        char addr[64];
        unsigned char buf[16];
        snprintf(addr, sizeof addr, "%.*s", (int)(slash - host), host);
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        r.family = inet_pton(AF_INET, addr, buf) == 1 ? 4 : inet_pton(AF_INET6, addr, buf) == 1 ? 6 : 0;
        if (!r.family || *end || bits < 0 || bits > (r.family == 4 ? 32 : 128)) {
            snprintf(why, whylen, "\"%s\" is not an address block", host);
            return -1;
        }
        snprintf(r.addr, sizeof r.addr, "%s", host);
        return add_rule(fw, &r, why, whylen);
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (e != 0) {
        snprintf(why, whylen, "cannot resolve \"%s\": %s", host, gai_strerror(e));
        return -1;
    }
    int rc = 0;
    for (struct addrinfo *ai = res; ai && rc == 0; ai = ai->ai_next) {
        cn_task_fw_rule one = {.port = port};
        if (is_local(ai->ai_addr, ai->ai_addrlen)) {
            one.local = 1;
        } else if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) {
            one.family = ai->ai_family == AF_INET ? 4 : 6;
            const void *a = ai->ai_family == AF_INET
                                ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
            inet_ntop(ai->ai_family, a, one.addr, sizeof one.addr);
        } else {
            continue;
        }
        rc = add_rule(fw, &one, why, whylen);
    }
    freeaddrinfo(res);
    return rc;
}

int cn_task_fw_add(cn_task_fw *fw, const char *entry, char *why, size_t whylen)
{
    char host[256];
    int port = 0;
    const char *colon;
    if (entry[0] == '[') {
        const char *close = strchr(entry, ']');
        if (!close) {
            snprintf(why, whylen, "\"%s\": an IPv6 address needs its ']'", entry);
            return -1;
        }
        snprintf(host, sizeof host, "%.*s", (int)(close - entry - 1), entry + 1);
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(entry, ':');
        if (colon && strchr(entry, ':') != colon)
            colon = NULL;   /* a bare IPv6 address: every port */
        snprintf(host, sizeof host, "%.*s", colon ? (int)(colon - entry) : (int)strlen(entry),
                 entry);
    }
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 1 || p > 65535) {
            snprintf(why, whylen, "\"%s\": the port must be 1 to 65535", entry);
            return -1;
        }
        port = (int)p;
    }
    if (!host[0]) {
        snprintf(why, whylen, "\"%s\" names no host", entry);
        return -1;
    }
    return add_host(fw, host, port, why, whylen);
}

int cn_task_fw_add_url(cn_task_fw *fw, const char *url, char *why, size_t whylen)
{
    svc_url u;
    if (svc_url_parse(url, "http", &u) != 0) {
        snprintf(why, whylen, "\"%s\" is not a URL", url);
        return -1;
    }
    char host[256];
    size_t n = strlen(u.host);
    if (n >= 2 && u.host[0] == '[' && u.host[n - 1] == ']')
        snprintf(host, sizeof host, "%.*s", (int)n - 2, u.host + 1);
    else
        snprintf(host, sizeof host, "%s", u.host);
    int port = u.port ? u.port : strcmp(u.scheme, "https") == 0 ? 443 : 80;
    return add_host(fw, host, port, why, whylen);
}

int cn_task_fw_rule_args(const cn_task_fw *fw, const cn_task_fw_rule *r, int family, cn_strv *out)
{
    if (r->family && r->family != family)
        return -1;
    cn_strv_add(out, "-w");
    cn_strv_add(out, "-A");
    cn_strv_add(out, fw->chain);
    if (r->port) {
        cn_strv_add(out, "-p");
        cn_strv_add(out, "tcp");
    }
    if (r->local) {
        cn_strv_add(out, "-m");
        cn_strv_add(out, "addrtype");
        cn_strv_add(out, "--dst-type");
        cn_strv_add(out, "LOCAL");
    } else {
        cn_strv_add(out, "-d");
        cn_strv_add(out, r->addr);
    }
    if (r->port) {
        cn_strv_add(out, "--dport");
        cn_strv_addf(out, "%d", r->port);
    }
    cn_strv_add(out, "-j");
    cn_strv_add(out, "REJECT");
    if (r->port) {
        cn_strv_add(out, "--reject-with");
        cn_strv_add(out, "tcp-reset");
    }
    return out->oom ? -1 : 0;
}

/* Runs exe with the arguments of args (a cn_strv without the executable). */
static int run(const char *exe, char *const *args, char *out, size_t outlen)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = exe;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return cn_proc_run((char *const *)argv, cn__fw_env, CN_FW_TIMEOUT_MS, out, outlen);
}

/* The jump from OUTPUT for the task uid; op "-I" or "-D". */
static int jump(const cn_task_fw *fw, const char *exe, const char *op, char *out, size_t outlen)
{
    char uid[16];
    snprintf(uid, sizeof uid, "%u", fw->uid);
    char *const args[] = {"-w", (char *)op, "OUTPUT", "-m", "owner", "--uid-owner", uid, "-j",
                          (char *)fw->chain, NULL};
    return run(exe, args, out, outlen);
}

/* Drops the chain of exe: the jump (all copies), the rules, the chain. */
static void drop(const cn_task_fw *fw, const char *exe)
{
    char out[512];
    for (int i = 0; i < 16 && jump(fw, exe, "-D", out, sizeof out) == 0; i++)
        ;
    char *const flush[] = {"-w", "-F", (char *)fw->chain, NULL};
    char *const del[] = {"-w", "-X", (char *)fw->chain, NULL};
    run(exe, flush, out, sizeof out);
    run(exe, del, out, sizeof out);
}

static int install(cn_task_fw *fw, const char *exe, int family)
{
    char out[1024];
    drop(fw, exe);   /* a chain a killed node left */
    char *const mk[] = {"-w", "-N", fw->chain, NULL};
    int rc = run(exe, mk, out, sizeof out);
    for (int i = 0; rc == 0 && i < fw->nrules; i++) {
        cn_strv args = {0};
        if (cn_task_fw_rule_args(fw, &fw->rules[i], family, &args) == 0)
            rc = run(exe, args.v, out, sizeof out);
        cn_strv_free(&args);
    }
    if (rc == 0)
        rc = jump(fw, exe, "-I", out, sizeof out);
    if (rc != 0) {
        out[strcspn(out, "\n")] = '\0';
        snprintf(fw->why, sizeof fw->why, "%.100s failed (%d): %.380s", exe, rc, out);
        drop(fw, exe);
        return -1;
    }
    return 0;
}

int cn_task_fw_ensure(cn_task_fw *fw)
{
    pthread_mutex_lock(&fw->mu);
    if (fw->state == 0) {
        if (!fw->iptables[0]) {
            snprintf(fw->why, sizeof fw->why, "iptables not found");
            fw->state = -1;
        } else if (geteuid() != 0) {
            snprintf(fw->why, sizeof fw->why, "the node does not run as root");
            fw->state = -1;
        } else if (install(fw, fw->iptables, 4) < 0 ||
                   (fw->ip6tables[0] && install(fw, fw->ip6tables, 6) < 0)) {
            drop(fw, fw->iptables);
            fw->state = -1;
        } else {
            fw->state = 1;
            svc_info("task firewall: chain %s refuses %d destination(s) to uid %u on the host "
                     "network", fw->chain, fw->nrules, fw->uid);
        }
        if (fw->state < 0)
            svc_warn("task firewall: cannot install chain %s: %s", fw->chain, fw->why);
    }
    int rc = fw->state == 1 ? 0 : -1;
    pthread_mutex_unlock(&fw->mu);
    return rc;
}

void cn_task_fw_remove(cn_task_fw *fw)
{
    pthread_mutex_lock(&fw->mu);
    if (fw->state == 1) {
        drop(fw, fw->iptables);
        if (fw->ip6tables[0])
            drop(fw, fw->ip6tables);
        svc_info("task firewall: chain %s removed", fw->chain);
    }
    fw->state = 0;
    pthread_mutex_unlock(&fw->mu);
}
