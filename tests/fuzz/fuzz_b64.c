/* fuzz_b64.c — libFuzzer harness for base64 (service/svc_util.c).
 *
 * The decoder is strict: it accepts exactly the canonical encodings. So for
 * any input, if svc_b64_decode accepts it, svc_b64_encode of the result must
 * give back the input byte for byte; and any bytes, encoded, must decode to
 * themselves. The input buffer is exactly `size` bytes and not terminated,
 * so a read past the end is an AddressSanitizer report. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_util.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_b64: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *out = NULL;
    size_t out_len = 0;
    if (svc_b64_decode((const char *)data, size, &out, &out_len) == 0) {
        check(out != NULL, "accepted without a buffer");
        check(out_len == size / 4 * 3 - (size && data[size - 1] == '=') - (size > 1 && data[size - 2] == '='),
              "decoded length disagrees with the padding");
        char *again = svc_b64_encode(out, out_len);
        check(again != NULL, "encode returned NULL");
        check(strlen(again) == size && memcmp(again, data, size) == 0,
              "an accepted encoding is not the canonical one");
        free(again);
        free(out);
    } else {
        check(out == NULL, "a refusal set *out");
    }

    char *enc = svc_b64_encode(data, size);
    check(enc != NULL, "encode returned NULL");
    size_t elen = strlen(enc);
    check(elen == (size + 2) / 3 * 4, "encoded length is wrong");
    unsigned char *dec = NULL;
    size_t dlen = 0;
    check(svc_b64_decode(enc, elen, &dec, &dlen) == 0, "the decoder refuses what the encoder wrote");
    check(dlen == size && (size == 0 || memcmp(dec, data, size) == 0), "bytes changed in a round trip");
    free(dec);
    free(enc);
    return 0;
}
