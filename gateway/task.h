/* task.h — the checks of a task (a job that runs the user's own program in
 * a container, issue 18) that need nothing but the request: the image
 * reference and the operator's allow-list, the command, the environment,
 * the working directory, file paths, the network mode and the output
 * quota. No I/O; request.c calls it, and the unit tests drive it alone. */
#ifndef GW_TASK_H
#define GW_TASK_H

#include <jansson.h>
#include <stdint.h>

#define GW_TASK_IMAGE_MAX 255
#define GW_TASK_ARGV_MAX 256          /* command elements */
#define GW_TASK_ARG_MAX 4096          /* bytes of one element */
#define GW_TASK_CMD_BYTES (64 << 10)  /* bytes of the whole command */
#define GW_TASK_ENV_MAX 128           /* variables */
#define GW_TASK_ENV_BYTES (64 << 10)  /* bytes of names and values together */
#define GW_TASK_PATH_MAX 255          /* bytes of a file or input path */
#define GW_TASK_FILES_MAX 64
#define GW_TASK_INPUTS_MAX 32

/* Why a check failed: the field it names and a message for the user. */
typedef struct gw_task_err {
    char field[64];
    char message[256];
} gw_task_err;

/* 1 when ref is an image reference of the form an OCI engine pulls or
 * finds locally: [host[:port]/]path[:tag][@sha256:hex], lower-case path
 * components of [a-z0-9] joined by '.', '_', '__' or '-', at most
 * GW_TASK_IMAGE_MAX bytes. */
int gw_task_image_valid(const char *ref);

/* 1 when ref matches one of the comma-separated shell patterns of list
 * (fnmatch, '*' does not cross '/'); an empty or NULL list matches
 * nothing. */
int gw_task_image_allowed(const char *list, const char *ref);

/* 1 when name may be set by the user: [A-Za-z_][A-Za-z0-9_]* of at most
 * 128 bytes, and not a name Kowloon sets itself (KOWLOON_*, MASTER_*, the
 * rank and device variables). */
int gw_task_env_name_ok(const char *name);

/* 1 when p is a relative path of at most GW_TASK_PATH_MAX bytes whose
 * segments are not empty, '.' or '..', of printable characters without
 * '\\'. */
int gw_task_path_ok(const char *p);

/* Checks the parts of a "task" object that stand alone: image (form
 * only; the allow-list is the caller's, with what it knows of the tenant),
 * command, env, workdir, network, output_quota_mb and the names of files
 * and inputs (their contents are decoded by the caller). Unknown members
 * are refused. On 0 *egress is 1 for network "egress", and *quota_mb the
 * output quota asked (0: none asked). On -1 err names the field. */
int gw_task_check(const json_t *task, int *egress, int64_t *quota_mb, gw_task_err *err);

#endif
