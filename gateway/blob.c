/* blob.c — packing named tensors into one buffer and back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "kl.h"
#include "svc_sha256.h"

int gw_blob_add(gw_blob *b, const char *name, const svc_tensor *t)
{
    if (!b->meta && !(b->meta = json_array()))
        return -ENOMEM;
    if (b->len + t->nbytes > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + t->nbytes)
            cap *= 2;
        unsigned char *p = realloc(b->data, cap);
        if (!p)
            return -ENOMEM;
        b->data = p;
        b->cap = cap;
    }
    json_t *m = json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", name, "dtype",
                          svc_dtype_name(t->dtype), "shape", svc_shape_to_json(t->ndim, t->shape),
                          "offset", (json_int_t)b->len, "nbytes", (json_int_t)t->nbytes);
    if (!m || json_array_append_new(b->meta, m) != 0)
        return -ENOMEM;
    if (t->nbytes)
        memcpy(b->data + b->len, t->data, t->nbytes);
    b->len += t->nbytes;
    return 0;
}

int gw_blob_add_ref(gw_blob *b, const char *name, const svc_tensor *t, const char *id)
{
    if (!b->meta && !(b->meta = json_array()))
        return -ENOMEM;
    json_t *m = json_pack("{s:s, s:s, s:o, s:s, s:I}", "name", name, "dtype",
                          svc_dtype_name(t->dtype), "shape", svc_shape_to_json(t->ndim, t->shape),
                          "blob", id, "nbytes", (json_int_t)t->nbytes);
    return m && json_array_append_new(b->meta, m) == 0 ? 0 : -ENOMEM;
}

int gw_blob_from_json(gw_blob *b, const json_t *tensors, char *msg, size_t msglen)
{
    const char *name;
    json_t *v;
    if (!b->meta && !(b->meta = json_array()))
        return -ENOMEM;
    json_object_foreach((json_t *)tensors, name, v) {
        svc_tensor t;
        char why[200];
        if (svc_tensor_from_json(v, 0, &t, why, sizeof(why)) != 0) {
            snprintf(msg, msglen, "%s: %s", name, why);
            return -EINVAL;
        }
        int rc = t.blob[0] ? gw_blob_add_ref(b, name, &t, t.blob) : gw_blob_add(b, name, &t);
        svc_tensor_free(&t);
        if (rc)
            return rc;
    }
    return 0;
}

int gw_blob_view(const json_t *m, const unsigned char *data, size_t len, svc_tensor *t,
                 const char **name)
{
    memset(t, 0, sizeof(*t));
    size_t off = (size_t)json_integer_value(json_object_get(m, "offset"));
    t->nbytes = (size_t)json_integer_value(json_object_get(m, "nbytes"));
    *name = json_string_value(json_object_get(m, "name"));
    const char *blob = json_string_value(json_object_get(m, "blob"));
    if (blob != NULL) {
        /* in the blob store: a reference, no bytes here */
        if (!*name || !svc_blob_id_valid(blob) ||
            svc_dtype_parse(json_string_value(json_object_get(m, "dtype")), &t->dtype) != 0 ||
            svc_shape_from_json(json_object_get(m, "shape"), &t->ndim, t->shape) != 0 ||
            (size_t)svc_tensor_elems(t) * svc_dtype_size(t->dtype) != t->nbytes)
            return -1;
        snprintf(t->blob, sizeof t->blob, "%s", blob);
        return 0;
    }
    if (!*name || off > len || t->nbytes > len - off ||
        svc_dtype_parse(json_string_value(json_object_get(m, "dtype")), &t->dtype) != 0 ||
        svc_shape_from_json(json_object_get(m, "shape"), &t->ndim, t->shape) != 0 ||
        (size_t)svc_tensor_elems(t) * svc_dtype_size(t->dtype) != t->nbytes)
        return -1;
    t->data = data ? (void *)(data + off) : NULL;
    return 0;
}

json_t *gw_blob_to_json(const json_t *meta, const unsigned char *data, size_t len, int b64)
{
    json_t *out = json_object();
    size_t i;
    json_t *m;
    json_array_foreach(meta, i, m) {
        svc_tensor t;
        const char *name;
        if (gw_blob_view(m, data, len, &t, &name) != 0)
            goto fail;
        json_t *j = svc_tensor_to_json(&t, b64);
        if (!j || json_object_set_new(out, name, j) != 0)
            goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

void gw_blob_free(gw_blob *b)
{
    if (!b)
        return;
    json_decref(b->meta);
    free(b->data);
    memset(b, 0, sizeof(*b));
}

int gw_blob_check_outputs(const json_t *meta, const char *kernel, char *msg, size_t msglen)
{
    const kl_kernel *k = kernel ? kl_kernel_find(kernel) : NULL;
    if (k == NULL) {
        snprintf(msg, msglen, "the report names no kernel of the catalog (%.64s)",
                 kernel ? kernel : "none");
        return -EINVAL;
    }
    int seen[KL_MAX_IO] = {0};
    size_t i;
    const json_t *m;
    json_array_foreach(meta, i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *dtype = json_string_value(json_object_get(m, "dtype"));
        size_t ndim = json_array_size(json_object_get(m, "shape"));
        int o = 0;
        while (o < k->noutputs && o < KL_MAX_IO && strcmp(k->outputs[o].name, name ? name : "") != 0)
            o++;
        if (o == k->noutputs || o == KL_MAX_IO) {
            snprintf(msg, msglen, "outputs.%.64s is not an output of %s", name ? name : "?", k->name);
            return -EINVAL;
        }
        const kl_io_spec *spec = &k->outputs[o];
        if (seen[o]++) {
            snprintf(msg, msglen, "outputs.%s comes twice", spec->name);
            return -EINVAL;
        }
        if (!dtype || strcmp(dtype, kl_dtype_name(spec->dtype)) != 0) {
            snprintf(msg, msglen, "outputs.%s has dtype %.16s; %s makes %s", spec->name,
                     dtype ? dtype : "none", k->name, kl_dtype_name(spec->dtype));
            return -EINVAL;
        }
        if ((int)ndim < spec->ndim_min || (int)ndim > spec->ndim_max) {
            snprintf(msg, msglen, "outputs.%s has rank %zu; %s makes rank %d to %d", spec->name,
                     ndim, k->name, spec->ndim_min, spec->ndim_max);
            return -EINVAL;
        }
    }
    for (int o = 0; o < k->noutputs && o < KL_MAX_IO; o++)
        if (!seen[o]) {
            snprintf(msg, msglen, "outputs.%s is missing (%s makes it)", k->outputs[o].name, k->name);
            return -EINVAL;
        }
    return 0;
}
