/* fuzz_npy.c — libFuzzer harness for the .npy header (service/data/svc_npy.c).
 *
 * The input is parsed as the start of an uploaded .npy file. A header that
 * is accepted must be self-consistent (rank 0..8, dimensions >= 0, length
 * aligned and within the input), must be refused as truncated when cut
 * short, and must come back the same when written again with
 * svc_npy_header. A refusal must be one of the documented codes, with a
 * sentence. The input also drives the writer: its bytes, read as a dtype
 * and a shape, give a header that the reader must take back exactly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_npy.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_npy: invariant broken: %s\n", what);
        abort();
    }
}

/* Writes dtype and shape, reads them back. */
static void write_read(svc_dtype dt, int nd, const int64_t *shape)
{
    char h[1024];
    size_t n = svc_npy_header(dt, nd, shape, h, sizeof h);
    check(n > 0 && n % SVC_NPY_ALIGN == 0, "the writer failed on a valid dtype and shape");
    check(svc_npy_header(dt, nd, shape, h, n - 1) == 0, "the writer overran a short buffer");
    svc_dtype dt2;
    int nd2;
    int64_t sh2[8];
    size_t hl;
    int rc = svc_npy_parse_header(h, n, &dt2, &nd2, sh2, &hl);
    /* A written shape whose byte size overflows is the one thing refused. */
    if (rc == SVC_NPY_ESHAPE)
        return;
    check(rc == 0, "the reader refuses what the writer wrote");
    check(dt2 == dt && nd2 == nd && hl == n, "dtype, rank or length changed");
    check(nd == 0 || memcmp(sh2, shape, sizeof(int64_t) * (size_t)nd) == 0, "shape changed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    svc_dtype dt = (svc_dtype)99;
    int nd = -1;
    int64_t sh[8];
    size_t hl = 12345;
    int rc = svc_npy_parse_header(data, size, &dt, &nd, sh, &hl);
    check(rc <= 0 && rc >= SVC_NPY_EPAD, "a code outside the documented ones");
    check(strlen(svc_npy_strerror(rc)) > 0, "a code without a sentence");
    if (rc == SVC_NPY_ETRUNC)
        check(hl > size, "truncated, but the header would fit");
    if (rc == 0) {
        check(nd >= 0 && nd <= 8, "rank out of range");
        check(dt == SVC_F32 || dt == SVC_F64 || dt == SVC_I32, "dtype out of range");
        check(hl <= size && hl % SVC_NPY_ALIGN == 0, "header length out of range");
        for (int i = 0; i < nd; i++)
            check(sh[i] >= 0, "a negative dimension");
        size_t hl2;
        svc_dtype dt2;
        int nd2;
        int64_t sh2[8];
        check(svc_npy_parse_header(data, hl - 1, &dt2, &nd2, sh2, &hl2) == SVC_NPY_ETRUNC && hl2 == hl,
              "a header cut by one byte is not reported as truncated");
        write_read(dt, nd, sh);
    }

    /* The writer: byte 0 the dtype and rank, then 8 bytes a dimension. */
    if (size >= 1) {
        svc_dtype wdt = (svc_dtype)(data[0] % 3);
        int wnd = (data[0] >> 2) % 9;
        int64_t wsh[8] = {0};
        for (int i = 0; i < wnd; i++) {
            uint64_t v = 0;
            for (size_t k = 0; k < 8; k++) {
                size_t at = 1 + (size_t)i * 8 + k;
                v = v << 8 | (at < size ? data[at] : 0);
            }
            wsh[i] = (int64_t)(v >> (data[0] >> 6 ? 1 : 40));   /* mostly small dimensions */
        }
        write_read(wdt, wnd, wsh);
    }
    return 0;
}
