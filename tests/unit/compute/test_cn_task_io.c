/* test_cn_task_io.c — a task part's files on the node (compute/task/task_io.c)
 * and what it says (compute/task/task_log.c): the output scan (regular files
 * only, named by path, within a quota of bytes and files), the tenant's
 * files placed with their directories, the .npy copy, a removal that
 * follows no symlink; the log cap and its "dropped" line, the end of
 * stderr, and progress lines split anyhow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svc_npy.h"
#include "task_io.h"
#include "task_log.h"

static char tmp[256];

static int setup(void **state)
{
    snprintf(tmp, sizeof tmp, "/tmp/cn_task_io_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(cn_task_tree_remove(tmp), 0);
    return 0;
}

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const cn_task_outfile *)a)->name, ((const cn_task_outfile *)b)->name);
}

static void test_outputs_are_the_regular_files_by_path(void **state)
{
    char path[512];
    cn_task_outfile *files = NULL;
    int n = 0, skipped = 0;
    int64_t total = 0;
    put("y.npy", "12345");
    snprintf(path, sizeof path, "%s/a/b", tmp);
    assert_int_equal(cn_task_mkdir(path, 0755, getuid(), getgid()) < 0, 1);   /* a/ missing */
    snprintf(path, sizeof path, "%s/a", tmp);
    assert_int_equal(cn_task_mkdir(path, 0755, getuid(), getgid()), 0);
    snprintf(path, sizeof path, "%s/a/b", tmp);
    assert_int_equal(cn_task_mkdir(path, 0755, getuid(), getgid()), 0);
    put("a/b/c.txt", "xy");
    snprintf(path, sizeof path, "%s/link", tmp);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    snprintf(path, sizeof path, "%s/dirlink", tmp);
    assert_int_equal(symlink("/etc", path), 0);
    snprintf(path, sizeof path, "%s/fifo", tmp);
    assert_int_equal(mkfifo(path, 0644), 0);
    assert_int_equal(cn_task_outputs_scan(tmp, 100, &files, &n, &total, &skipped), 0);
    assert_int_equal(n, 2);
    qsort(files, (size_t)n, sizeof *files, by_name);
    assert_string_equal(files[0].name, "a/b/c.txt");
    assert_int_equal(files[0].size, 2);
    assert_string_equal(files[1].name, "y.npy");
    assert_int_equal(total, 7);
    assert_int_equal(skipped, 3);   /* two symlinks and a FIFO, none followed */
    free(files);
}

static void test_the_output_quota_counts_bytes_and_files(void **state)
{
    cn_task_outfile *files = (cn_task_outfile *)1;
    int n = -1;
    int64_t total = 0;
    put("a", "1234");
    put("b", "5678");
    assert_int_equal(cn_task_outputs_scan(tmp, 8, NULL, NULL, &total, NULL), 0);
    assert_int_equal(total, 8);
    assert_int_equal(cn_task_outputs_scan(tmp, 7, &files, &n, &total, NULL), CN_TASK_EQUOTA);
    assert_null(files);
    assert_int_equal(n, 0);
    char name[32];
    for (int i = 0; i < CN_TASK_OUTPUTS_MAX; i++) {
        snprintf(name, sizeof name, "f%d", i);
        put(name, "");
    }
    assert_int_equal(cn_task_outputs_scan(tmp, 1 << 20, NULL, NULL, NULL, NULL), CN_TASK_EQUOTA);
}

static void test_files_are_placed_with_their_directories_once(void **state)
{
    char path[512], buf[16] = "";
    int fd = open(tmp, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    assert_int_equal(cn_task_file_write(fd, "src/pkg/train.py", "abc", 3, getuid(), getgid()), 0);
    assert_int_equal(cn_task_file_write(fd, "src/pkg/train.py", "x", 1, getuid(), getgid()),
                     -EEXIST);
    /* a symlinked directory is not walked through */
    snprintf(path, sizeof path, "%s/out", tmp);
    assert_int_equal(symlink("/tmp", path), 0);
    assert_true(cn_task_file_write(fd, "out/evil", "x", 1, getuid(), getgid()) < 0);
    snprintf(path, sizeof path, "%s/src/pkg/train.py", tmp);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "abc");
    /* a copy of another file's bytes */
    assert_int_equal(cn_task_file_copy(fd, "copy/of.py", path, getuid(), getgid()), 0);
    snprintf(path, sizeof path, "%s/copy/of.py", tmp);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 3);
    close(fd);
}

