/* test_kl_args.c — the catalog and the generic argument checks of kl.c:
 * defaults, param ranges, input dtypes, ranks and limits, and that every
 * refusal names the field at fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl.h"
#include "kl_kernels.h"
#include "kl_test_args.h"

static void set_param(kl_args *a, const char *name, double v)
{
    int i = kl_param_index(a->kernel, name);
    assert_true(i >= 0);
    a->params[i] = (kl_value){.num = v, .given = 1};
}

static kl_tensor shaped(kl_dtype dt, int ndim, int64_t d0, int64_t d1)
{
    kl_tensor t = {.dtype = dt, .ndim = ndim, .shape = {d0, d1}};
    return t;
}

static void catalog_lists_every_public_kernel_once(void **state)
{
    static const char *const names[] = {"saxpy", "reduce", "gemm", "sleep", "montecarlo_option",
                                        "heat2d", "kmeans", "allreduce", "train_mlp"};
    (void)state;
    int n = 0;
    const kl_kernel *const *cat = kl_catalog(&n);
    assert_int_equal(n, (int)(sizeof names / sizeof names[0]));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++)
            seen += strcmp(cat[j]->name, names[i]) == 0;
        assert_int_equal(seen, 1);
    }
    for (int i = 0; i < n; i++) {
        assert_true(cat[i]->nparams <= KL_MAX_PARAMS);
        assert_true(cat[i]->ninputs <= KL_MAX_IO && cat[i]->noutputs <= KL_MAX_IO);
        assert_non_null(cat[i]->run_cpu);
        assert_ptr_equal(kl_kernel_find(cat[i]->name), cat[i]);
    }
}

static void unknown_names_are_not_found(void **state)
{
    (void)state;
    assert_null(kl_kernel_find("fft"));
    assert_null(kl_kernel_find(NULL));
    assert_int_equal(kl_param_index(kl_kernel_find("gemm"), "gamma"), KL_EINVAL);
    assert_int_equal(kl_input_index(kl_kernel_find("gemm"), "d"), KL_EINVAL);
}

static void internal_indices_agree_with_the_specs(void **state)
{
    (void)state;
    const kl_kernel *s = kl_kernel_find("saxpy"), *r = kl_kernel_find("reduce"), *g = kl_kernel_find("gemm"),
                    *z = kl_kernel_find("sleep");
    assert_int_equal(kl_param_index(s, "a"), KL_SAXPY_A);
    assert_int_equal(kl_input_index(s, "x"), KL_SAXPY_X);
    assert_int_equal(kl_input_index(s, "y"), KL_SAXPY_Y);
    assert_int_equal(kl_param_index(r, "op"), KL_REDUCE_OP);
    assert_int_equal(kl_input_index(r, "x"), KL_REDUCE_X);
    assert_string_equal(r->params[KL_REDUCE_OP].choices[KL_REDUCE_MEAN], "mean");
    assert_string_equal(r->params[KL_REDUCE_OP].choices[KL_REDUCE_MIN], "min");
    assert_int_equal(kl_param_index(g, "alpha"), KL_GEMM_ALPHA);
    assert_int_equal(kl_param_index(g, "beta"), KL_GEMM_BETA);
    assert_int_equal(kl_input_index(g, "a"), KL_GEMM_A);
    assert_int_equal(kl_input_index(g, "b"), KL_GEMM_B);
    assert_int_equal(kl_input_index(g, "c"), KL_GEMM_C);
    assert_int_equal(kl_param_index(z, "seconds"), KL_SLEEP_SECONDS);
}

static void defaults_fill_only_params_not_given(void **state)
{
    (void)state;
    kl_args a = args_for("gemm");
    set_param(&a, "beta", 2.5);
    kl_args_defaults(&a);
    assert_true(a.params[KL_GEMM_ALPHA].num == 1.0 && !a.params[KL_GEMM_ALPHA].given);
    assert_true(a.params[KL_GEMM_BETA].num == 2.5 && a.params[KL_GEMM_BETA].given);
    kl_args r = args_for("reduce");
    kl_args_defaults(&r);
    assert_int_equal(r.params[KL_REDUCE_OP].choice, KL_REDUCE_SUM);
}

static void missing_required_param_names_it(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_args a = args_for("sleep");
    kl_args_defaults(&a);
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "params.seconds");
    assert_non_null(strstr(err.message, "required"));
}

static void number_outside_range_or_not_finite_is_refused(void **state)
{
    (void)state;
    const double bad[] = {3600.5, -0.001, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_err err = {0};
        kl_args a = args_for("sleep");
        set_param(&a, "seconds", bad[i]);
        assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
        assert_string_equal(err.field, "params.seconds");
        assert_non_null(strstr(err.message, "between 0 and 3600"));
    }
    kl_args a = args_for("sleep");
    set_param(&a, "seconds", 3600);
    assert_int_equal(kl_args_check(&a, NULL), 0);
}

static void float32_params_must_fit_float32(void **state)
{
    (void)state;
    kl_err err = {0};
    float x = 1, y = 1;
    kl_tensor tx = {.dtype = KL_F32, .ndim = 1, .shape = {1}, .data = &x};
    kl_tensor ty = tx;
    ty.data = &y;
    kl_args a = args_for("saxpy");
    a.inputs[KL_SAXPY_X] = &tx;
    a.inputs[KL_SAXPY_Y] = &ty;
    set_param(&a, "a", 1e39);
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "params.a");
}

static void enum_choice_outside_list_is_refused(void **state)
{
    (void)state;
    kl_err err = {0};
    float x = 1;
    kl_tensor tx = {.dtype = KL_F32, .ndim = 1, .shape = {1}, .data = &x};
    kl_args a = args_for("reduce");
    a.inputs[KL_REDUCE_X] = &tx;
    a.params[KL_REDUCE_OP] = (kl_value){.choice = 4, .given = 1};
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "params.op");
    assert_non_null(strstr(err.message, "one of sum, min, max, mean"));
}

static void missing_required_input_names_it(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_tensor x = shaped(KL_F32, 1, 4, 0);
    kl_args a = args_for("saxpy");
    set_param(&a, "a", 2);
    a.inputs[KL_SAXPY_X] = &x;
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.y");
}

static void wrong_dtype_is_refused_with_both_names(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_tensor x = shaped(KL_F64, 1, 4, 0), y = shaped(KL_F32, 1, 4, 0);
    kl_args a = args_for("saxpy");
    set_param(&a, "a", 2);
    a.inputs[KL_SAXPY_X] = &x;
    a.inputs[KL_SAXPY_Y] = &y;
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.x");
    assert_string_equal(err.message, "inputs.x has dtype float64; saxpy needs float32");
}

static void wrong_rank_is_refused(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_tensor ta = shaped(KL_F32, 1, 6, 0), tb = shaped(KL_F32, 2, 6, 2);
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.a");
    assert_string_equal(err.message, "inputs.a has rank 1; gemm needs rank 2 to 3");

    kl_tensor scalar = {.dtype = KL_F32, .ndim = 0};
    kl_args r = args_for("reduce");
    kl_args_defaults(&r);
    r.inputs[KL_REDUCE_X] = &scalar;
    assert_int_equal(kl_args_check(&r, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.x");
}

static void negative_dimension_is_refused(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_tensor x = shaped(KL_F32, 2, 3, -1);
    kl_args r = args_for("reduce");
    kl_args_defaults(&r);
    r.inputs[KL_REDUCE_X] = &x;
    assert_int_equal(kl_args_check(&r, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.x");
}

static void tensors_past_the_element_limit_are_refused_without_overflow(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{1 << 15, (1 << 15) + 1}, {(int64_t)1 << 40, (int64_t)1 << 40},
                                 {INT64_MAX, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        kl_err err = {0};
        kl_tensor x = shaped(KL_F32, 2, shapes[i][0], shapes[i][1]);
        kl_args r = args_for("reduce");
        kl_args_defaults(&r);
        r.inputs[KL_REDUCE_X] = &x;
        assert_int_equal(kl_args_check(&r, &err), KL_EINVAL);
        assert_string_equal(err.field, "inputs.x");
        assert_non_null(strstr(err.message, "1073741824"));
    }
    /* Exactly at the limit passes; the check reads shapes only. */
    kl_tensor x = shaped(KL_F32, 2, 1 << 15, 1 << 15);
    kl_args r = args_for("reduce");
    kl_args_defaults(&r);
    r.inputs[KL_REDUCE_X] = &x;
    assert_int_equal(kl_args_check(&r, NULL), 0);
}

