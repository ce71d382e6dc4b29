/* test_cn_backend.c — backend selection: the CPU when asked, the CPU with a
 * reason naming the plugin when the plugin cannot be used, and a refusal
 * when CUDA was demanded. The built plugin, where present, is loaded too:
 * on a machine without a GPU it must fall back and say why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cn_backend.h"

static void test_cpu_requested_loads_no_plugin(void **state)
{
    (void)state;
    cn_backend b;
    assert_int_equal(cn_backend_open(&b, "cpu", "/nonexistent/kowloon-cuda.so"), 0);
    assert_int_equal(b.kind, CN_BACKEND_CPU);
    assert_null(b.dl);
    assert_string_equal(b.reason, "backend cpu requested");
    assert_string_equal(cn_backend_name(&b), "cpu");
    assert_int_equal(cn_backend_ngpus(&b), 0);
    assert_int_equal(cn_backend_supports(&b, "gemm"), 0);
    json_t *gpus = cn_backend_gpus_json(&b);
    assert_int_equal(json_array_size(gpus), 0);
    json_decref(gpus);
    cn_backend_close(&b);
}

static void test_auto_without_plugin_falls_back_naming_the_path(void **state)
{
    (void)state;
    cn_backend b;
    assert_int_equal(cn_backend_open(&b, "auto", "/nonexistent/lib/kowloon-cuda.so"), 0);
    assert_int_equal(b.kind, CN_BACKEND_CPU);
    assert_non_null(strstr(b.reason, "/nonexistent/lib/kowloon-cuda.so"));
    assert_non_null(strstr(b.reason, "No such file"));
    cn_backend_close(&b);
}

static void test_cuda_without_plugin_is_refused_with_reason(void **state)
{
    (void)state;
    cn_backend b;
    assert_true(cn_backend_open(&b, "cuda", "/nonexistent/lib/kowloon-cuda.so") < 0);
    assert_int_equal(b.kind, CN_BACKEND_CPU);
    assert_non_null(strstr(b.reason, "/nonexistent/lib/kowloon-cuda.so"));
    cn_backend_close(&b);
}

static void test_unknown_mode_is_refused(void **state)
{
    (void)state;
    cn_backend b;
    assert_true(cn_backend_open(&b, "tpu", "x.so") < 0);
    assert_non_null(strstr(b.reason, "tpu"));
}

static void test_file_that_is_no_library_falls_back_with_dlerror(void **state)
{
    (void)state;
    char path[] = "/tmp/test_cn_backend_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not an ELF file\n", 16), 16);
    close(fd);
    cn_backend b;
    assert_int_equal(cn_backend_open(&b, "auto", path), 0);
    unlink(path);
    assert_int_equal(b.kind, CN_BACKEND_CPU);
    /* "plugin /tmp/...: /tmp/...: invalid ELF header" (dlerror's words) */
    assert_non_null(strstr(b.reason, path));
    assert_true(strlen(b.reason) > strlen("plugin ") + strlen(path) + 2);
}

/* The real plugin, when it was built (make lib/kowloon-cuda.so). */
static void test_built_plugin_loads_or_falls_back_with_reason(void **state)
{
    (void)state;
    const char *path = getenv("KOWLOON_PLUGIN") ? getenv("KOWLOON_PLUGIN") : "lib/kowloon-cuda.so";
    if (access(path, F_OK) != 0) {
        fprintf(stderr, "  (skipped: %s not built)\n", path);
        skip();
    }
    cn_backend b;
    assert_int_equal(cn_backend_open(&b, "auto", path), 0);
    fprintf(stderr, "  backend=%s reason=%s\n", cn_backend_name(&b), b.reason);
    assert_non_null(strstr(b.reason, path));
    if (b.kind == CN_BACKEND_CUDA) {
        assert_true(cn_backend_ngpus(&b) >= 1);
        assert_int_equal(cn_backend_supports(&b, "saxpy"), 1);
        json_t *gpus = cn_backend_gpus_json(&b);
        assert_true(json_array_size(gpus) >= 1);
        json_decref(gpus);
    } else {
        assert_null(b.dl);
        assert_int_equal(cn_backend_ngpus(&b), 0);
    }
    cn_backend_close(&b);
}

/* The stand-ins of tests/plugins/fake_cuda.c (Makefile: KL_FAKE_PLUGIN_DIR). */
static const char *fake(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", KL_FAKE_PLUGIN_DIR, name);
    assert_int_equal(access(path, F_OK), 0);
    return path;
}

static void test_a_plugin_of_this_abi_opens_and_says_what_it_found(void **state)
{
    (void)state;
    cn_backend b;
    assert_int_equal(cn_backend_open(&b, "cuda", fake("kl_fake_cuda.so")), 0);
    assert_int_equal(b.kind, CN_BACKEND_CUDA);
    assert_int_equal(cn_backend_ngpus(&b), 1);
    assert_non_null(strstr(b.reason, "Fake GPU"));
    assert_non_null(strstr(cn_backend_info(&b), "fake plugin"));
    cn_backend_close(&b);
    assert_string_equal(cn_backend_info(&b), "");
}

/* Its open aborts: were it called, this test would die. */
static void test_a_plugin_of_another_abi_is_refused_before_it_runs_anything(void **state)
{
    (void)state;
    cn_backend b;
    const char *path = fake("kl_fake_cuda_abi4.so");
    assert_int_equal(cn_backend_open(&b, "auto", path), 0);
    assert_int_equal(b.kind, CN_BACKEND_CPU);
    assert_null(b.dl);
    assert_non_null(strstr(b.reason, path));
    char want[64];
    snprintf(want, sizeof want, "built for ABI 4; this node needs ABI %d", KL_PLUGIN_ABI);
    assert_non_null(strstr(b.reason, want));
    assert_true(cn_backend_open(&b, "cuda", path) < 0);
}

static void test_a_plugin_without_the_abi_symbol_is_refused_before_it_runs_anything(void **state)
{
    (void)state;
    cn_backend b;
    assert_int_equal(cn_backend_open(&b, "auto", fake("kl_fake_cuda_noabi.so")), 0);
    assert_int_equal(b.kind, CN_BACKEND_CPU);
    assert_non_null(strstr(b.reason, "it has no kl_cuda_plugin_abi (built for ABI 4 or older)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_requested_loads_no_plugin),
        cmocka_unit_test(test_auto_without_plugin_falls_back_naming_the_path),
        cmocka_unit_test(test_cuda_without_plugin_is_refused_with_reason),
        cmocka_unit_test(test_unknown_mode_is_refused),
        cmocka_unit_test(test_file_that_is_no_library_falls_back_with_dlerror),
        cmocka_unit_test(test_built_plugin_loads_or_falls_back_with_reason),
        cmocka_unit_test(test_a_plugin_of_this_abi_opens_and_says_what_it_found),
        cmocka_unit_test(test_a_plugin_of_another_abi_is_refused_before_it_runs_anything),
        cmocka_unit_test(test_a_plugin_without_the_abi_symbol_is_refused_before_it_runs_anything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
