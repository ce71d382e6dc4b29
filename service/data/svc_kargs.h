/* svc_kargs.h — binds the JSON of a kernel call ("params" and "inputs") to
 * the kernel library's kl_args, checking each against the catalog. The
 * gateway uses it to validate a job before anything is written; the compute
 * node uses it to run one. The service runtime's only tie to kernels/, whose
 * catalog is the single description of every kernel. */
#ifndef SVC_KARGS_H
#define SVC_KARGS_H

#include <jansson.h>

#include "kl.h"
#include "svc_tensor.h"

typedef struct svc_kargs {
    kl_args args;                     /* inputs point into views[] */
    svc_tensor tensors[KL_MAX_IO];    /* decoded input data, owned */
    kl_tensor views[KL_MAX_IO];
} svc_kargs;

/* Binds params (object or NULL) and inputs (object or NULL) for kernel k.
 * Returns 0 with *out filled, or -1 with err naming the field
 * ("params.alpha", "inputs.b") and what is wrong; out is then empty.
 * Unknown names, wrong types, values out of range, tensors that do not
 * decode, and kl_args_check failures all fail here. Either way release out
 * with svc_kargs_free. ranks (resources.gpus) is set on the args before
 * they are checked: multi-rank kernels check their sizes against it. */
int svc_kargs_bind(const kl_kernel *k, const json_t *params, const json_t *inputs,
                   int64_t max_elems, int ranks, svc_kargs *out, kl_err *err);
void svc_kargs_free(svc_kargs *ka);

/* The resolved parameters (given or default) as a JSON object; new ref. */
json_t *svc_kargs_params_json(const kl_args *args);

#endif
