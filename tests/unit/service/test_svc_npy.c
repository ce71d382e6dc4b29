/* test_svc_npy.c — the .npy header: exact bytes for each dtype and rank,
 * round trips through the reader, each refusal of the reader, and numpy
 * itself reading what we write (and us reading what numpy writes) when
 * python3 with numpy is on the machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_npy.h"

/* The header numpy writes for this dictionary text: magic, 1.0, length,
 * text, spaces, newline, 64-aligned. Returns its length. */
static size_t expected_v1(const char *dict, char *out)
{
    size_t n = strlen(dict), total = (10 + n + 1 + 63) / 64 * 64;
    if (total == 10 + n + 1)
        total += 64;   /* numpy always writes at least one space */
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)((total - 10) & 0xff);
    out[9] = (char)((total - 10) >> 8);
    memcpy(out + 10, dict, n);
    memset(out + 10 + n, ' ', total - 11 - n);
    out[total - 1] = '\n';
    return total;
}

static void check_header(svc_dtype dt, int ndim, const int64_t *shape, const char *dict)
{
    char got[1024], want[1024];
    size_t n = svc_npy_header(dt, ndim, shape, got, sizeof got);
    size_t w = expected_v1(dict, want);
    assert_int_equal(n, w);
    assert_int_equal(n % SVC_NPY_ALIGN, 0);
    assert_memory_equal(got, want, n);

    svc_dtype pdt = (svc_dtype)-1;
    int pnd = -1;
    int64_t psh[8];
    size_t hl = 0;
    assert_int_equal(svc_npy_parse_header(got, n, &pdt, &pnd, psh, &hl), 0);
    assert_int_equal(pdt, dt);
    assert_int_equal(pnd, ndim);
    assert_int_equal(hl, n);
    if (ndim > 0)
        assert_memory_equal(psh, shape, sizeof(int64_t) * (size_t)ndim);
}

static void test_header_bytes_match_numpy_for_each_dtype_and_rank(void **state)
{
    (void)state;
    int64_t s2[] = {2, 3}, s1[] = {5}, s3[] = {2, 3, 4}, s0e[] = {0, 3};
    int64_t big[] = {1, 2, 3, 4, 5, 6, 7, 2147483648};
    check_header(SVC_F32, 2, s2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    check_header(SVC_F64, 1, s1, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }");
    check_header(SVC_I32, 0, NULL, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }");
    check_header(SVC_I32, 3, s3, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 4), }");
    check_header(SVC_F64, 2, s0e, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 3), }");
    check_header(SVC_F32, 8, big, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                  "(1, 2, 3, 4, 5, 6, 7, 2147483648), }");
}

static void test_header_needs_cap_and_valid_arguments(void **state)
{
    (void)state;
    char buf[256];
    int64_t s[] = {2, 3}, neg[] = {2, -1};
    size_t n = svc_npy_header(SVC_F32, 2, s, buf, sizeof buf);
    assert_int_equal(n, 128);
    assert_int_equal(svc_npy_header(SVC_F32, 2, s, buf, n), n);
    assert_int_equal(svc_npy_header(SVC_F32, 2, s, buf, n - 1), 0);
    assert_int_equal(svc_npy_header(SVC_F32, 2, s, NULL, 0), 0);
    assert_int_equal(svc_npy_header(SVC_F32, 2, neg, buf, sizeof buf), 0);
    assert_int_equal(svc_npy_header(SVC_F32, 9, s, buf, sizeof buf), 0);
    assert_int_equal(svc_npy_header(SVC_F32, -1, s, buf, sizeof buf), 0);
    assert_int_equal(svc_npy_header((svc_dtype)7, 2, s, buf, sizeof buf), 0);
}

