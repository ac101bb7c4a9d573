/* gpu/gpu-choose.c: --gpu / --gpu-layers (gpu/gpu-choose.h). */
#include "gpu/gpu-choose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend-split.h"
#include "gpu/backend-vk.h"
#include "gpu/vk-mm.h"
#include "gpu/vk-ops.h"

void gpu_features(const struct vk_dev_info *in, char *buf, size_t cap) {
    const struct {
        bool on;
        const char *name;
    } f[] = {{in->fp16, "fp16"},
             {in->storage16, "storage16"},
             {in->int8, "int8"},
             {in->int_dot, "int-dot"},
             {in->int_dot_accel, "int-dot-accel"},
             {in->coopmat, "coopmat"},
             {in->coopmat_nv, "coopmat-nv"},
             /* the prefill matmul runs on them (built with the extension too) */
             {in->coopmat_nv && vkmm_coop_built(), "mm-coopmat"},
             {in->push_descriptor, "push-descriptor"},
             {in->subgroup_arith, "subgroup-arith"},
             {in->timestamp_period_ns > 0, "timestamps"}};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof f / sizeof f[0] && n + 1 < cap; i++)
        if (f[i].on)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? " " : "", f[i].name);
}

void gpu_info_line(const struct vk_dev_info *in, char *buf, size_t cap) {
    char feat[160];
    gpu_features(in, feat, sizeof feat);
    snprintf(buf, cap, "device %d %.80s (%.80s), %.1f GiB, subgroup %u, %s", in->index, in->name,
             in->driver, (double)in->vram_bytes / (1024.0 * 1024.0 * 1024.0), in->subgroup_size,
             feat);
}

/* "N" as a non-negative int; -1 when s is not one. */
static int parse_count(const char *s) {
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 || v > 1 << 20 ? -1 : (int)v;
}

