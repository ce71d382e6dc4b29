/* test_cn_args.c — the node's request decoder: a run request's JSON becomes
 * kl_args, or a 400/422 that names the field at fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cn_args.h"
#include "cn_rdv.h"

/* Decodes text; returns the decoder's result and leaves status and err. */
static int decode(const char *text, cn_run_req *req, int *status, kl_err *err)
{
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    assert_non_null(body);
    memset(err, 0, sizeof *err);
    *status = 0;
    int rc = cn_run_req_decode(body, req, status, err);
    json_decref(body);
    return rc;
}

static void expect_refused(const char *text, int status, const char *field)
{
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode(text, &req, &st, &err), -1);
    assert_int_equal(st, status);
    assert_string_equal(err.field, field);
    assert_true(err.message[0] != '\0');
}

static void test_saxpy_request_decodes_b64_and_data_inputs(void **state)
{
    (void)state;
    cn_run_req req;
    kl_err err;
    int st;
    /* x = [1, 2] as little-endian float32 in base64; y as a JSON array. */
    const char *text = "{\"job_id\":\"9f0c\",\"attempt\":3,\"kernel\":\"saxpy\",\"params\":{\"a\":2},"
                       "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"b64\":\"AACAPwAAAEA=\"},"
                       "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[10,20]}},"
                       "\"timeout_s\":60,\"backend\":\"cpu\",\"gpus\":2}";
    assert_int_equal(decode(text, &req, &st, &err), 0);
    assert_string_equal(req.run_id, "9f0c.3");
    assert_int_equal(req.attempt, 3);
    assert_int_equal(req.timeout_s, 60);
    assert_int_equal(req.target, CN_TARGET_CPU);
    assert_int_equal(req.gpus, 2);
    assert_string_equal(req.ka.args.kernel->name, "saxpy");
    assert_true(req.ka.args.params[0].num == 2.0);
    const kl_tensor *x = req.ka.args.inputs[kl_input_index(req.ka.args.kernel, "x")];
    const kl_tensor *y = req.ka.args.inputs[kl_input_index(req.ka.args.kernel, "y")];
    assert_non_null(x);
    assert_non_null(y);
    assert_true(((const float *)x->data)[1] == 2.0f);
    assert_true(((const float *)y->data)[0] == 10.0f);
    cn_run_req_clear(&req);
}

static void test_defaults_fill_absent_optional_fields(void **state)
{
    (void)state;
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"reduce\","
                            "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[5]}}}",
                            &req, &st, &err),
                     0);
    assert_int_equal(req.timeout_s, 3600);
    assert_int_equal(req.target, CN_TARGET_ANY);
    assert_int_equal(req.gpus, 1);
    assert_int_equal(req.ka.args.params[0].choice, 0); /* op = sum */
    assert_int_equal(req.ka.args.params[0].given, 0);
    cn_run_req_clear(&req);
}

static void test_unknown_param_is_422_naming_it(void **state)
{
    (void)state;
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"params\":{\"seconds\":1,\"nap\":2}}",
                   422, "params.nap");
}

static void test_param_of_wrong_type_is_422(void **state)
{
    (void)state;
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"params\":{\"seconds\":\"1\"}}",
                   422, "params.seconds");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"reduce\",\"params\":{\"op\":3},"
                   "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[5]}}}",
                   422, "params.op");
}

static void test_enum_param_outside_its_choices_is_422(void **state)
{
    (void)state;
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"reduce\",\"params\":{\"op\":\"prod\"},"
                   "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[5]}}}",
                   422, "params.op");
}

static void test_param_out_of_range_or_missing_is_422(void **state)
{
    (void)state;
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"params\":{\"seconds\":4000}}",
                   422, "params.seconds");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\"}", 422, "params.seconds");
}

/* The v0 catalog has no integer parameter, so the check runs against a
 * kernel made for the test, through the same binder the node uses. */
static const kl_param_spec int_params[] = {
    {.name = "n", .type = KL_PARAM_INT, .required = 1, .min = 1, .max = 100},
};
static const kl_kernel int_kernel = {.name = "count", .params = int_params, .nparams = 1};