static void optional_input_may_be_absent(void **state)
{
    (void)state;
    kl_tensor ta = shaped(KL_F32, 2, 2, 3), tb = shaped(KL_F32, 2, 3, 4);
    kl_args a = args_for("gemm");
    kl_args_defaults(&a);
    a.inputs[KL_GEMM_A] = &ta;
    a.inputs[KL_GEMM_B] = &tb;
    assert_int_equal(kl_args_check(&a, NULL), 0);
}

static void run_refuses_an_input_with_a_shape_but_no_data(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_tensor x = shaped(KL_F32, 1, 8, 0);
    kl_tensor outs[1];
    kl_args r = args_for("reduce");
    kl_args_defaults(&r);
    r.inputs[KL_REDUCE_X] = &x;
    assert_int_equal(kl_run_cpu(&r, outs, &err), KL_EINVAL);
    assert_string_equal(err.field, "inputs.x");
}

static void check_without_kernel_is_refused(void **state)
{
    (void)state;
    kl_err err = {0};
    kl_args a;
    memset(&a, 0, sizeof a);
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_int_equal(kl_args_check(NULL, NULL), KL_EINVAL);
}

static void dtype_names_round_trip(void **state)
{
    (void)state;
    const kl_dtype all[] = {KL_F32, KL_F64, KL_I32};
    for (size_t i = 0; i < 3; i++) {
        kl_dtype d;
        assert_int_equal(kl_dtype_parse(kl_dtype_name(all[i]), &d), 0);
        assert_int_equal(d, all[i]);
    }
    kl_dtype d;
    assert_int_equal(kl_dtype_parse("float16", &d), KL_EINVAL);
    assert_int_equal(kl_dtype_parse(NULL, &d), KL_EINVAL);
    assert_int_equal(kl_dtype_size(KL_F64), 8);
    assert_int_equal(kl_dtype_size(KL_I32), 4);
}