int gpu_choose(const struct gpu_choice_in *in, struct gpu_choice *out, struct strata_error *err) {
    memset(out, 0, sizeof *out);
    const char *g = in->gpu && *in->gpu ? in->gpu : "auto";
    const char *gl = in->gpu_layers && *in->gpu_layers ? in->gpu_layers : "all";
    const bool is_auto = strcmp(g, "auto") == 0, is_off = strcmp(g, "off") == 0;
    const int index = is_auto || is_off ? -1 : parse_count(g);
    if (!is_auto && !is_off && index < 0)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "--gpu %s: expected auto, off or a device index", g);
    const bool gl_auto = strcmp(gl, "auto") == 0;
    const bool all = gl_auto || strcmp(gl, "all") == 0; /* auto: all when it fits (below) */
    int n_gl = all ? -1 : parse_count(gl);
    if (!all && n_gl < 0)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "--gpu-layers %s: expected all, auto or a count", gl);
    if (is_off) {
        snprintf(out->rule, sizeof out->rule, "off (--gpu off): the CPU");
        return 0;
    }
    if (n_gl == 0) {
        snprintf(out->rule, sizeof out->rule, "off (--gpu-layers 0): the CPU");
        return 0;
    }
    if (in->n_head > 0 &&
        (!vkops_attn_supported(in->n_head, in->n_head_kv, in->head_dim_k, in->head_dim_v) ||
         in->n_rot > VKOPS_ROT_MAX)) {
        snprintf(out->rule, sizeof out->rule,
                 "the GPU kernels take no attention of %d/%d heads of %d/%d dims: the CPU",
                 in->n_head, in->n_head_kv, in->head_dim_k, in->head_dim_v);
        return 0;
    }
    if (in->n_expert > VKOPS_ROUTE_MAX || in->n_expert_used > VKOPS_ROUTE_K_MAX) {
        snprintf(out->rule, sizeof out->rule,
                 "the GPU kernels route at most %d experts, top %d (the model: %d, top %d): the "
                 "CPU",
                 VKOPS_ROUTE_MAX, VKOPS_ROUTE_K_MAX, in->n_expert, in->n_expert_used);
        return 0;
    }
    const int n_dev = vk_dev_count();
    if (n_dev == 0) {
        snprintf(out->rule, sizeof out->rule, "no Vulkan device: the CPU");
        return 0;
    }
    struct strata_error e = {0};
    struct vk_dev *probe = NULL;
    if (vk_dev_open(index, &probe, &e)) {
        snprintf(out->rule, sizeof out->rule, "%.300s: the CPU", e.message);
        return 0;
    }
    char line[384];
    const struct vk_dev_info info = *vk_dev_info(probe);
    vk_dev_close(probe);
    gpu_info_line(&info, line, sizeof line);
    if (is_auto && info.cpu) {
        snprintf(out->rule, sizeof out->rule,
                 "auto: the only device is a CPU implementation (%.80s; --gpu %d takes it): the "
                 "CPU",
                 info.name, info.index);
        return 0;
    }
    /* --gpu-layers auto: the layers that fit (gpu_auto_layers) when the
     * whole model does not */
    const uint64_t cap =
        in->mem_budget && in->mem_budget < info.vram_bytes ? in->mem_budget : info.vram_bytes;
    if (gl_auto && in->n_layer > 0 && (double)in->model_bytes > GPU_FIT_SHARE * (double)cap) {
        n_gl = gpu_auto_layers(in->model_bytes, in->n_layer, cap);
        if (n_gl == 0) {
            snprintf(out->rule, sizeof out->rule,
                     "--gpu-layers auto: not one layer of %.2f GiB fits %.80s (%.2f GiB): the CPU",
                     (double)in->model_bytes / in->n_layer / (1 << 30), info.name,
                     (double)cap / (1 << 30));
            return 0;
        }
    }
    if (is_auto && n_gl < 0 && (double)in->model_bytes > GPU_FIT_SHARE * (double)info.vram_bytes) {
        snprintf(out->rule, sizeof out->rule,
                 "auto: the weights (%.2f GiB) do not fit %.80s (%.2f GiB): the CPU",
                 (double)in->model_bytes / (1 << 30), info.name,
                 (double)info.vram_bytes / (1 << 30));
        return 0;
    }
    struct backend_vk_params vp = backend_vk_params_default();
    vp.device = info.index;
    vp.profile = in->profile;
    vp.pipeline_cache = in->pipeline_cache;
    vp.mem_budget = in->mem_budget;
    if (!(out->be = backend_vk_init(&vp, &e))) {
        snprintf(out->rule, sizeof out->rule, "%.200s: the CPU", e.message);
        return 0;
    }
    const bool split = n_gl >= 0 && n_gl < in->n_layer;
    out->n_layer_gpu = split ? n_gl : in->n_layer;
    out->has_pci = info.has_pci;
    out->pci_domain = info.pci_domain;
    out->pci_bus = info.pci_bus;
    out->pci_device = info.pci_device;
    out->pci_function = info.pci_function;
    if (split)
        snprintf(out->rule, sizeof out->rule,
                 "%.300s; layers 0-%d of %d on the GPU, the rest on the CPU", line, n_gl - 1,
                 in->n_layer);
    else
        snprintf(out->rule, sizeof out->rule, "%.340s; all %d layers on the GPU", line,
                 in->n_layer);
    return 0;
}

int gpu_auto_layers(uint64_t model_bytes, int n_layer, uint64_t device_bytes) {
    if (n_layer < 1)
        return 0;
    /* a layer's share of the file (the embedding and output spread over the
     * layers: an over-estimate of a layer, the margin), one layer's worth
     * kept free for the KV cache and the activations */
    const double per_layer = (double)model_bytes / n_layer;
    const double fit = GPU_FIT_SHARE * (double)device_bytes / (per_layer > 0 ? per_layer : 1) - 1;
    const int n = fit < 0 ? 0 : fit > n_layer ? n_layer : (int)fit;
    return n;
}

int gpu_choice_split(struct gpu_choice *ch, int n_layer, struct backend *cpu,
                     struct strata_error *err) {
    if (!ch->be || ch->n_layer_gpu >= n_layer) {
        backend_free(cpu);
        return 0;
    }
    struct backend *vk = ch->be;
    ch->be = NULL;
    if (!(ch->be = backend_split_init(vk, cpu, ch->n_layer_gpu, n_layer, err))) {
        ch->n_layer_gpu = 0;
        return err && err->code ? err->code : STRATA_E_NOMEM;
    }
    return 0;
}

struct backend *gpu_choice_vk(const struct gpu_choice *ch) {
    if (!ch->be)
        return NULL;
    struct backend *lo = backend_split_lo(ch->be);
    return lo ? lo : ch->be;
}
