/* fuzz_tensor.c — libFuzzer harness for the tensor codec
 * (service/data/svc_tensor.c, base64 from service/svc_util.c).
 *
 * The input is JSON text, loaded as the HTTP layer loads bodies, and decoded
 * with svc_tensor_from_json. A decoded tensor must be self-consistent
 * (nbytes = elements x dtype size, data present iff nbytes > 0, within the
 * element limit) and must round-trip: encoded with svc_tensor_to_json in
 * either form, dumped to text (jansson's default 17 digits, as the daemons
 * dump) and decoded again, it gives back the same dtype, shape and bytes.
 * The one documented exception: the "data" form cannot carry NaN or
 * infinities (b64 can), so a tensor holding one must then be refused. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "svc_tensor.h"

#define FUZZ_MAX_ELEMS (1 << 20)

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tensor: invariant broken: %s\n", what);
        abort();
    }
}

static int all_finite(const svc_tensor *t)
{
    int64_t n = svc_tensor_elems(t);
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == SVC_F32 && !isfinite(((const float *)t->data)[i]))
            return 0;
        if (t->dtype == SVC_F64 && !isfinite(((const double *)t->data)[i]))
            return 0;
    }
    return 1;
}

/* Encodes t in one form, through text, and decodes it again. */
static void round_trip(const svc_tensor *t, int b64)
{
    json_t *j = svc_tensor_to_json(t, b64);
    check(j != NULL, "svc_tensor_to_json returned NULL");
    char *text = json_dumps(j, JSON_COMPACT);
    check(text != NULL, "the encoded tensor does not dump");
    json_decref(j);
    json_error_t je;
    json_t *back = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    check(back != NULL, "the encoded tensor is not valid JSON");
    svc_tensor u;
    char msg[200];
    int rc = svc_tensor_from_json(back, FUZZ_MAX_ELEMS, &u, msg, sizeof msg);
    if (!b64 && !all_finite(t)) {
        check(rc != 0, "a non-finite value came back through the data form");
    } else {
        if (rc != 0)
            fprintf(stderr, "round trip (%s) refused: %s\n%.500s\n", b64 ? "b64" : "data", msg, text);
        check(rc == 0, "the codec refuses what it encoded");
        check(u.dtype == t->dtype && u.ndim == t->ndim && u.nbytes == t->nbytes,
              "dtype, rank or size changed in a round trip");
        check(memcmp(u.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) == 0, "shape changed");
        check(t->nbytes == 0 || memcmp(u.data, t->data, t->nbytes) == 0, "bytes changed in a round trip");
        svc_tensor_free(&u);
    }
    json_decref(back);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return 0;
    svc_tensor t;
    char msg[200];
    memset(&t, 0xa5, sizeof t);
    if (svc_tensor_from_json(j, FUZZ_MAX_ELEMS, &t, msg, sizeof msg) != 0) {
        check(msg[0] != '\0', "a refusal has no message");
        check(t.data == NULL && t.nbytes == 0 && t.ndim == 0, "a refusal left *out filled");
        json_decref(j);
        return 0;
    }
    int64_t elems = svc_tensor_elems(&t);
    check(t.ndim >= 0 && t.ndim <= SVC_TENSOR_MAX_DIMS, "rank out of range");
    check(elems >= 0 && elems <= FUZZ_MAX_ELEMS, "element count out of range");
    check(t.nbytes == (size_t)elems * svc_dtype_size(t.dtype), "nbytes disagrees with shape");
    check((t.nbytes == 0) == (t.data == NULL), "data and nbytes disagree");
    round_trip(&t, 1);
    round_trip(&t, 0);
    /* svc_shape_from_json must read back what svc_shape_to_json writes. */
    json_t *s = svc_shape_to_json(t.ndim, t.shape);
    int nd = -1;
    int64_t shape[SVC_TENSOR_MAX_DIMS];
    check(s && svc_shape_from_json(s, &nd, shape) == 0 && nd == t.ndim &&
          memcmp(shape, t.shape, sizeof(int64_t) * (size_t)nd) == 0, "shape does not round-trip");
    json_decref(s);
    svc_tensor_free(&t);
    check(t.data == NULL && t.nbytes == 0, "svc_tensor_free left data behind");
    json_decref(j);
    return 0;
}
