/* kl_test_args.h — the arguments of a kernel found by name, nothing given:
 * what the kernel unit tests start from (include after cmocka.h). */
#ifndef KL_TEST_ARGS_H
#define KL_TEST_ARGS_H

#include <string.h>

#include "kl.h"

static inline kl_args args_for(const char *name)
{
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = kl_kernel_find(name);
    assert_non_null(a.kernel);
    return a;
}

#endif
