/* svc_test_net.h — what the service and gateway unit tests that stand up a
 * peer of their own on loopback (an HTTP receiver, a name server, a server
 * that never answers) share (include after cmocka.h). */
#ifndef SVC_TEST_NET_H
#define SVC_TEST_NET_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* A socket of type (SOCK_STREAM, SOCK_DGRAM) bound to 127.0.0.1 on a port
 * the kernel picks, which goes to *port; the caller closes it. */
static inline int svc_test_loopback(int type, int *port)
{
    int fd = socket(AF_INET, type, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t l = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &l), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

#endif
