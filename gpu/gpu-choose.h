/* gpu/gpu-choose.h: whether `strata run` and `strata serve` compute on a
 * GPU: --gpu auto|off|N and --gpu-layers all|N against the devices present
 * and the model's size, and the start-up log line.
 *
 *   struct gpu_choice_in in = {.gpu = "auto", .gpu_layers = "all",
 *                              .model_bytes = probe.n_bytes, .n_layer = hp.n_layer};
 *   struct gpu_choice ch;
 *   if (gpu_choose(&in, &ch, &err)) ... // a bad --gpu value: exit 2
 *   fprintf(stderr, "strata: gpu: %s\n", ch.rule);
 *   struct backend *be = ch.be ? ch.be : backend_cpu_init(&cp, &err);
 *
 * The rule: off, or --gpu-layers 0, is the CPU. auto takes the best device
 * (a discrete GPU first) but never a CPU implementation of Vulkan
 * (lavapipe: slower than the CPU backend by ~100x), and only when the
 * weights fit its memory (model bytes <= GPU_FIT_SHARE of the largest
 * device-local heap: the rest holds the KV cache and activations). N takes
 * device N whatever it is (lavapipe included: the tests' way onto it) and
 * does not check the fit (the load says when it does not fit). A device
 * missing, failing to open, or too small is a line in rule and the CPU,
 * never an error, and so is a model whose attention or routing shape the
 * kernels do not take (vkops_attn_supported, VKOPS_ROUTE_MAX, ...).
 * --gpu-layers N below the model's layer count opens the device the same
 * way and sets n_layer_gpu = N; the caller then hands a CPU backend to
 * gpu_choice_split, which makes be a split backend (backend-split.h):
 * layers [0, N) and their KV rows on the GPU, the rest, the output head and
 * the logits on the CPU.
 *
 * --gpu-layers auto: all when the weights fit (model bytes <= GPU_FIT_SHARE
 * of the device's memory, or of --gpu-mem-budget when smaller), else the
 * count gpu_auto_layers gives (0: the CPU), split as above.
 *
 * Threading: call from one thread (it opens a device).
 */
#ifndef STRATA_GPU_CHOOSE_H
#define STRATA_GPU_CHOOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "gpu/vk.h"

#define GPU_FIT_SHARE 0.90 /* of the device-local heap the weights may take */

struct gpu_choice_in {
    const char *gpu;            /* "auto" (NULL), "off", or a device index */
    const char *gpu_layers;     /* "all" (NULL), "auto" or a count */
    bool profile;               /* STRATA_GPU_PROFILE: time each dispatch */
    const char *pipeline_cache; /* --gpu-pipeline-cache file; NULL or "": none */
    uint64_t mem_budget;        /* --gpu-mem-budget: device memory the backend may hold; 0: all */
    uint64_t model_bytes;       /* the weights' bytes (model_probe n_bytes) */
    int n_layer;                /* the model's layers */
    /* the shapes the kernels have limits for (gpu/vk-ops.h); 0: unchecked */
    int n_head, n_head_kv, head_dim_k, head_dim_v, n_rot, n_expert, n_expert_used;
};

struct gpu_choice {
    struct backend *be; /* owned by the caller (backend_free); NULL: the CPU */
    int n_layer_gpu;    /* layers on the GPU (0, a --gpu-layers count, or n_layer) */
    char rule[384];     /* why: the device line, or why the CPU */
    /* the chosen device's PCI address (VK_EXT_pci_bus_info), when be is set
     * and the driver gives it: the NUMA node --numa auto binds to
     * (model_numa_gpu_node) */
    bool has_pci;
    uint32_t pci_domain, pci_bus, pci_device, pci_function;
};

/* Decides and opens. 0, or STRATA_E_CONFIG for a value that is not one of
 * the forms above (nothing opened). */
int gpu_choose(const struct gpu_choice_in *in, struct gpu_choice *out, struct strata_error *err);
/* The layers of a model of model_bytes and n_layer layers that fit
 * device_bytes, keeping one layer's worth for the KV cache and
 * activations: floor(GPU_FIT_SHARE * device_bytes / (model_bytes /
 * n_layer)) - 1, clamped to [0, n_layer]. */
int gpu_auto_layers(uint64_t model_bytes, int n_layer, uint64_t device_bytes);
/* When ch->be is set and ch->n_layer_gpu < n_layer: makes ch->be a split
 * backend over it (the GPU) and cpu (steals cpu either way; freed when not
 * needed). 0, or an error with ch->be freed and NULL (the CPU again). */
int gpu_choice_split(struct gpu_choice *ch, int n_layer, struct backend *cpu,
                     struct strata_error *err);
/* The Vulkan backend of ch->be (itself, or the GPU side of a split), for
 * backend_vk_info and the device's figures; NULL when the CPU. Borrowed. */
struct backend *gpu_choice_vk(const struct gpu_choice *ch);
/* "NAME (DRIVER), 80.0 GiB, subgroup 32, fp16 int8 int-dot ..." */
void gpu_info_line(const struct vk_dev_info *in, char *buf, size_t cap);
/* The features as a space-separated list: "fp16 int8 int-dot int-dot-accel
 * coopmat coopmat-nv mm-coopmat push-descriptor subgroup-arith" (those
 * present; coopmat: the KHR extension, coopmat-nv: the NV one with f16
 * 16x16x16 shapes, enabled; mm-coopmat: the prefill matmul runs on it). */
void gpu_features(const struct vk_dev_info *in, char *buf, size_t cap);

#endif
