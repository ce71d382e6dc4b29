/* test_gw_request.c — validation of POST /v1/jobs bodies: what is accepted,
 * and for each kind of bad input the status and the field named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "request.h"

#define SAXPY_INPUTS "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}," \
                     "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[3,4]}}"

/* Parses text; returns the parse result and leaves err filled. */
static int parse(const char *text, gw_job_req *r, gw_verr *err)
{
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    assert_non_null(body);
    int rc = gw_job_req_parse(body, r, err);
    json_decref(body);
    return rc;
}

static void expect_error(const char *text, int status, const char *field)
{
    gw_job_req r;
    gw_verr err;
    assert_int_equal(parse(text, &r, &err), -1);
    assert_int_equal(err.status, status);
    assert_string_equal(err.field, field);
    assert_true(strlen(err.message) > 0);
}

static void test_valid_saxpy_gets_defaults(void **state)
{
    gw_job_req r;
    gw_verr err;
    assert_int_equal(parse("{\"kernel\":\"saxpy\",\"params\":{\"a\":2}," SAXPY_INPUTS "}", &r, &err), 0);
    assert_string_equal(r.kernel->name, "saxpy");
    assert_int_equal(r.priority, 5);
    assert_int_equal(r.max_attempts, 3);
    assert_int_equal(r.timeout_s, 3600);
    assert_string_equal(r.backend, "any");
    assert_int_equal(r.gpus, 1);
    assert_non_null(r.ka.args.inputs[0]);
    assert_int_equal(r.ka.tensors[1].nbytes, 8);
    gw_job_req_free(&r);
}

static void test_envelope_fields_are_read(void **state)
{
    gw_job_req r;
    gw_verr err;
    assert_int_equal(parse("{\"kernel\":\"saxpy\",\"params\":{\"a\":1}," SAXPY_INPUTS
                           ",\"priority\":9,\"timeout_s\":60,\"max_attempts\":1,"
                           "\"resources\":{\"backend\":\"cpu\",\"gpus\":2},\"labels\":{\"team\":\"risk\"}}",
                           &r, &err), 0);
    assert_int_equal(r.priority, 9);
    assert_int_equal(r.timeout_s, 60);
    assert_int_equal(r.max_attempts, 1);
    assert_string_equal(r.backend, "cpu");
    assert_int_equal(r.gpus, 2);
    assert_string_equal(json_string_value(json_object_get(r.labels, "team")), "risk");
    gw_job_req_free(&r);
}

static void test_envelope_errors_are_400_naming_the_field(void **state)
{
    expect_error("{\"params\":{}}", 400, "kernel");
    expect_error("{\"kernel\":7}", 400, "kernel");
    expect_error("{\"kernel\":\"saxpy\",\"colour\":1}", 400, "colour");
    expect_error("{\"kernel\":\"saxpy\",\"priority\":10}", 400, "priority");
    expect_error("{\"kernel\":\"saxpy\",\"priority\":\"high\"}", 400, "priority");
    expect_error("{\"kernel\":\"saxpy\",\"timeout_s\":0}", 400, "timeout_s");
    expect_error("{\"kernel\":\"saxpy\",\"max_attempts\":11}", 400, "max_attempts");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"backend\":\"tpu\"}}", 400, "resources.backend");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"gpus\":0}}", 422, "resources.gpus");
    expect_error("{\"kernel\":\"saxpy\",\"labels\":{\"bad key\":\"v\"}}", 400, "labels.bad key");
    expect_error("{\"kernel\":\"saxpy\",\"labels\":{\"k\":1}}", 400, "labels.k");
}

static void test_kernel_call_errors_are_422_naming_the_field(void **state)
{
    expect_error("{\"kernel\":\"fft\"}", 422, "kernel");
    expect_error("{\"kernel\":\"saxpy\"," SAXPY_INPUTS "}", 422, "params.a");
    expect_error("{\"kernel\":\"saxpy\",\"params\":{\"a\":1,\"b\":2}," SAXPY_INPUTS "}", 422, "params.b");
    expect_error("{\"kernel\":\"saxpy\",\"params\":{\"a\":\"two\"}," SAXPY_INPUTS "}", 422, "params.a");
    expect_error("{\"kernel\":\"reduce\",\"params\":{\"op\":\"median\"},"
                 "\"inputs\":{\"x\":{\"dtype\":\"float32\",\"shape\":[1],\"data\":[1]}}}", 422, "params.op");
    expect_error("{\"kernel\":\"saxpy\",\"params\":{\"a\":1},\"inputs\":{"
                 "\"x\":{\"dtype\":\"float32\",\"shape\":[3],\"data\":[1,2]},"
                 "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[3,4]}}}", 422, "inputs.x");
    expect_error("{\"kernel\":\"saxpy\",\"params\":{\"a\":1},\"inputs\":{"
                 "\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"b64\":\"!!!!\"},"
                 "\"y\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[3,4]}}}", 422, "inputs.x");
    expect_error("{\"kernel\":\"saxpy\",\"params\":{\"a\":1},\"inputs\":{"
                 "\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}}}", 422, "inputs.y");
    expect_error("{\"kernel\":\"gemm\",\"inputs\":{"
                 "\"a\":{\"dtype\":\"float32\",\"shape\":[2,2],\"data\":[1,2,3,4]},"
                 "\"b\":{\"dtype\":\"float32\",\"shape\":[3,1],\"data\":[1,2,3]}}}", 422, "inputs.b");
    expect_error("{\"kernel\":\"gemm\",\"inputs\":{"
                 "\"a\":{\"dtype\":\"int32\",\"shape\":[1,1],\"data\":[1]},"
                 "\"b\":{\"dtype\":\"float32\",\"shape\":[1,1],\"data\":[1]}}}", 422, "inputs.a");
}