static void tensor_alloc_gives_zeroed_data_and_free_clears(void **state)
{
    (void)state;
    kl_tensor t;
    const int64_t shape[3] = {2, 3, 5};
    assert_int_equal(kl_tensor_alloc(&t, KL_F64, 3, shape), 0);
    assert_int_equal(kl_tensor_elems(&t), 30);
    assert_int_equal(kl_tensor_bytes(&t), 240);
    for (int i = 0; i < 30; i++)
        assert_true(((double *)t.data)[i] == 0.0);
    kl_tensor_free(&t);
    assert_null(t.data);
    kl_tensor_free(NULL);

    assert_int_equal(kl_tensor_alloc(&t, KL_F32, 0, NULL), 0); /* a scalar */
    assert_int_equal(kl_tensor_elems(&t), 1);
    kl_tensor_free(&t);

    const int64_t huge[2] = {1 << 20, 1 << 20}, neg[1] = {-3};
    assert_int_equal(kl_tensor_alloc(&t, KL_F32, 2, huge), KL_EINVAL);
    assert_int_equal(kl_tensor_alloc(&t, KL_F32, 1, neg), KL_EINVAL);
    assert_int_equal(kl_tensor_alloc(&t, KL_F32, KL_MAX_DIMS + 1, huge), KL_EINVAL);
}

/* A counting stand-in for the CUDA plugin's page-locked allocator. */
static int host_allocs, host_frees;

static void *counting_alloc(size_t bytes)
{
    host_allocs++;
    void *p = malloc(bytes);
    if (p)
        memset(p, 0xab, bytes);  /* dirty, as cudaHostAlloc memory may be */
    return p;
}

static void counting_free(void *p)
{
    host_frees += p != NULL;
    free(p);
}

static void tensors_take_buffers_from_the_host_allocator_a_gpu_node_sets(void **state)
{
    (void)state;
    kl_tensor t;
    const int64_t shape[1] = {1000};
    host_allocs = host_frees = 0;
    kl_host_allocator_set(counting_alloc, counting_free);
    assert_int_equal(kl_tensor_alloc(&t, KL_F32, 1, shape), 0);
    assert_int_equal(host_allocs, 1);
    for (int i = 0; i < 1000; i++)
        assert_true(((float *)t.data)[i] == 0.0f);  /* zeroed all the same */
    kl_tensor_free(&t);
    assert_int_equal(host_frees, 1);
    void *p = kl_host_alloc(64);
    assert_non_null(p);
    kl_host_free(p);
    kl_host_free(NULL);
    assert_int_equal(host_allocs, 2);
    assert_int_equal(host_frees, 2);
    kl_host_allocator_set(NULL, NULL);  /* back to calloc/free */
    assert_int_equal(kl_tensor_alloc(&t, KL_F32, 1, shape), 0);
    kl_tensor_free(&t);
    assert_int_equal(host_allocs, 2);
}

static void err_set_tolerates_null_field_and_null_err(void **state)
{
    (void)state;
    kl_err err;
    memset(&err, 'x', sizeof err);
    kl_err_set(&err, NULL, "gemm: %s", "failed");
    assert_string_equal(err.field, "");
    assert_string_equal(err.message, "gemm: failed");
    kl_err_set(NULL, "params.a", "ignored");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(catalog_lists_every_public_kernel_once),
        cmocka_unit_test(unknown_names_are_not_found),
        cmocka_unit_test(internal_indices_agree_with_the_specs),
        cmocka_unit_test(defaults_fill_only_params_not_given),
        cmocka_unit_test(missing_required_param_names_it),
        cmocka_unit_test(number_outside_range_or_not_finite_is_refused),
        cmocka_unit_test(float32_params_must_fit_float32),
        cmocka_unit_test(enum_choice_outside_list_is_refused),
        cmocka_unit_test(missing_required_input_names_it),
        cmocka_unit_test(wrong_dtype_is_refused_with_both_names),
        cmocka_unit_test(wrong_rank_is_refused),
        cmocka_unit_test(negative_dimension_is_refused),
        cmocka_unit_test(tensors_past_the_element_limit_are_refused_without_overflow),
        cmocka_unit_test(optional_input_may_be_absent),
        cmocka_unit_test(run_refuses_an_input_with_a_shape_but_no_data),
        cmocka_unit_test(check_without_kernel_is_refused),
        cmocka_unit_test(dtype_names_round_trip),
        cmocka_unit_test(tensor_alloc_gives_zeroed_data_and_free_clears),
        cmocka_unit_test(tensors_take_buffers_from_the_host_allocator_a_gpu_node_sets),
        cmocka_unit_test(err_set_tolerates_null_field_and_null_err),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