static void test_an_npy_copy_has_numpys_header_then_the_bytes(void **state)
{
    char path[512], src[512];
    unsigned char buf[256];
    int64_t shape[2] = {2, 3};
    snprintf(src, sizeof src, "%s/raw", tmp);
    put("raw", "ABCDEF");
    snprintf(path, sizeof path, "%s/x.npy", tmp);
    assert_int_equal(cn_task_npy_write(path, "|u1", 2, shape, src, NULL, 0), 0);
    FILE *f = fopen(path, "rb");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(n, 128 + 6);
    assert_memory_equal(buf, "\x93NUMPY", 6);
    assert_non_null(memmem(buf, 128, "'descr': '|u1'", 14));
    assert_non_null(memmem(buf, 128, "'shape': (2, 3)", 15));
    assert_memory_equal(buf + 128, "ABCDEF", 6);
    /* from memory, and a known dtype parses back */
    snprintf(path, sizeof path, "%s/y.npy", tmp);
    float v[3] = {1, 2, 3};
    int64_t s1[1] = {3};
    assert_int_equal(cn_task_npy_write(path, "<f4", 1, s1, NULL, v, sizeof v), 0);
    f = fopen(path, "rb");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    svc_dtype dt;
    int ndim;
    int64_t shape2[8];
    size_t hl;
    assert_int_equal(svc_npy_parse_header(buf, n, &dt, &ndim, shape2, &hl), 0);
    assert_int_equal(dt, SVC_F32);
    assert_int_equal(shape2[0], 3);
    assert_memory_equal(buf + hl, v, sizeof v);
}

static void test_removal_follows_no_symlink(void **state)
{
    char outside[256], path[512], link[512];
    snprintf(outside, sizeof outside, "/tmp/cn_task_outside_XXXXXX");
    assert_non_null(mkdtemp(outside));
    snprintf(path, sizeof path, "%s/keep", outside);
    FILE *f = fopen(path, "w");
    fclose(f);
    snprintf(link, sizeof link, "%s/escape", tmp);
    assert_int_equal(symlink(outside, link), 0);
    snprintf(path, sizeof path, "%s/sub", tmp);
    assert_int_equal(mkdir(path, 0700), 0);
    put("sub/file", "x");
    assert_int_equal(cn_task_tree_remove(tmp), 0);
    assert_int_equal(access(tmp, F_OK), -1);
    snprintf(path, sizeof path, "%s/keep", outside);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(cn_task_tree_remove(outside), 0);
    assert_int_equal(mkdir(tmp, 0700), 0);   /* for teardown */
}

static char *slurp(const char *path, size_t *n)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    *n = fread(buf, 1, sizeof buf - 1, f);
    buf[*n] = '\0';
    fclose(f);
    return buf;
}

static void test_the_log_keeps_its_cap_and_says_what_it_dropped(void **state)
{
    char path[512];
    cn_task_log l;
    size_t n;
    snprintf(path, sizeof path, "%s/log", tmp);
    assert_int_equal(cn_task_log_open(&l, path, 10), 0);
    cn_task_log_write(&l, 0, "12345678", 8);
    cn_task_log_write(&l, 1, "abcdef", 6);
    cn_task_log_write(&l, 0, "zzzz", 4);
    assert_int_equal(l.kept, 10);
    assert_int_equal(l.dropped, 8);
    cn_task_log_close(&l);
    cn_task_log_close(&l);   /* idempotent */
    char *text = slurp(path, &n);
    assert_int_equal(strncmp(text, "12345678ab\n[kowloon] the log reached its cap of 10 bytes", 56), 0);
    assert_non_null(strstr(text, "[kowloon] dropped 8 bytes of output past the cap of 10 bytes\n"));
    assert_int_equal(l.size, (int64_t)n);
    /* nothing dropped, nothing said */
    assert_int_equal(cn_task_log_open(&l, path, 100), 0);
    cn_task_log_write(&l, 0, "ok\n", 3);
    cn_task_log_close(&l);
    assert_string_equal(slurp(path, &n), "ok\n");
}