static void test_nodes_and_gpu_memory_are_read(void **state)
{
    gw_job_req r;
    gw_verr err;
    assert_int_equal(parse("{\"kernel\":\"saxpy\",\"params\":{\"a\":2}," SAXPY_INPUTS "}", &r, &err), 0);
    assert_int_equal(r.nodes, 1);
    assert_true(r.gpu_memory_gb == 0);
    gw_job_req_free(&r);
    assert_int_equal(parse("{\"kernel\":\"saxpy\",\"params\":{\"a\":2}," SAXPY_INPUTS
                           ",\"resources\":{\"nodes\":1,\"gpu_memory_gb\":40.5}}", &r, &err), 0);
    assert_int_equal(r.nodes, 1);
    assert_true(r.gpu_memory_gb == 40.5);
    gw_job_req_free(&r);
}

/* saxpy cannot span nodes (max_nodes 1): more is a 422 naming the kernel. */
static void test_nodes_past_the_kernels_max_nodes_are_422(void **state)
{
    gw_job_req r;
    gw_verr err;
    assert_true(kl_kernel_find("saxpy")->max_nodes <= 1);
    assert_int_equal(parse("{\"kernel\":\"saxpy\",\"params\":{\"a\":2}," SAXPY_INPUTS
                           ",\"resources\":{\"nodes\":2}}", &r, &err), -1);
    assert_int_equal(err.status, 422);
    assert_string_equal(err.field, "resources.nodes");
    assert_non_null(strstr(err.message, "saxpy"));
    assert_non_null(strstr(err.message, "at most 1 node"));
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"nodes\":65}}", 422, "resources.nodes");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"nodes\":0}}", 400, "resources.nodes");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"nodes\":\"2\"}}", 400, "resources.nodes");
}

static void test_bad_gpu_memory_is_refused_naming_the_field(void **state)
{
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"gpu_memory_gb\":0}}", 422,
                 "resources.gpu_memory_gb");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"gpu_memory_gb\":-8}}", 422,
                 "resources.gpu_memory_gb");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"gpu_memory_gb\":1025}}", 422,
                 "resources.gpu_memory_gb");
    expect_error("{\"kernel\":\"saxpy\",\"resources\":{\"gpu_memory_gb\":\"80G\"}}", 400,
                 "resources.gpu_memory_gb");
}

/* gemm's c is m x n float32: 2 x 3 is 24 bytes. */
static void test_outputs_over_the_limit_are_422_naming_the_input(void **state)
{
    gw_job_req r;
    gw_verr err;
    assert_int_equal(parse("{\"kernel\":\"gemm\",\"inputs\":{"
                           "\"a\":{\"dtype\":\"float32\",\"shape\":[2,1],\"data\":[1,2]},"
                           "\"b\":{\"dtype\":\"float32\",\"shape\":[1,3],\"data\":[1,2,3]}}}", &r, &err), 0);
    assert_int_equal(gw_job_req_check_output(&r, 24, &err), 0);
    assert_int_equal(gw_job_req_check_output(&r, 23, &err), -1);
    assert_int_equal(err.status, 422);
    assert_string_equal(err.field, "inputs.b");
    assert_non_null(strstr(err.message, "24 bytes"));
    gw_job_req_free(&r);

    assert_int_equal(parse("{\"kernel\":\"saxpy\",\"params\":{\"a\":2}," SAXPY_INPUTS "}", &r, &err), 0);
    assert_int_equal(gw_job_req_check_output(&r, 8, &err), 0);
    assert_int_equal(gw_job_req_check_output(&r, 7, &err), -1);
    assert_string_equal(err.field, "inputs.x");
    gw_job_req_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_saxpy_gets_defaults),
        cmocka_unit_test(test_outputs_over_the_limit_are_422_naming_the_input),
        cmocka_unit_test(test_envelope_fields_are_read),
        cmocka_unit_test(test_envelope_errors_are_400_naming_the_field),
        cmocka_unit_test(test_kernel_call_errors_are_422_naming_the_field),
        cmocka_unit_test(test_nodes_and_gpu_memory_are_read),
        cmocka_unit_test(test_nodes_past_the_kernels_max_nodes_are_422),
        cmocka_unit_test(test_bad_gpu_memory_is_refused_naming_the_field),
    };
    return cmocka_run_group_tests_name("gw_request", tests, NULL, NULL);
}