static int bind_n(const char *params_text, kl_err *err)
{
    json_t *params = json_loads(params_text, 0, NULL);
    svc_kargs ka;
    assert_non_null(params);
    memset(err, 0, sizeof *err);
    int rc = svc_kargs_bind(&int_kernel, params, NULL, KL_MAX_ELEMS, 1, &ka, err);
    if (rc == 0)
        assert_true(ka.args.params[0].num == 7.0);
    svc_kargs_free(&ka);
    json_decref(params);
    return rc;
}

static void test_integer_param_must_be_integral(void **state)
{
    (void)state;
    kl_err err;
    assert_int_equal(bind_n("{\"n\": 7}", &err), 0);
    assert_int_equal(bind_n("{\"n\": 7.0}", &err), 0);
    assert_int_equal(bind_n("{\"n\": 7.5}", &err), -1);
    assert_string_equal(err.field, "params.n");
    assert_int_equal(bind_n("{\"n\": 0}", &err), -1);
    assert_string_equal(err.field, "params.n");
}

static void test_inputs_are_checked_against_the_kernel(void **state)
{
    (void)state;
    /* unknown input */
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":1},"
                   "\"inputs\":{\"z\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[5]}}}",
                   422, "inputs.z");
    /* missing input */
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":1},"
                   "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[5]}}}",
                   422, "inputs.y");
    /* base64 that does not fill the shape */
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":1},"
                   "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"b64\":\"AACAPw==\"},"
                   "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}}}",
                   422, "inputs.x");
    /* wrong dtype */
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":1},"
                   "\"inputs\":{\"x\":{\"dtype\":\"int32\",\"shape\":[1],\"data\":[5]},"
                   "\"y\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1]}}}",
                   422, "inputs.x");
    /* shapes that disagree */
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"saxpy\",\"params\":{\"a\":1},"
                   "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[5]},"
                   "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}}}",
                   422, "inputs.y");
}

static void test_malformed_envelope_is_400(void **state)
{
    (void)state;
    expect_refused("{\"attempt\":1,\"kernel\":\"sleep\"}", 400, "job_id");
    expect_refused("{\"job_id\":\"a/b\",\"attempt\":1,\"kernel\":\"sleep\"}", 400, "job_id");
    expect_refused("{\"job_id\":\"a\",\"kernel\":\"sleep\"}", 400, "attempt");
    expect_refused("{\"job_id\":\"a\",\"attempt\":\"1\",\"kernel\":\"sleep\"}", 400, "attempt");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1}", 400, "kernel");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"backend\":\"tpu\"}", 400,
                   "backend");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"params\":[1]}", 400,
                   "params");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"timeout_s\":1.5}", 400,
                   "timeout_s");
}

static void test_out_of_range_envelope_and_unknown_kernel_are_422(void **state)
{
    (void)state;
    expect_refused("{\"job_id\":\"a\",\"attempt\":0,\"kernel\":\"sleep\"}", 422, "attempt");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"timeout_s\":0}", 422,
                   "timeout_s");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"sleep\",\"gpus\":17}", 422, "gpus");
    expect_refused("{\"job_id\":\"a\",\"attempt\":1,\"kernel\":\"fft\"}", 422, "kernel");
}

static void test_ident_reads_only_the_run_id(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:s, s:i, s:s}", "job_id", "job_1", "attempt", 12, "kernel", "nope");
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(cn_run_req_ident(body, &req, &st, &err), 0);
    assert_string_equal(req.run_id, "job_1.12");
    cn_run_req_clear(&req);
    json_decref(body);
}

#define SAXPY_RUN(extra) "{\"job_id\":\"j1\",\"attempt\":2,\"kernel\":\"saxpy\",\"params\":{\"a\":1}," \
    "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}," \
    "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[3,4]}},\"gpus\":2" extra "}"

