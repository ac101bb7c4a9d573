/* server/status-xstore.h: the expert store (gen_stats.xstore) in /status
 * and /metrics. Pure functions of a stats snapshot; any thread.
 *
 *   json_t *o = status_xstore_json(&st);       // NULL when the store is off
 *   char *text = status_xstore_metrics(&st);   // owned: free(); NULL: no memory
 */
#ifndef STRATA_SERVER_STATUS_XSTORE_H
#define STRATA_SERVER_STATUS_XSTORE_H

#include <jansson.h>

#include "server/gen.h"

/* {on, mode, rule, capacity_bytes, used_bytes, slots, slots_used,
 * slot_bytes, hits, misses, hit_rate, overflow, evictions, read_errors,
 * bytes_read, reads, batches, read_latency_us {mean, buckets [{le_us,
 * count}]}, prefetch {asked_dropped}, layers [{hits, misses}]}; NULL when
 * the store is off (the caller notes st->xstore.rule). Owned by the caller. */
json_t *status_xstore_json(const struct gen_stats *st);
/* Prometheus lines (strata_expert_store_*); "" when off. */
char *status_xstore_metrics(const struct gen_stats *st);

#endif
