/* svc_task.h — what a task may name, checked the same way by the gateway
 * (when a tenant submits one) and by the node (when it runs one): the
 * image reference, environment names, file paths, input names and dtypes,
 * and the limits of their number and size. Pure functions on strings: no
 * JSON, no I/O. Each check returns 0, or -1 with why (a sentence naming
 * the value) in why[0..whylen). */
#ifndef SVC_TASK_H
#define SVC_TASK_H

#include <stddef.h>
#include <stdint.h>

#define SVC_TASK_IMAGE_MAX 255      /* bytes of an image reference */
#define SVC_TASK_ARGS_MAX 256       /* command entries */
#define SVC_TASK_ARG_MAX 32768      /* bytes of one entry */
#define SVC_TASK_CMD_MAX 131072     /* bytes of all entries */
#define SVC_TASK_ENV_MAX 128        /* variables */
#define SVC_TASK_ENV_NAME_MAX 128   /* bytes of a name */
#define SVC_TASK_ENV_VALUE_MAX 32768
#define SVC_TASK_FILES_MAX 64
#define SVC_TASK_PATH_MAX 255       /* bytes of a file path or a workdir */
#define SVC_TASK_INLINE_MAX (1 << 20) /* bytes of inline files, all together */
#define SVC_TASK_INPUTS_MAX 64
#define SVC_TASK_INPUT_NAME_MAX 64

/* An image reference as an engine takes it: [A-Za-z0-9] first, then
 * [A-Za-z0-9._/:@-], at most SVC_TASK_IMAGE_MAX bytes. Never a leading
 * '-', which an engine would read as one of its own options. */
int svc_task_image_check(const char *image, char *why, size_t whylen);

/* 1 when image matches one of the patterns of list, separated by commas
 * or spaces (fnmatch with FNM_PATHNAME: '*' does not cross '/'); an empty
 * or NULL list matches nothing (the gateway's allow-list: no task until
 * the operator names its images). */
int svc_task_image_allowed(const char *list, const char *image);

/* An environment name the tenant may set: [A-Za-z_][A-Za-z0-9_]{0,127},
 * not KOWLOON_*, MASTER_*, nor one Kowloon sets itself (WORLD_SIZE, RANK,
 * LOCAL_RANK, NODE_RANK, NNODES, LOCAL_WORLD_SIZE, GROUP_RANK,
 * CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES). PATH, HOME and the rest
 * are the tenant's. */
int svc_task_env_name_check(const char *name, char *why, size_t whylen);

/* A file's path relative to the working directory: printable ASCII but
 * '\\', segments separated by '/', none empty, "." or "..", no leading
 * '/', at most SVC_TASK_PATH_MAX bytes. */
int svc_task_path_check(const char *path, char *why, size_t whylen);

/* The working directory inside the container: absolute, not "/", its
 * segments as svc_task_path_check's, not under /proc, /sys, /dev,
 * /kowloon/in or /kowloon/out. */
int svc_task_workdir_check(const char *dir, char *why, size_t whylen);

/* An input's name, which becomes /kowloon/in/<name>: 1 to 64 characters
 * of [A-Za-z0-9_.-], not ".", ".." nor "manifest.json". */
int svc_task_input_name_check(const char *name, char *why, size_t whylen);

/* The suffix of an input's KOWLOON_INPUT_<NAME> variable: the name upper
 * cased, '.' and '-' as '_' ("x.npy" -> "X_NPY"). */
void svc_task_input_env_name(const char *name, char *out, size_t len);

/* The bytes of one element of a task input's dtype (bool, int8..int64,
 * uint8..uint64, float16, float32, float64), and its NumPy descr ("<f4"),
 * or 0 / NULL for a dtype that is none of these. */
size_t svc_task_dtype_size(const char *dtype);
const char *svc_task_dtype_descr(const char *dtype);

#endif