/* A dictionary past 65535 bytes takes version 2.0 and a 4-byte length. */
static void test_long_header_is_version_2(void **state)
{
    (void)state;
    size_t dn = 70000;
    char *dict = malloc(dn + 1), *out = malloc(dn + 200);
    const char *head = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ";
    memset(dict, ' ', dn);
    memcpy(dict, head, strlen(head));
    dict[dn - 1] = '}';
    size_t n = svc__npy_wrap(dict, dn, out, dn + 200);
    assert_int_equal(n % 64, 0);
    assert_memory_equal(out, "\x93NUMPY\x02\x00", 8);
    uint32_t body = (uint8_t)out[8] | (uint8_t)out[9] << 8 | (uint32_t)(uint8_t)out[10] << 16 |
                    (uint32_t)(uint8_t)out[11] << 24;
    assert_int_equal(body + 12, n);
    svc_dtype dt;
    int nd;
    int64_t sh[8];
    size_t hl;
    assert_int_equal(svc_npy_parse_header(out, n, &dt, &nd, sh, &hl), 0);
    assert_int_equal(nd, 1);
    assert_int_equal(sh[0], 3);
    assert_int_equal(hl, n);
    /* Just under the limit stays 1.0. */
    n = svc__npy_wrap(dict, 65000, out, dn + 200);
    assert_int_equal(out[6], 1);
    free(dict);
    free(out);
}

/* Parses header text wrapped as numpy would; returns the code. */
static int parse_dict(const char *dict)
{
    char buf[1024];
    size_t n = svc__npy_wrap(dict, strlen(dict), buf, sizeof buf);
    assert_true(n > 0);
    svc_dtype dt;
    int nd;
    int64_t sh[8];
    size_t hl;
    return svc_npy_parse_header(buf, n, &dt, &nd, sh, &hl);
}

static void test_parser_takes_other_orders_and_spacing(void **state)
{
    (void)state;
    assert_int_equal(parse_dict("{'shape': (4, 5), 'fortran_order': False, 'descr': '<i4'}"), 0);
    assert_int_equal(parse_dict("{\"descr\":\"<f8\",\"fortran_order\":False,\"shape\":(4,5,)}"), 0);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }"
                                "                     "), 0);
}

static void test_parser_refuses_what_it_cannot_read(void **state)
{
    (void)state;
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"), SVC_NPY_EFORTRAN);
    assert_int_equal(parse_dict("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }"), SVC_NPY_EDTYPE);
    assert_int_equal(parse_dict("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }"), SVC_NPY_EDTYPE);
    assert_int_equal(parse_dict("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }"), SVC_NPY_EDTYPE);
    assert_int_equal(parse_dict("{'descr': '<f4', 'shape': (2, 3), }"), SVC_NPY_EHEADER);
    assert_int_equal(parse_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"),
                     SVC_NPY_EHEADER);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }"), SVC_NPY_EHEADER);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (02,), }"), SVC_NPY_EHEADER);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"), SVC_NPY_EHEADER);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}"),
                     SVC_NPY_EHEADER);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }"),
                     SVC_NPY_ESHAPE);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
                     SVC_NPY_ESHAPE);
    assert_int_equal(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
                     SVC_NPY_ESHAPE);
    assert_int_equal(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }"),
                     0);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x"), SVC_NPY_EPAD);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\t"), SVC_NPY_EPAD);
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False,\n 'shape': (2,), }"), SVC_NPY_EHEADER);

    /* Layout: magic, version, alignment, newline, truncation. */
    char good[256], bad[256];
    int64_t s[] = {2, 3};
    size_t n = svc_npy_header(SVC_F32, 2, s, good, sizeof good);
    svc_dtype dt;
    int nd;
    int64_t sh[8];
    size_t hl;
    memcpy(bad, good, n);
    bad[1] = 'n';
    assert_int_equal(svc_npy_parse_header(bad, n, &dt, &nd, sh, &hl), SVC_NPY_EMAGIC);
    memcpy(bad, good, n);
    bad[6] = 4;
    assert_int_equal(svc_npy_parse_header(bad, n, &dt, &nd, sh, &hl), SVC_NPY_EVERSION);
    memcpy(bad, good, n);
    bad[n - 1] = ' ';
    assert_int_equal(svc_npy_parse_header(bad, n, &dt, &nd, sh, &hl), SVC_NPY_EPAD);
    memcpy(bad, good, n);
    bad[8] = (char)(bad[8] - 16);   /* 16-aligned, as numpy < 1.14 wrote */
    bad[n - 17] = '\n';
    assert_int_equal(svc_npy_parse_header(bad, n - 16, &dt, &nd, sh, &hl), SVC_NPY_EPAD);
    for (size_t k = 0; k < n; k++) {
        hl = 0;
        assert_int_equal(svc_npy_parse_header(good, k, &dt, &nd, sh, &hl), SVC_NPY_ETRUNC);
        assert_int_equal(hl, k < 10 ? 10 : n);
    }
    assert_int_equal(svc_npy_parse_header("PK\x03\x04", 4, &dt, &nd, sh, &hl), SVC_NPY_EMAGIC);
    for (int c = SVC_NPY_EPAD; c <= SVC_NPY_ETRUNC; c++) {
        assert_true(strlen(svc_npy_strerror(c)) > 0);
        assert_string_not_equal(svc_npy_strerror(c), "unknown .npy error");
    }
}

