/* idem.h — the Idempotency-Key of a submit (IETF httpapi idempotency-key
 * draft): reading the header, and the fingerprint that tells a retry of a
 * request from another request under the same key. The key and the
 * fingerprint are recorded with the job in the submit's own statement
 * (store.h, gw_store_jobs_insert), so the promise holds across gateways and
 * restarts. */
#ifndef GW_IDEM_H
#define GW_IDEM_H

#include "store.h"

/* Longest key accepted, in characters. */
#define GW_IDEM_KEY_MAX 255

/* Reads an Idempotency-Key header: an sf-string as the draft writes it
 * ("\"8e03...\"", with \" and \\ escapes) or, as most clients send it, the
 * bare value (not starting with a space or a quote); 1-GW_IDEM_KEY_MAX
 * printable ASCII characters. Returns 1 with the key in out, 0 when header is NULL, -1 when it
 * is malformed. */
int gw_idem_key_parse(const char *header, char out[GW_IDEM_KEY_MAX + 1]);

/* The fingerprint of a job as the gateway resolved it: kernel, params
 * (defaults filled), priority, timeout, attempts, resources, labels, and
 * the inputs (their meta, which names blob inputs by content hash, and the
 * inline bytes). Two requests that make the same job have the same one,
 * however their JSON was spelled or their tensors encoded. 64 lowercase
 * hex digits and a NUL in hex; 0, or -1 when hashing failed. */
int gw_idem_fingerprint(const gw_job_new *row, char hex[65]);

#endif