static void test_dist_and_gpu_ids_are_read(void **state)
{
    (void)state;
    cn_run_req req;
    kl_err err;
    int st;
    assert_int_equal(decode(SAXPY_RUN(""), &req, &st, &err), 0);
    assert_int_equal(req.node_rank, -1);
    assert_int_equal(req.nodes, 1);
    assert_int_equal(req.ngpu_ids, 0);
    cn_run_req_clear(&req);
    assert_int_equal(decode(SAXPY_RUN(",\"gpu_ids\":[3,1],\"dist\":{\"nodes\":3,\"node_rank\":2,"
                                      "\"world\":6,\"shard_lo\":40,\"shard_hi\":60}"),
                            &req, &st, &err), 0);
    assert_int_equal(req.node_rank, 2);
    assert_int_equal(req.nodes, 3);
    assert_int_equal(req.shard_lo, 40);
    assert_int_equal(req.shard_hi, 60);
    assert_int_equal(req.ngpu_ids, 2);
    assert_int_equal(req.gpu_ids[0], 3);
    assert_int_equal(req.gpu_ids[1], 1);
    cn_run_req_clear(&req);
}

static void test_bad_dist_is_refused_naming_it(void **state)
{
    (void)state;
    expect_refused(SAXPY_RUN(",\"dist\":[]"), 400, "dist");
    expect_refused(SAXPY_RUN(",\"dist\":{\"node_rank\":0,\"world\":2}"), 400, "dist");
    expect_refused(SAXPY_RUN(",\"dist\":{\"nodes\":2,\"node_rank\":2,\"world\":4}"), 422, "node_rank");
    expect_refused(SAXPY_RUN(",\"dist\":{\"nodes\":2,\"node_rank\":1,\"world\":3}"), 422, "dist");
    expect_refused(SAXPY_RUN(",\"dist\":{\"nodes\":2,\"node_rank\":1,\"world\":4,"
                             "\"shard_lo\":5,\"shard_hi\":4}"), 422, "shard_hi");
    expect_refused(SAXPY_RUN(",\"gpu_ids\":[16]"), 400, "gpu_ids");
    expect_refused(SAXPY_RUN(",\"gpu_ids\":{}"), 400, "gpu_ids");
}

/* Rendezvous keys travel as one URL path segment the gateway accepts. */
static void test_rendezvous_keys_escape_to_a_path_segment(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(cn_rdv_key_escape("nccl_id", out, sizeof out), 0);
    assert_string_equal(out, "nccl_id");
    assert_int_equal(cn_rdv_key_escape("gloo/rank 1~", out, sizeof out), 0);
    assert_string_equal(out, "gloo~2Frank~201~7E");
    assert_int_equal(cn_rdv_key_escape("", out, sizeof out), -1);
    assert_int_equal(cn_rdv_key_escape("abcdef", out, 4), -1);
    char host[64];
    cn_rdv_host_of("http://10.1.2.3:7001", host, sizeof host);
    assert_string_equal(host, "10.1.2.3");
    cn_rdv_host_of("http://gpu-7.cluster:7001/", host, sizeof host);
    assert_string_equal(host, "gpu-7.cluster");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saxpy_request_decodes_b64_and_data_inputs),
        cmocka_unit_test(test_defaults_fill_absent_optional_fields),
        cmocka_unit_test(test_unknown_param_is_422_naming_it),
        cmocka_unit_test(test_param_of_wrong_type_is_422),
        cmocka_unit_test(test_enum_param_outside_its_choices_is_422),
        cmocka_unit_test(test_param_out_of_range_or_missing_is_422),
        cmocka_unit_test(test_integer_param_must_be_integral),
        cmocka_unit_test(test_inputs_are_checked_against_the_kernel),
        cmocka_unit_test(test_malformed_envelope_is_400),
        cmocka_unit_test(test_out_of_range_envelope_and_unknown_kernel_are_422),
        cmocka_unit_test(test_ident_reads_only_the_run_id),
        cmocka_unit_test(test_dist_and_gpu_ids_are_read),
        cmocka_unit_test(test_bad_dist_is_refused_naming_it),
        cmocka_unit_test(test_rendezvous_keys_escape_to_a_path_segment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