/* ---- numpy itself -------------------------------------------------- */

static int have_numpy(void)
{
    return system("python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

/* Writes header + data for the array to path. */
static void write_npy(const char *path, svc_dtype dt, int ndim, const int64_t *shape,
                      const void *data, size_t nbytes)
{
    char h[512];
    size_t n = svc_npy_header(dt, ndim, shape, h, sizeof h);
    assert_true(n > 0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(h, 1, n, f), n);
    if (nbytes > 0)
        assert_int_equal(fwrite(data, 1, nbytes, f), nbytes);
    assert_int_equal(fclose(f), 0);
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        print_error("command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* numpy.load reads each file with the exact dtype, shape and values; the
 * values follow formulas that numpy recomputes on its side. */
static void test_numpy_loads_what_we_write(void **state)
{
    (void)state;
    if (!have_numpy()) {
        print_message("python3 with numpy not found: numpy check skipped\n");
        skip();
    }
    char dir[] = "/tmp/test_svc_npy.XXXXXX", path[256], cmd[2048];
    assert_non_null(mkdtemp(dir));

    float f[6];
    for (int i = 0; i < 6; i++)
        f[i] = (float)i * 0.25f - 1.5f;
    int64_t s23[] = {2, 3};
    snprintf(path, sizeof path, "%s/f32.npy", dir);
    write_npy(path, SVC_F32, 2, s23, f, sizeof f);

    double d[5];
    for (int i = 0; i < 5; i++)
        d[i] = (double)i * 0.001 - 1e300 * (i == 4);
    int64_t s5[] = {5};
    snprintf(path, sizeof path, "%s/f64.npy", dir);
    write_npy(path, SVC_F64, 1, s5, d, sizeof d);

    int32_t k[8];
    for (int i = 0; i < 8; i++)
        k[i] = i * 7919 - 20000;
    k[7] = INT32_MIN;
    int64_t s222[] = {2, 2, 2};
    snprintf(path, sizeof path, "%s/i32.npy", dir);
    write_npy(path, SVC_I32, 3, s222, k, sizeof k);

    float scalar = 3.5f;
    snprintf(path, sizeof path, "%s/f32_0d.npy", dir);
    write_npy(path, SVC_F32, 0, NULL, &scalar, sizeof scalar);

    int64_t s03[] = {0, 3};
    snprintf(path, sizeof path, "%s/f64_empty.npy", dir);
    write_npy(path, SVC_F64, 2, s03, NULL, 0);

    /* Version 2.0, through the internal wrapper (no real shape needs it). */
    {
        size_t dn = 70000;
        char *dict = malloc(dn), *h = malloc(dn + 200);
        const char *head = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), ";
        memset(dict, ' ', dn);
        memcpy(dict, head, strlen(head));
        dict[dn - 1] = '}';
        size_t n = svc__npy_wrap(dict, dn, h, dn + 200);
        int32_t v[3] = {1, -2, 3};
        snprintf(path, sizeof path, "%s/v2.npy", dir);
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(h, 1, n, fp), n);
        assert_int_equal(fwrite(v, 1, sizeof v, fp), sizeof v);
        assert_int_equal(fclose(fp), 0);
        free(dict);
        free(h);
    }

    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import sys, numpy as np\n"
             "d = sys.argv[1]\n"
             "def check(name, dtype, shape, want, **kw):\n"
             "    a = np.load(d + \"/\" + name, **kw)\n"
             "    assert a.dtype == np.dtype(dtype), (name, a.dtype)\n"
             "    assert a.shape == shape, (name, a.shape)\n"
             "    assert a.flags.c_contiguous, name\n"
             "    assert np.array_equal(a, np.asarray(want, dtype=dtype).reshape(shape)), (name, a)\n"
             "check(\"f32.npy\", \"<f4\", (2, 3), (np.arange(6, dtype=np.float32) * np.float32(0.25) - np.float32(1.5)))\n"
             "w = np.arange(5, dtype=np.float64) * 0.001; w[4] -= 1e300\n"
             "check(\"f64.npy\", \"<f8\", (5,), w)\n"
             "w = np.arange(8, dtype=np.int64) * 7919 - 20000; w[7] = -2**31\n"
             "check(\"i32.npy\", \"<i4\", (2, 2, 2), w)\n"
             "check(\"f32_0d.npy\", \"<f4\", (), 3.5)\n"
             "check(\"f64_empty.npy\", \"<f8\", (0, 3), [])\n"
             "check(\"v2.npy\", \"<i4\", (3,), [1, -2, 3], max_header_size=200000)\n"
             "with open(d + \"/v2.npy\", \"rb\") as f: assert np.lib.format.read_magic(f) == (2, 0)\n"
             "' %s",
             dir);
    assert_int_equal(run(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(run(cmd), 0);
}

/* Our reader takes the headers numpy.save writes, growth spaces included. */
static void test_we_read_what_numpy_writes(void **state)
{
    (void)state;
    if (!have_numpy()) {
        print_message("python3 with numpy not found: numpy check skipped\n");
        skip();
    }
    char dir[] = "/tmp/test_svc_npy.XXXXXX", path[256], cmd[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "python3 -c '\n"
             "import sys, numpy as np\n"
             "d = sys.argv[1]\n"
             "np.save(d + \"/a.npy\", np.zeros((3, 4), dtype=\"<f4\"))\n"
             "np.save(d + \"/b.npy\", np.arange(7, dtype=\"<f8\"))\n"
             "np.save(d + \"/c.npy\", np.int32(5))\n"
             "np.save(d + \"/d.npy\", np.zeros((1, 2, 3, 4, 5, 6, 7, 8), dtype=\"<i4\"))\n"
             "np.save(d + \"/e.npy\", np.zeros((2, 3), dtype=\"<f4\", order=\"F\"))\n"
             "np.save(d + \"/f.npy\", np.zeros((2,), dtype=\"<i8\"))\n"
             "' %s",
             dir);
    assert_int_equal(run(cmd), 0);
    struct {
        const char *file;
        int rc;
        svc_dtype dt;
        int ndim;
        int64_t shape[8];
        size_t data;
    } cases[] = {
        {"a.npy", 0, SVC_F32, 2, {3, 4}, 48},
        {"b.npy", 0, SVC_F64, 1, {7}, 56},
        {"c.npy", 0, SVC_I32, 0, {0}, 4},
        {"d.npy", 0, SVC_I32, 8, {1, 2, 3, 4, 5, 6, 7, 8}, 40320 * 4},
        {"e.npy", SVC_NPY_EFORTRAN, SVC_F32, 0, {0}, 0},
        {"f.npy", SVC_NPY_EDTYPE, SVC_F32, 0, {0}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static char buf[1 << 18];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        svc_dtype dt;
        int nd;
        int64_t sh[8];
        size_t hl = 0;
        int rc = svc_npy_parse_header(buf, n, &dt, &nd, sh, &hl);
        if (rc != cases[i].rc)
            fail_msg("%s: %d (%s), want %d", cases[i].file, rc, svc_npy_strerror(rc), cases[i].rc);
        if (rc != 0)
            continue;
        assert_int_equal(dt, cases[i].dt);
        assert_int_equal(nd, cases[i].ndim);
        assert_memory_equal(sh, cases[i].shape, sizeof(int64_t) * (size_t)nd);
        assert_int_equal(n - hl, cases[i].data);
        assert_int_equal(hl % 64, 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(run(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_bytes_match_numpy_for_each_dtype_and_rank),
        cmocka_unit_test(test_header_needs_cap_and_valid_arguments),
        cmocka_unit_test(test_long_header_is_version_2),
        cmocka_unit_test(test_parser_takes_other_orders_and_spacing),
        cmocka_unit_test(test_parser_refuses_what_it_cannot_read),
        cmocka_unit_test(test_numpy_loads_what_we_write),
        cmocka_unit_test(test_we_read_what_numpy_writes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
