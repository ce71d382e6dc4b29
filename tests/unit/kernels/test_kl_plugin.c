/* test_kl_plugin.c — the CUDA plugin as the node sees it: dlopen, the one
 * exported symbol, and an answer either way. On a host without a GPU (or
 * driver) open must fail with a reason and not crash; on a GPU host it must
 * fill the table. Skipped when lib/kowloon-cuda.so is not built (no nvcc);
 * KOWLOON_PLUGIN names another path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_plugin.h"

static void *plugin_load(void)
{
    const char *path = getenv("KOWLOON_PLUGIN") ? getenv("KOWLOON_PLUGIN") : "lib/kowloon-cuda.so";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "  (plugin not loaded: %s)\n", dlerror());
    return h;
}

/* Each test gets the plugin loaded in *state (NULL where it is not built). */
static int load(void **state)
{
    *state = plugin_load();
    return 0;
}

static int unload(void **state)
{
    if (*state)
        dlclose(*state);
    return 0;
}

/* The plugin's open function, or NULL with the test skipped (no plugin). */
static kl_plugin_open_fn open_of(void *h)
{
    if (!h) {
        skip();
        return NULL;
    }
    kl_plugin_open_fn open = (kl_plugin_open_fn)dlsym(h, KL_PLUGIN_SYMBOL);
    assert_non_null(open);
    return open;
}

static void open_answers_with_devices_or_with_a_reason(void **state)
{
    kl_plugin_open_fn open = open_of(*state);
    kl_plugin p;
    memset(&p, 0, sizeof p);
    char why[256] = "unchanged";
    int rc = open(&p, why, sizeof why);
    if (rc == 0) {
        assert_int_equal(p.abi, KL_PLUGIN_ABI);
        assert_true(p.ngpus > 0);
        assert_true(p.gpus[0].memory_bytes > 0);
        assert_true(p.supports("gemm") && p.supports("sleep") && !p.supports("fft"));
        p.close();
    } else {
        fprintf(stderr, "  (no GPU here: %s)\n", why);
        assert_true(rc < 0);
        assert_true(why[0] != '\0' && strcmp(why, "unchanged") != 0);
        assert_null(p.run); /* nothing filled that a caller might use */
    }
}

static void open_without_a_table_is_refused(void **state)
{
    kl_plugin_open_fn open = open_of(*state);
    char why[128];
    assert_true(open(NULL, why, sizeof why) < 0);
    assert_true(why[0] != '\0');
}

/* The version is a symbol of its own, which the node reads before it calls
 * anything else (kl_plugin.h). */
static void abi_symbol_says_this_abi(void **state)
{
    void *h = *state;
    if (!h) {
        skip();
        return;
    }
    void *sym = dlsym(h, KL_PLUGIN_ABI_SYMBOL);
    assert_non_null(sym);
    kl_plugin_abi_fn abi;
    memcpy(&abi, &sym, sizeof abi);
    assert_int_equal(abi(), KL_PLUGIN_ABI);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(open_answers_with_devices_or_with_a_reason, load, unload),
        cmocka_unit_test_setup_teardown(open_without_a_table_is_refused, load, unload),
        cmocka_unit_test_setup_teardown(abi_symbol_says_this_abi, load, unload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
