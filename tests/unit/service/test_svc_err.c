/* test_svc_err.c — the one error space (svc_err.h): kernels' codes are
 * errno values, the codes no errno names lie past the errno range, no two
 * meanings share a value, and svc_strerror names each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "kl.h"
#include "svc_client.h"
#include "svc_err.h"
#include "svc_npy.h"

static void test_kernel_codes_are_the_errno_values_their_names_say(void **state)
{
    (void)state;
    assert_int_equal(KL_EINVAL, -EINVAL);
    assert_int_equal(KL_ENOMEM, -ENOMEM);
    assert_int_equal(KL_ECANCELED, -ECANCELED);
    assert_int_equal(KL_ETIMEDOUT, -ETIMEDOUT);
    assert_string_equal(svc_strerror(KL_ENOTSUP), strerror(ENOTSUP));
    assert_string_equal(svc_strerror(0), "ok");
}

static void test_no_two_meanings_share_a_value(void **state)
{
    (void)state;
    /* one meaning, one value: a cancelled transfer is a cancel, a transport
     * failure an I/O error, whichever layer says it */
    assert_int_equal(SVC_XFER_ABORTED, KL_ECANCELED);
    assert_int_equal(SVC_XFER_EIO, KL_EBACKEND);
    /* and the distinct meanings of the service and kernel layers differ */
    const int codes[] = {KL_EINVAL, KL_ENOMEM, KL_ECANCELED, KL_EBACKEND, KL_ENOTSUP, KL_ETIMEDOUT,
                         KL_EDEVICE, SVC_XFER_TOOBIG, SVC_NPY_ETRUNC, SVC_NPY_EMAGIC, SVC_NPY_EVERSION, SVC_NPY_EHEADER,
                         SVC_NPY_EDTYPE, SVC_NPY_EFORTRAN, SVC_NPY_ESHAPE, SVC_NPY_EPAD};
    const size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        assert_true(codes[i] < 0);
        for (size_t j = i + 1; j < n; j++)
            if (codes[i] == codes[j])
                fail_msg("codes %zu and %zu share the value %d", i, j, codes[i]);
    }
}

static void test_codes_past_errno_are_named_by_their_block(void **state)
{
    (void)state;
    for (int c = SVC_NPY_EPAD; c <= SVC_NPY_ETRUNC; c++) {
        assert_true(c < -SVC_ERRNO_MAX);
        assert_string_equal(svc_strerror(c), svc_npy_strerror(c));
    }
    /* the node's task codes: past errno, apart from every other, named */
    assert_true(SVC_E_TASK_FAILED < -SVC_ERRNO_MAX && SVC_E_TASK_QUOTA < -SVC_ERRNO_MAX);
    assert_true(SVC_E_TASK_FAILED != SVC_E_TASK_QUOTA);
    assert_true(SVC_E_TASK_FAILED < SVC_E_BLOCK(SVC_E_BLOCK_NPY) - 63);
    assert_string_not_equal(svc_strerror(SVC_E_TASK_FAILED), "unknown error");
    assert_string_not_equal(svc_strerror(SVC_E_TASK_QUOTA), "unknown error");
    assert_string_equal(svc_strerror(SVC_E_BLOCK(7) - 1), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_codes_are_the_errno_values_their_names_say),
        cmocka_unit_test(test_no_two_meanings_share_a_value),
        cmocka_unit_test(test_codes_past_errno_are_named_by_their_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
