/* cn_cred.c — the node's credential in memory and in its state file (cn_cred.h). */
#include "cn_cred.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Room for the state directory and the file's name in it. */
#define CRED_PATH_MAX 2048

struct cn_cred {
    pthread_mutex_t mu;
    char cred[CN_CRED_SIZE];     /* "" when none */
    char path[CRED_PATH_MAX];         /* "" when in memory only */
    char dir[CRED_PATH_MAX];
};

/* name with every byte but A-Za-z0-9 . _ - written as %XX: a file name
 * that cannot climb out of the directory and that no other name shares. */
static int escape_name(const char *name, char *out, size_t len)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || (*p == '.' && p != (const unsigned char *)name);
        if (n + 4 >= len)
            return -ENAMETOOLONG;
        n += (size_t)(plain ? snprintf(out + n, len - n, "%c", *p)
                            : snprintf(out + n, len - n, "%%%02X", *p));
    }
    return n > 0 ? 0 : -EINVAL;
}

/* 1 when s has the form of a credential the gateway gives. */
static int cred_form(const char *s)
{
    size_t n = strlen(s);
    if (n < 8 || n >= CN_CRED_SIZE)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* Loads the file, if any; a file others may read is not trusted to be
 * this node's secret alone, and is left unused. */
static void cred_load(cn_cred *c, char *err, size_t errlen)
{
    struct stat st;
    char buf[CN_CRED_SIZE + 2];
    int fd = open(c->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno != ENOENT)
            snprintf(err, errlen, "cannot read %s: %s", c->path, strerror(errno));
        return;
    }
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) == 0)
        n = read(fd, buf, sizeof buf - 1);
    else
        snprintf(err, errlen, "%s is not a regular file of mode 0600; ignored", c->path);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    if (cred_form(buf))
        memcpy(c->cred, buf, strlen(buf) + 1); /* cred_form: shorter than CN_CRED_SIZE */
    else
        snprintf(err, errlen, "%s does not hold a credential; ignored", c->path);
    memset(buf, 0, sizeof buf);
}

int cn_cred_open(const char *dir, const char *name, cn_cred **out, char *err, size_t errlen)
{
    char file[600];
    struct stat st;
    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    cn_cred *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    if (dir == NULL || dir[0] == '\0')
        return 0;
    if (escape_name(name, file, sizeof file) != 0) {
        snprintf(err, errlen, "the node name cannot name a file; the credential is kept in "
                              "memory only");
        return 0;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create the state directory %s (%s); the credential is "
                              "kept in memory only, and a restart must wait out the node timeout",
                 dir, strerror(errno));
        return 0;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 077) != 0 ||
        st.st_uid != geteuid()) {
        snprintf(err, errlen, "the state directory %s is not a directory of mode 0700 owned by "
                              "this user; the credential is kept in memory only", dir);
        return 0;
    }
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    snprintf(c->path, sizeof c->path, "%s/%s.credential", dir, file);
    cred_load(c, err, errlen);
    return 0;
}

void cn_cred_free(cn_cred *c)
{
    if (c == NULL)
        return;
    memset(c->cred, 0, sizeof c->cred);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int cn_cred_get(const cn_cred *c, char out[CN_CRED_SIZE])
{
    cn_cred *m = (cn_cred *)c;
    pthread_mutex_lock(&m->mu);
    int rc = m->cred[0] ? 0 : -ENOENT;
    memcpy(out, m->cred, CN_CRED_SIZE);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Writes cred to a temporary file of mode 0600 beside the state file,
 * fsyncs it, renames it over the state file and fsyncs the directory: a
 * crash leaves the old credential or the new, never half of one. */
static int cred_write(const cn_cred *c, const char *cred)
{
    char tmp[CRED_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.new", c->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    size_t n = strlen(cred);
    int rc = 0;
    errno = 0;
    if (fchmod(fd, 0600) != 0 || write(fd, cred, n) != (ssize_t)n || write(fd, "\n", 1) != 1 ||
        fsync(fd) != 0)
        rc = errno ? -errno : -EIO;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, c->path) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    int d = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0) {
        fsync(d);
        close(d);
    }
    return 0;
}

int cn_cred_set(cn_cred *c, const char *cred)
{
    if (cred == NULL || !cred_form(cred))
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    memcpy(c->cred, cred, strlen(cred) + 1);
    int rc = c->path[0] ? cred_write(c, cred) : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void cn_cred_clear(cn_cred *c)
{
    pthread_mutex_lock(&c->mu);
    memset(c->cred, 0, sizeof c->cred);
    if (c->path[0])
        unlink(c->path);
    pthread_mutex_unlock(&c->mu);
}

const char *cn_cred_path(const cn_cred *c)
{
    return c->path;
}
