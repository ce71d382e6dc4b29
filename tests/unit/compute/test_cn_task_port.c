/* test_cn_task_port.c — where a gang's rank 0 puts MASTER_PORT
 * (compute/task/task_cfg.c): --task-master-ports read, a port something
 * is bound to skipped, picks made in turn so that gangs starting together
 * get different ports, and none when the whole range is taken. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "task.h"

static void test_the_range_is_read(void **state)
{
    int lo = 0, hi = 0;
    assert_int_equal(cn_task_ports_parse(CN_TASK_MASTER_PORTS, &lo, &hi), 0);
    assert_int_equal(lo, 29500);
    assert_int_equal(hi, 29999);
    assert_int_equal(cn_task_ports_parse("40000", &lo, &hi), 0);
    assert_int_equal(lo, 40000);
    assert_int_equal(hi, 40000);
    static const char *const bad[] = {"", "-", "29500-", "-29999", "80-90", "1023-2000",
                                      "3000-2000", "60000-65536", "29500-29999x", "a-b",
                                      "29500 29999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(cn_task_ports_parse(bad[i], &lo, &hi), -1);
}

/* A socket listening on port on every address, or -1. */
static int hold(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Three ports in a row that nothing holds, below the ephemeral range: the
 * first of them, held by *fd (closed by the caller). */
static int three_free(int *fd)
{
    for (int p = 20000; p < 28000; p += 3) {
        int a = hold(p), b = hold(p + 1), c = hold(p + 2);
        if (b >= 0)
            close(b);
        if (c >= 0)
            close(c);
        if (a >= 0 && b >= 0 && c >= 0) {
            *fd = a;
            return p;
        }
        if (a >= 0)
            close(a);
    }
    return -1;
}

static void test_a_taken_port_is_skipped_and_picks_take_turns(void **state)
{
    int held = -1;
    int p = three_free(&held);
    assert_true(p > 0);
    cn_task_cfg cfg = {.port_lo = p, .port_hi = p + 2, .port_next = 7};
    /* p is held: the picks go round p + 1 and p + 2 (7 % 3 = 1: p + 1 first) */
    assert_int_equal(cn_task_master_port(&cfg), p + 1);
    assert_int_equal(cn_task_master_port(&cfg), p + 2);
    assert_int_equal(cn_task_master_port(&cfg), p + 1);
    /* a port picked and then bound by its program is not picked again */
    int fd = hold(p + 2);
    assert_true(fd >= 0);
    assert_int_equal(cn_task_master_port(&cfg), p + 1);
    assert_int_equal(cn_task_master_port(&cfg), p + 1);
    /* the whole range taken: none */
    int fd1 = hold(p + 1);
    assert_true(fd1 >= 0);
    assert_int_equal(cn_task_master_port(&cfg), -1);
    close(fd1);
    close(fd);
    close(held);
    int next = p + (int)(cfg.port_next % 3);
    assert_int_equal(cn_task_master_port(&cfg), next);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_range_is_read),
        cmocka_unit_test(test_a_taken_port_is_skipped_and_picks_take_turns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