static void test_the_end_of_stderr_is_its_last_lines(void **state)
{
    char path[512], tail[256];
    cn_task_log l;
    snprintf(path, sizeof path, "%s/log", tmp);
    assert_int_equal(cn_task_log_open(&l, path, 0), 0);   /* a zero cap still keeps the tail */
    cn_task_log_write(&l, 1, "one\ntwo\nthr", 11);
    cn_task_log_write(&l, 0, "stdout is not stderr\n", 21);
    cn_task_log_write(&l, 1, "ee\nfo\x01ur\n\n", 10);
    cn_task_log_tail(&l, 2, tail, sizeof tail);
    assert_string_equal(tail, "three\nfo?ur");
    cn_task_log_tail(&l, 10, tail, sizeof tail);
    assert_string_equal(tail, "one\ntwo\nthree\nfo?ur");
    cn_task_log_tail(&l, 10, tail, 6);
    assert_string_equal(tail, "fo?ur");
    /* a flood keeps only the last bytes */
    char big[10000];
    memset(big, 'x', sizeof big);
    big[sizeof big - 1] = '\n';
    cn_task_log_write(&l, 1, big, sizeof big);
    cn_task_log_write(&l, 1, "last\n", 5);
    cn_task_log_tail(&l, 1, tail, sizeof tail);
    assert_string_equal(tail, "last");
    cn_task_log_close(&l);
}

static void test_progress_lines_however_they_are_split(void **state)
{
    cn_task_progress p;
    json_t *latest = NULL;
    memset(&p, 0, sizeof p);
    assert_int_equal(cn_task_progress_feed(&p, "{\"epoch\": 1", 11, &latest), 0);
    assert_null(latest);
    assert_int_equal(cn_task_progress_feed(&p, ", \"loss\": 0.5}\n{\"ep", 19, &latest), 1);
    assert_int_equal(json_integer_value(json_object_get(latest, "epoch")), 1);
    assert_int_equal(cn_task_progress_feed(&p, "och\": 2}\r\nnot json\n[1,2]\n\n", 26, &latest), 1);
    assert_int_equal(json_integer_value(json_object_get(latest, "epoch")), 2);
    assert_int_equal(p.bad, 2);
    /* a line too long to keep is skipped whole, the next one counts */
    char *big = malloc(CN_TASK_PROGRESS_LINE + 10);
    memset(big, ' ', CN_TASK_PROGRESS_LINE + 10);
    big[0] = '{';
    assert_int_equal(cn_task_progress_feed(&p, big, CN_TASK_PROGRESS_LINE + 10, &latest), 0);
    assert_int_equal(cn_task_progress_feed(&p, "}\n{\"epoch\": 3}\n", 15, &latest), 1);
    assert_int_equal(json_integer_value(json_object_get(latest, "epoch")), 3);
    assert_int_equal(p.bad, 3);
    free(big);
    json_decref(latest);
}

static void test_progress_is_read_from_a_regular_file_only(void **state)
{
    char path[512], target[512];
    cn_task_progress p;
    json_t *latest = NULL;
    memset(&p, 0, sizeof p);
    snprintf(path, sizeof path, "%s/progress.jsonl", tmp);
    assert_int_equal(cn_task_progress_poll(&p, path, &latest), 0);   /* not there yet */
    put("progress.jsonl", "{\"a\": 1}\n{\"a\"");
    assert_int_equal(cn_task_progress_poll(&p, path, &latest), 1);
    assert_int_equal(json_integer_value(json_object_get(latest, "a")), 1);
    put("progress.jsonl", "{\"a\": 1}\n{\"a\": 2}\n");
    assert_int_equal(cn_task_progress_poll(&p, path, &latest), 1);
    assert_int_equal(json_integer_value(json_object_get(latest, "a")), 2);
    /* a symlink the program leaves there is not followed */
    put("secret", "{\"secret\": 1}\n");
    unlink(path);
    snprintf(target, sizeof target, "%s/secret", tmp);
    assert_int_equal(symlink(target, path), 0);
    memset(&p, 0, sizeof p);
    assert_int_equal(cn_task_progress_poll(&p, path, &latest), 0);
    unlink(path);
    assert_int_equal(mkfifo(path, 0666), 0);   /* nor is a FIFO read (it would block) */
    assert_int_equal(cn_task_progress_poll(&p, path, &latest), 0);
    json_decref(latest);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_outputs_are_the_regular_files_by_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_output_quota_counts_bytes_and_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_are_placed_with_their_directories_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_npy_copy_has_numpys_header_then_the_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removal_follows_no_symlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_log_keeps_its_cap_and_says_what_it_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_end_of_stderr_is_its_last_lines, setup, teardown),
        cmocka_unit_test(test_progress_lines_however_they_are_split),
        cmocka_unit_test_setup_teardown(test_progress_is_read_from_a_regular_file_only, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
