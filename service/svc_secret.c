/* svc_secret.c — a secret read from a file (svc_secret.h). */
#include "svc_secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int svc_secret_read(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    struct stat st;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 || fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(err, errlen, "%s is not a regular file", path);
        goto out;
    }
    if (st.st_mode & S_IRWXO) {
        rc = -EPERM;
        snprintf(err, errlen, "%s may be read or written by anyone (mode %03o); chmod o= it",
                 path, (unsigned)(st.st_mode & 0777));
        goto out;
    }
    size_t n = 0;
    for (;;) {
        ssize_t got = read(fd, buf + n, len - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n == len) {
            rc = -EFBIG;
            snprintf(err, errlen, "%s holds more than %zu bytes: not a token", path, len - 1);
            goto out;
        }
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                     buf[n - 1] == '\t'))
        n--;
    buf[n] = '\0';
    if (n == 0) {
        rc = -ENODATA;
        snprintf(err, errlen, "%s is empty", path);
    }
out:
    if (fd >= 0)
        close(fd);
    if (rc != 0 && len > 0)
        memset(buf, 0, len);
    return rc;
}
