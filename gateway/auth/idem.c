/* idem.c — Idempotency-Key header and request fingerprint (idem.h). */
#include <stdio.h>
#include <string.h>

#include "idem.h"
#include "svc_sha256.h"

int gw_idem_key_parse(const char *header, char out[GW_IDEM_KEY_MAX + 1])
{
    if (header == NULL)
        return 0;
    const char *p = header;
    size_t n = 0;
    int quoted = *p == '"';
    if (quoted)
        p++;
    for (; *p && !(quoted && *p == '"'); p++) {
        unsigned char ch = (unsigned char)*p;
        if (quoted && ch == '\\') {
            ch = (unsigned char)*++p;
            if (ch != '"' && ch != '\\')
                return -1; /* sf-string allows no other escape */
        } else if (!quoted && n == 0 && ch == ' ') {
            return -1;
        }
        if (ch < 0x20 || ch > 0x7e || n == GW_IDEM_KEY_MAX)
            return -1;
        out[n++] = (char)ch;
    }
    if (quoted && (*p != '"' || p[1] != '\0'))
        return -1;
    out[n] = '\0';
    return n > 0 ? 1 : -1;
}

/* Adds a field as its length in decimal, a colon, then its bytes, so
 * that no two different sequences of fields hash alike ("ab","c" and
 * "a","bc"), whatever the gateway's byte order. */
static int field(svc_sha256 *h, const void *data, size_t n)
{
    char len[24];
    int k = snprintf(len, sizeof len, "%zu:", n);
    return svc_sha256_update(h, len, (size_t)k) || (n && svc_sha256_update(h, data, n)) ? -1 : 0;
}

static int field_s(svc_sha256 *h, const char *s)
{
    return field(h, s ? s : "", s ? strlen(s) : 0);
}

int gw_idem_fingerprint(const gw_job_new *row, char hex[65])
{
    svc_sha256 *h = svc_sha256_new();
    if (h == NULL)
        return -1;
    char nums[64];
    int n = snprintf(nums, sizeof nums, "%d,%d,%d,%d", row->priority, row->timeout_s,
                     row->max_attempts, row->gpus);
    /* only when set, so that the keys of single-node jobs keep their
     * fingerprints across the upgrade that added them */
    if (row->nodes > 1 || row->gpu_memory_gb > 0)
        n += snprintf(nums + n, sizeof nums - (size_t)n, ",%d,%.9g", row->nodes, row->gpu_memory_gb);
    if (field_s(h, row->kernel) || field_s(h, row->params_json) || field(h, nums, (size_t)n) ||
        field_s(h, row->backend) || field_s(h, row->labels_json) || field_s(h, row->inputs_meta) ||
        field(h, row->inputs_data, row->inputs_len) || field_s(h, row->webhook) ||
        field_s(h, row->webhook ? row->webhook_events : NULL) ||
        (row->task_run_json && field_s(h, row->task_run_json))) {
        svc_sha256_free(h);
        return -1;
    }
    return svc_sha256_final_hex(h, hex);
}
