/* test_cn_cred.c — the node's credential: kept in memory and in one 0600
 * file of a 0700 state directory, found again by a restarted node of the
 * same name, forgotten when the node leaves; a file or directory others may
 * read is not trusted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cn_cred.h"

#define CRED "kn_3q2-7wEvB1gWk0xGf3yQ1H2mZ8cV5nT4pL6sR9uA0dE"
#define CRED2 "kn_Zz9-8wEvB1gWk0xGf3yQ1H2mZ8cV5nT4pL6sR9uA0dE"

typedef struct fixture {
    char root[64];
    char dir[96];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->root, sizeof f->root, "/tmp/test_cn_cred.XXXXXX");
    if (!mkdtemp(f->root))
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s/state", f->root);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->root);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static int mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

static void test_a_new_node_has_none_until_the_gateway_gives_one(void **state)
{
    fixture *f = *state;
    cn_cred *c;
    char err[256], out[CN_CRED_SIZE];
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(mode_of(f->dir), 0700);
    assert_int_equal(cn_cred_get(c, out), -ENOENT);
    assert_int_equal(cn_cred_set(c, CRED), 0);
    assert_int_equal(cn_cred_get(c, out), 0);
    assert_string_equal(out, CRED);
    assert_int_equal(mode_of(cn_cred_path(c)), 0600);
    cn_cred_free(c);
}

static void test_a_restarted_node_finds_its_credential_and_loses_it_when_it_leaves(void **state)
{
    fixture *f = *state;
    cn_cred *c;
    char err[256], out[CN_CRED_SIZE];
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    assert_int_equal(cn_cred_set(c, CRED), 0);
    assert_int_equal(cn_cred_set(c, CRED2), 0);    /* a new one replaces it */
    cn_cred_free(c);
    /* the process died: the next one of this name has it */
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    assert_int_equal(cn_cred_get(c, out), 0);
    assert_string_equal(out, CRED2);
    cn_cred_free(c);
    /* another name does not */
    assert_int_equal(cn_cred_open(f->dir, "gpu-08", &c, err, sizeof err), 0);
    assert_int_equal(cn_cred_get(c, out), -ENOENT);
    cn_cred_free(c);
    /* it left: gone from memory and from the disk */
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    char path[256];
    snprintf(path, sizeof path, "%s", cn_cred_path(c));
    cn_cred_clear(c);
    assert_int_equal(cn_cred_get(c, out), -ENOENT);
    assert_int_equal(access(path, F_OK), -1);
    cn_cred_free(c);
}

static void test_names_cannot_leave_the_directory_or_share_a_file(void **state)
{
    fixture *f = *state;
    cn_cred *a, *b;
    char err[256], out[CN_CRED_SIZE];
    assert_int_equal(cn_cred_open(f->dir, "../escape", &a, err, sizeof err), 0);
    /* in the directory, one name with no slash and no leading dot */
    size_t n = strlen(f->dir);
    assert_memory_equal(cn_cred_path(a), f->dir, n);
    assert_int_equal(cn_cred_path(a)[n], '/');
    assert_null(strchr(cn_cred_path(a) + n + 1, '/'));
    assert_int_equal(cn_cred_path(a)[n + 1], '%');
    assert_int_equal(cn_cred_open(f->dir, "host:8091", &b, err, sizeof err), 0);
    assert_int_equal(cn_cred_set(a, CRED), 0);
    assert_int_equal(cn_cred_get(b, out), -ENOENT);
    assert_string_not_equal(cn_cred_path(a), cn_cred_path(b));
    cn_cred_free(a);
    cn_cred_free(b);
}

static void test_a_file_or_directory_others_may_read_is_not_trusted(void **state)
{
    fixture *f = *state;
    cn_cred *c;
    char err[256] = "", out[CN_CRED_SIZE];
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    assert_int_equal(cn_cred_set(c, CRED), 0);
    assert_int_equal(chmod(cn_cred_path(c), 0644), 0);
    cn_cred_free(c);
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    assert_int_equal(cn_cred_get(c, out), -ENOENT);
    assert_non_null(strstr(err, "mode 0600"));
    cn_cred_free(c);
    /* a state directory others may enter: memory only, said so */
    assert_int_equal(chmod(f->dir, 0755), 0);
    assert_int_equal(cn_cred_open(f->dir, "gpu-07", &c, err, sizeof err), 0);
    assert_non_null(strstr(err, "memory only"));
    assert_string_equal(cn_cred_path(c), "");
    assert_int_equal(cn_cred_set(c, CRED), 0);     /* in memory all the same */
    assert_int_equal(cn_cred_get(c, out), 0);
    cn_cred_free(c);
}

static void test_without_a_state_dir_it_lives_in_memory(void **state)
{
    (void)state;
    cn_cred *c;
    char err[256], out[CN_CRED_SIZE];
    assert_int_equal(cn_cred_open("", "gpu-07", &c, err, sizeof err), 0);
    assert_string_equal(cn_cred_path(c), "");
    assert_int_equal(cn_cred_set(c, "not a credential"), -EINVAL);
    assert_int_equal(cn_cred_get(c, out), -ENOENT);
    assert_int_equal(cn_cred_set(c, CRED), 0);
    assert_int_equal(cn_cred_get(c, out), 0);
    cn_cred_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_new_node_has_none_until_the_gateway_gives_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_restarted_node_finds_its_credential_and_loses_it_when_it_leaves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_cannot_leave_the_directory_or_share_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_file_or_directory_others_may_read_is_not_trusted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_a_state_dir_it_lives_in_memory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
