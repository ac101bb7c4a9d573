/* server/status-gpu.c: the GPU in /status (status-gpu.h). */
#include "server/status-gpu.h"

#include <string.h>

json_t *status_gpu_json(const struct gen_stats *st) {
    const struct gen_gpu *g = &st->gpu;
    if (!g->on)
        return NULL;
    json_t *feat = json_array();
    char buf[sizeof g->features];
    memcpy(buf, g->features, sizeof buf);
    buf[sizeof buf - 1] = '\0';
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
        json_array_append_new(feat, json_string(t));
    return json_pack("{s:b, s:i, s:s, s:s, s:I, s:I, s:i, s:o, s:i, s:i, s:s, s:I}", "on", 1,
                     "index", g->index, "name", g->name, "driver", g->driver, "memory_bytes",
                     (json_int_t)g->vram_bytes, "device_bytes", (json_int_t)g->device_bytes,
                     "subgroup_size", (int)g->subgroup_size, "features", feat, "layers_gpu",
                     g->n_layer_gpu, "layers", g->n_layer, "rule", g->rule, "steps_sampled",
                     (json_int_t)g->steps_sampled);
}
