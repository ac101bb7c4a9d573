/* server/status-gpu.h: the GPU (gen_stats.gpu) in /status. A pure
 * function of a stats snapshot; any thread.
 *
 *   json_t *o = status_gpu_json(&st);   // NULL when the CPU computes
 */
#ifndef STRATA_SERVER_STATUS_GPU_H
#define STRATA_SERVER_STATUS_GPU_H

#include <jansson.h>

#include "server/gen.h"

/* {on, index, name, driver, memory_bytes, device_bytes, subgroup_size,
 * features [..], layers_gpu, layers, rule}; NULL when the CPU computes (the
 * caller notes st->gpu.rule). Owned by the caller. */
json_t *status_gpu_json(const struct gen_stats *st);

#endif
