/* test_cn_task_fw.c — what a gang part may not reach (compute/task/task_fw.c):
 * deny entries read into rules (a local address covers every local one,
 * a remote one is itself, a block is a block), and the iptables words of
 * each rule. Installing needs root and iptables: the engine tests
 * (tests/integration/tasks/test_task_node.py) do that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "task_fw.h"

static char *join(const cn_strv *v)
{
    static char buf[1024];
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->n; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? " " : "", v->v[i]);
    return buf;
}

static void test_deny_entries_become_rules(void **state)
{
    cn_task_fw fw;
    char why[256];
    cn_task_fw_init(&fw, "0a0b0c0d", 65534);
    assert_string_equal(fw.chain, "KOWLOON-0a0b0c0d");
    assert_int_equal(cn_task_fw_add(&fw, "127.0.0.1:5432", why, sizeof why), 0);
    assert_int_equal(fw.nrules, 1);
    assert_true(fw.rules[0].local);
    assert_int_equal(fw.rules[0].port, 5432);
    /* the same again adds nothing */
    assert_int_equal(cn_task_fw_add(&fw, "127.0.0.1:5432", why, sizeof why), 0);
    assert_int_equal(fw.nrules, 1);
    assert_int_equal(cn_task_fw_add(&fw, "192.0.2.10:6379", why, sizeof why), 0);
    assert_false(fw.rules[1].local);
    assert_int_equal(fw.rules[1].family, 4);
    assert_string_equal(fw.rules[1].addr, "192.0.2.10");
    assert_int_equal(cn_task_fw_add(&fw, "10.0.0.0/8", why, sizeof why), 0);
    assert_string_equal(fw.rules[2].addr, "10.0.0.0/8");
    assert_int_equal(fw.rules[2].port, 0);
    assert_int_equal(cn_task_fw_add(&fw, "[2001:db8::5]:443", why, sizeof why), 0);
    assert_int_equal(fw.rules[3].family, 6);
    assert_int_equal(fw.rules[3].port, 443);
    assert_int_equal(cn_task_fw_add(&fw, "2001:db8::/32", why, sizeof why), 0);
    assert_int_equal(fw.rules[4].family, 6);
    assert_int_equal(cn_task_fw_add_url(&fw, "http://127.0.0.1:8080/", why, sizeof why), 0);
    assert_true(fw.rules[5].local);
    assert_int_equal(fw.rules[5].port, 8080);
    assert_int_equal(cn_task_fw_add_url(&fw, "http://192.0.2.1", why, sizeof why), 0);
    assert_int_equal(fw.rules[6].port, 80);
    /* refused */
    assert_int_equal(cn_task_fw_add(&fw, "127.0.0.1:0", why, sizeof why), -1);
    assert_int_equal(cn_task_fw_add(&fw, "127.0.0.1:99999", why, sizeof why), -1);
    assert_int_equal(cn_task_fw_add(&fw, "[::1:80", why, sizeof why), -1);
    assert_int_equal(cn_task_fw_add(&fw, "10.0.0.0/33", why, sizeof why), -1);
    assert_int_equal(cn_task_fw_add(&fw, ":80", why, sizeof why), -1);
    pthread_mutex_destroy(&fw.mu);
}

static void test_rules_are_iptables_words(void **state)
{
    cn_task_fw fw;
    cn_strv v = {0};
    cn_task_fw_init(&fw, "0a0b0c0d", 65534);
    cn_task_fw_rule local = {.local = 1, .port = 5432};
    assert_int_equal(cn_task_fw_rule_args(&fw, &local, 4, &v), 0);
    assert_string_equal(join(&v), "-w -A KOWLOON-0a0b0c0d -p tcp -m addrtype --dst-type LOCAL "
                                  "--dport 5432 -j REJECT --reject-with tcp-reset");
    cn_strv_free(&v);
    assert_int_equal(cn_task_fw_rule_args(&fw, &local, 6, &v), 0);   /* both families */
    cn_strv_free(&v);
    cn_task_fw_rule remote = {.family = 4, .addr = "192.0.2.10"};
    assert_int_equal(cn_task_fw_rule_args(&fw, &remote, 4, &v), 0);
    assert_string_equal(join(&v), "-w -A KOWLOON-0a0b0c0d -d 192.0.2.10 -j REJECT");
    cn_strv_free(&v);
    assert_int_equal(cn_task_fw_rule_args(&fw, &remote, 6, &v), -1);
    cn_strv_free(&v);
    pthread_mutex_destroy(&fw.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deny_entries_become_rules),
        cmocka_unit_test(test_rules_are_iptables_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
