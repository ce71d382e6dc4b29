/* svc_kargs.c — JSON to kl_args. Parameters are matched by name against the
 * kernel's specs, typed and range-checked; inputs are decoded with the
 * tensor codec and viewed as kl_tensors without copying. */
#include <math.h>
#include <string.h>

#include "svc_kargs.h"

static int param_bind(const kl_param_spec *ps, const json_t *v, kl_value *out, kl_err *err)
{
    char field[64];
    snprintf(field, sizeof(field), "params.%s", ps->name);
    if (ps->type == KL_PARAM_ENUM) {
        const char *s = json_string_value(v);
        for (int c = 0; s && ps->choices[c]; c++)
            if (strcmp(s, ps->choices[c]) == 0) {
                out->choice = c;
                out->given = 1;
                return 0;
            }
        char list[192] = "";
        for (int c = 0; ps->choices[c]; c++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                     c ? "|" : "", ps->choices[c]);
        kl_err_set(err, field, "%s must be one of %s", field, list);
        return -1;
    }
    if (!json_is_number(v)) {
        kl_err_set(err, field, "%s must be a number", field);
        return -1;
    }
    double x = json_number_value(v);
    if (ps->type == KL_PARAM_INT && (x != floor(x) || !isfinite(x))) {
        kl_err_set(err, field, "%s must be an integer", field);
        return -1;
    }
    if (!isfinite(x) || x < ps->min || x > ps->max) {
        kl_err_set(err, field, "%s must be between %g and %g", field, ps->min, ps->max);
        return -1;
    }
    out->num = x;
    out->given = 1;
    return 0;
}

static int params_bind(const kl_kernel *k, const json_t *params, kl_args *a, kl_err *err)
{
    const char *name;
    json_t *v;
    if (params && !json_is_object(params)) {
        kl_err_set(err, "params", "params must be an object");
        return -1;
    }
    json_object_foreach((json_t *)params, name, v) {
        int i = kl_param_index(k, name);
        if (i < 0) {
            char field[64];
            snprintf(field, sizeof(field), "params.%.50s", name);
            kl_err_set(err, field, "%s is not a parameter of %s", field, k->name);
            return -1;
        }
        if (param_bind(&k->params[i], v, &a->params[i], err) != 0)
            return -1;
    }
    for (int i = 0; i < k->nparams; i++)
        if (k->params[i].required && !a->params[i].given) {
            char field[64];
            snprintf(field, sizeof(field), "params.%s", k->params[i].name);
            kl_err_set(err, field, "%s is required by %s", field, k->name);
            return -1;
        }
    kl_args_defaults(a);
    return 0;
}

static int inputs_bind(const kl_kernel *k, const json_t *inputs, int64_t max_elems,
                       svc_kargs *ka, kl_err *err)
{
    const char *name;
    json_t *v;
    if (inputs && !json_is_object(inputs)) {
        kl_err_set(err, "inputs", "inputs must be an object of named tensors");
        return -1;
    }
    json_object_foreach((json_t *)inputs, name, v) {
        char field[64];
        snprintf(field, sizeof(field), "inputs.%.50s", name);
        int i = kl_input_index(k, name);
        if (i < 0) {
            kl_err_set(err, field, "%s is not an input of %s", field, k->name);
            return -1;
        }
        char msg[200];
        if (svc_tensor_from_json(v, max_elems, &ka->tensors[i], msg, sizeof(msg)) != 0) {
            kl_err_set(err, field, "%s: %s", field, msg);
            return -1;
        }
        svc_tensor *t = &ka->tensors[i];
        kl_tensor *view = &ka->views[i];
        view->dtype = (kl_dtype)t->dtype;
        view->ndim = t->ndim;
        memcpy(view->shape, t->shape, sizeof(view->shape));
        view->data = t->data;
        ka->args.inputs[i] = view;
    }
    return 0;
}

int svc_kargs_bind(const kl_kernel *k, const json_t *params, const json_t *inputs,
                   int64_t max_elems, int ranks, svc_kargs *out, kl_err *err)
{
    memset(out, 0, sizeof(*out));
    out->args.kernel = k;
    out->args.ranks = ranks;
    if (params_bind(k, params, &out->args, err) != 0 ||
        inputs_bind(k, inputs, max_elems, out, err) != 0 ||
        kl_args_check(&out->args, err) != 0) {
        svc_kargs_free(out);
        return -1;
    }
    return 0;
}

void svc_kargs_free(svc_kargs *ka)
{
    if (!ka)
        return;
    for (int i = 0; i < KL_MAX_IO; i++)
        svc_tensor_free(&ka->tensors[i]);
    const kl_kernel *k = ka->args.kernel;
    memset(ka, 0, sizeof(*ka));
    ka->args.kernel = k;
}

json_t *svc_kargs_params_json(const kl_args *a)
{
    const kl_kernel *k = a->kernel;
    json_t *o = json_object();
    for (int i = 0; o && i < k->nparams; i++) {
        const kl_param_spec *ps = &k->params[i];
        const kl_value *v = &a->params[i];
        json_t *j = ps->type == KL_PARAM_ENUM ? json_string(ps->choices[v->choice])
                    : ps->type == KL_PARAM_INT ? json_integer((json_int_t)v->num)
                                               : json_real(v->num);
        json_object_set_new(o, ps->name, j);
    }
    return o;
}
