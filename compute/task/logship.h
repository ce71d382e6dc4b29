/* logship.h — ships task logs to the gateway while the parts run (contract
 * §6): one thread reads what each part's log file gained since its last
 * batch and sends it by offset, {"runs": [{"job_id", "attempt", "part",
 * "offset", "data_b64"}]}; a batch the gateway did not take is sent again
 * from the same offsets (it appends by offset, so a repeat is harmless).
 * Reading from the file (through a descriptor of its own) keeps memory
 * flat however far the gateway falls behind. A part that ended is shipped
 * to its last byte, then forgotten (or given up after a while when the
 * gateway takes nothing: the whole log also goes up as a blob with the
 * run's result). The transport is a small interface (cn_logship_sink) so
 * that tests can stand in for the gateway. */
#ifndef CN_LOGSHIP_H
#define CN_LOGSHIP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cn_cred.h"

typedef struct cn_logship cn_logship;
typedef struct cn_logship_src cn_logship_src;

typedef struct cn_logship_sink {
    /* Sends one batch (borrowed). 0 when the gateway took all of it, else
     * -1 with msg. */
    int (*send)(void *cls, const json_t *batch, char *msg, size_t msglen);
    void *cls;
} cn_logship_sink;

typedef struct cn_logship_opts {
    int interval_ms;          /* between batches; <= 0: 250 */
    size_t batch_bytes;       /* log bytes a batch carries at most; 0: 1 MiB */
    int linger_ms;            /* how long an ended part is offered; <= 0: 30 s */
} cn_logship_opts;

typedef struct cn_logship_stats {
    uint64_t batches, failures, bytes;
} cn_logship_stats;

/* Starts the thread. sink is copied. 0 and *out, or -errno. */
int cn_logship_start(const cn_logship_sink *sink, const cn_logship_opts *opts, cn_logship **out);
/* Stops and joins the thread and frees everything; NULL is a no-op. */
void cn_logship_stop(cn_logship *s);

/* Follows a part's log: fd (open for reading) is duplicated (the caller keeps its own),
 * *size is the bytes the writer has put in the file (read with
 * __atomic; it must stay valid until cn_logship_end). NULL on ENOMEM (the
 * log then goes up with the result only). */
cn_logship_src *cn_logship_add(cn_logship *s, const char *job_id, int attempt, int part, int fd,
                               const int64_t *size);
/* The part ended and its log holds final bytes: they are shipped, then the
 * source is dropped; size is not read after this call. */
void cn_logship_end(cn_logship *s, cn_logship_src *src, int64_t final);

/* Ships now rather than at the next interval (a part's first output:
 * whoever follows its log sees the first line at once). */
void cn_logship_kick(cn_logship *s);

void cn_logship_stats_get(cn_logship *s, cn_logship_stats *out);

/* The gateway as a sink: POST {gateway}/v1/cluster/nodes/{id}/logs with
 * the node's own credential, once the node has an id (node_id answers
 * it). */
typedef struct cn_logship_http {
    const char *gateway;      /* borrowed: the cluster listener */
    const cn_cred *cred;      /* borrowed */
    int (*node_id)(void *cls, char id[64]);   /* 1 with the id, 0 while unregistered */
    void *node_cls;
} cn_logship_http;

/* Fills sink with the HTTP transport over h (borrowed: must outlive it). */
void cn_logship_http_init(cn_logship_sink *sink, cn_logship_http *h);

#endif
