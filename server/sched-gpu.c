/* server/sched-gpu.c: the GPU's part of the scheduler: the start-up
 * decision (--gpu, --gpu-layers over gpu/gpu-choose.h) before the model
 * loads, the CPU again when the load fails on the device, the KV pool's cap
 * in device memory, and the /status figures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/backend-cpu.h"
#include "engine/model/model.h"
#include "gpu/backend-vk.h"
#include "gpu/gpu-choose.h"
#include "gpu/vk-ops.h"
#include "server/sched-impl.h"

int sched_gpu_choose(struct sched *s, const struct sched_params *p, struct strata_error *err) {
    if (!(s->gpu = calloc(1, sizeof *s->gpu)))
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    struct model_probe mp;
    if (model_probe(p->model_path, &mp, NULL)) { /* the load says what is wrong */
        snprintf(s->gpu->rule, sizeof s->gpu->rule, "the model could not be probed: the CPU");
        return 0;
    }
    const struct gpu_choice_in in = {.gpu = p->gpu,
                                     .gpu_layers = p->gpu_layers,
                                     .profile = p->gpu_profile,
                                     .pipeline_cache = p->gpu_pipeline_cache,
                                     .mem_budget = (uint64_t)p->gpu_mem_budget,
                                     .model_bytes = mp.n_bytes,
                                     .n_layer = mp.hp.n_layer,
                                     .n_head = mp.hp.n_head,
                                     .n_head_kv = mp.hp.n_head_kv,
                                     .head_dim_k = mp.hp.head_dim_k,
                                     .head_dim_v = mp.hp.head_dim_v,
                                     .n_rot = mp.hp.n_rot,
                                     .n_expert = mp.hp.n_expert,
                                     .n_expert_used = mp.hp.n_expert_used};
    int rc = gpu_choose(&in, s->gpu, err);
    if (rc)
        return rc;
    fprintf(stderr, "strata: gpu: %s\n", s->gpu->rule);
    s->be = s->gpu->be;
    return 0;
}

void sched_gpu_split(struct sched *s, const struct sched_params *p,
                     const struct backend_cpu_params *cp) {
    struct model_probe mp;
    if (!s->gpu->be || model_probe(p->model_path, &mp, NULL) ||
        s->gpu->n_layer_gpu >= mp.hp.n_layer)
        return;
    struct strata_error e = {0};
    struct backend *cpu = backend_cpu_init(cp, &e);
    if (!cpu || gpu_choice_split(s->gpu, mp.hp.n_layer, cpu, &e)) {
        fprintf(stderr, "strata: gpu: the split failed (%s): the CPU\n", e.message);
        snprintf(s->gpu->rule, sizeof s->gpu->rule, "the split failed (%.300s): the CPU",
                 e.message);
        if (!cpu)
            backend_free(s->gpu->be);
        s->gpu->be = NULL;
        s->gpu->n_layer_gpu = 0;
    }
    s->be = s->gpu->be;
}

void sched_gpu_load_failed(struct sched *s, const struct strata_error *why) {
    fprintf(stderr, "strata: gpu: loading on the GPU failed (%s): the CPU\n",
            why && why->message[0] ? why->message : "?");
    snprintf(s->gpu->rule, sizeof s->gpu->rule, "loading on the GPU failed (%.300s): the CPU",
             why && why->message[0] ? why->message : "?");
    backend_free(s->be);
    s->be = NULL;
    s->gpu->be = NULL;
    s->gpu->n_layer_gpu = 0;
}

int64_t sched_gpu_kv_cap(const struct sched *s) {
    if (!s->gpu || !s->gpu->be || !s->be)
        return 0;
    const struct vk_dev_info *in = backend_vk_info(gpu_choice_vk(s->gpu));
    const uint64_t held = backend_vk_device_bytes(gpu_choice_vk(s->gpu));
    uint64_t usable = (uint64_t)(GPU_FIT_SHARE * (double)in->vram_bytes);
    if (s->p.gpu_mem_budget > 0 && (uint64_t)s->p.gpu_mem_budget < usable)
        usable = (uint64_t)s->p.gpu_mem_budget; /* --gpu-mem-budget */
    int64_t cap = usable > held ? (int64_t)(usable - held) : 0;
    /* the store spans VKOPS_KV_PIECES bindings of whole blocks (gpu/vk-ops.h) */
    const uint64_t range =
        in->max_storage_range < in->max_buffer_bytes ? in->max_storage_range : in->max_buffer_bytes;
    const int64_t pieces = (int64_t)(VKOPS_KV_PIECES * range);
    if (cap > pieces)
        cap = pieces;
    /* a split keeps n_layer_gpu of the model's layers a block on the GPU
     * (backend-split.h): the cap counts whole blocks */
    const int n_layer = s->model ? model_hparams(s->model)->n_layer : 0;
    if (s->gpu->n_layer_gpu > 0 && s->gpu->n_layer_gpu < n_layer)
        cap = (int64_t)((double)cap * n_layer / s->gpu->n_layer_gpu);
    return cap > 0 ? cap : 1;
}

void sched_gpu_stats(const struct sched *s, struct gen_stats *st) {
    struct gen_gpu *g = &st->gpu;
    if (!s->gpu)
        return;
    snprintf(g->rule, sizeof g->rule, "%s", s->gpu->rule);
    const struct vk_dev_info *in = s->gpu->be ? backend_vk_info(gpu_choice_vk(s->gpu)) : NULL;
    g->on = in != NULL;
    if (!in)
        return;
    snprintf(g->name, sizeof g->name, "%s", in->name);
    snprintf(g->driver, sizeof g->driver, "%s", in->driver);
    gpu_features(in, g->features, sizeof g->features);
    g->vram_bytes = in->vram_bytes;
    g->device_bytes = backend_vk_device_bytes(gpu_choice_vk(s->gpu));
    g->subgroup_size = in->subgroup_size;
    g->index = in->index;
    g->n_layer_gpu = s->gpu->n_layer_gpu;
    g->steps_sampled = s->steps_dev_sampled;
    g->n_layer = s->model ? model_hparams(s->model)->n_layer : 0;
}
