/* gpu/vk.h: the Vulkan runtime under the GPU backend (DESIGN.md, STYLE.md
 * rule 14): one device with one compute queue, buffers in device or
 * host-visible memory, compute pipelines from embedded SPIR-V, and one
 * recording (one command buffer) at a time.
 *
 *   struct vk_dev *d;
 *   if (vk_dev_open(-1, &d, &err) == STRATA_E_NOT_FOUND) ... // no device: use the CPU
 *   struct vk_buf *b = vk_buf_alloc(d, 4096, VK_MEM_DEVICE, &err);
 *   vk_buf_upload(d, b, 0, host, 4096, &err);              // synchronous (staging)
 *   static const uint32_t spv[] =
 *   #include "gpu/shaders/rt_axpb.spv.h"                     // glslc -mfmt=c at build
 *       ;
 *   struct vk_pipe *p = vk_pipe_create(d, "axpb", spv, sizeof spv, 2, 16, NULL, 0, &err);
 *   vk_rec_begin(d, &err);
 *   vk_dispatch(d, p, (struct vk_bind[]){{b, 0, 4096}, {out, 0, 4096}}, &push, 4, 1, 1);
 *   vk_rec_submit(d, &err);
 *   vk_rec_wait(d, &err);                                  // results in `out` now
 *   vk_pipe_free(d, p); vk_buf_free(d, b); vk_dev_close(d);
 *
 * Devices: vk_dev_open(-1) takes the best physical device (a discrete GPU
 * first, then integrated, virtual, CPU: lavapipe last), index N the Nth in
 * the loader's order (what `--gpu N` names; vk_dev_count lists them). It
 * needs Vulkan 1.2 and a compute queue.
 *
 * Memory: VK_MEM_DEVICE tries DEVICE_LOCAL memory, then any type the buffer
 * allows (a host-visible one on a device without separate VRAM);
 * VK_MEM_HOST tries HOST_VISIBLE|COHERENT|CACHED (reads back fast), then
 * HOST_VISIBLE|COHERENT. Each buffer is one VkBuffer with its own memory;
 * its size is at most vk_dev_info()->max_buffer_bytes, and one binding
 * spans at most max_storage_range bytes (128 MiB on lavapipe, 4 GiB - 1 on
 * NVIDIA), so bigger weights come as several buffers.
 *
 * Pipelines: storage buffers at bindings 0 .. n_bind-1 of set 0, a push
 * constant block of push_bytes (<= 128, visible to the compute stage), and
 * specialization constants constant_id 0 .. n_spec-1, each a uint32 (use
 * the bits of a float or int as the shader declares it). The name is what
 * the profile lists the pipeline's dispatches under.
 *
 * Recording: between vk_rec_begin and vk_rec_submit each vk_dispatch and
 * vk_copy is recorded into the one command buffer, with a full
 * compute/transfer -> compute/transfer/host memory barrier after each, so
 * each command sees every earlier one's writes. vk_rec_submit queues the
 * buffer; vk_rec_wait returns when it has run. vk_rec_begin while a
 * submitted buffer runs waits for it first. vk_buf_upload/download are
 * synchronous and must not be called between vk_rec_begin and
 * vk_rec_submit (they use a second command buffer and wait for the queue).
 * Buffers a recording uses must live until its wait returns.
 *
 * Profiling: vk_prof_enable(d, true) before a recording makes each dispatch
 * write a timestamp before and after itself (devices with
 * timestamp_period_ns > 0); each wait adds the times to a table per
 * pipeline name, vk_prof_report prints it.
 *
 * Compiler statistics: with STRATA_VK_PIPE_STATS=1 in the environment at
 * vk_dev_open, on a driver with VK_KHR_pipeline_executable_properties
 * (NVIDIA has it, lavapipe not), each vk_pipe_create prints one stderr line
 * per executable, "pipe-stats NAME: stat=value ..." (the driver's own
 * statistics: registers, spills, shared memory where it reports them), for
 * reading why a kernel runs as it does.
 *
 * Errors: VK_ERROR_DEVICE_LOST becomes STRATA_E_IO "device lost" (and every
 * later call on the device fails the same way), out of device or host memory
 * STRATA_E_NOMEM; no Vulkan loader, no instance or no device at all is
 * STRATA_E_NOT_FOUND from vk_dev_open. A vk_dispatch or vk_copy that
 * cannot be recorded (a descriptor pool out of memory) marks the recording
 * failed: vk_rec_submit returns the error and runs nothing.
 *
 * Threading: a vk_dev and all it hands out belong to one thread at a time
 * (the forward pass's); nothing here is shared between devices.
 */
#ifndef STRATA_VK_H
#define STRATA_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/core/error.h"

struct vk_dev; /* instance + physical device + device + one compute queue + pools */

struct vk_dev_info {
    char name[256];   /* VkPhysicalDeviceProperties.deviceName */
    char driver[256]; /* driverName and driverInfo ("llvmpipe" / "NVIDIA 550.54") */
    uint32_t vendor_id, device_id;
    int index;                  /* in the loader's order (what --gpu N names) */
    int discrete;               /* 1: a discrete GPU */
    int cpu;                    /* 1: a CPU implementation (lavapipe) */
    uint64_t vram_bytes;        /* the largest DEVICE_LOCAL heap */
    uint32_t subgroup_size;     /* 32 on NVIDIA, 8/16 lavapipe (AVX2/AVX-512), 64 AMD */
    uint64_t max_storage_range; /* maxStorageBufferRange: bytes one binding spans */
    uint64_t max_buffer_bytes;  /* what vk_buf_alloc accepts (maxMemoryAllocationSize) */
    uint64_t min_storage_align; /* minStorageBufferOffsetAlignment: vk_bind.off multiple */
    uint32_t max_shared_bytes;  /* maxComputeSharedMemorySize */
    uint32_t max_push_bytes;    /* maxPushConstantsSize (>= 128) */
    bool fp16;                  /* shaderFloat16 */
    bool storage16;             /* storageBuffer16BitAccess: f16 loads from buffers */
    bool storage8;              /* storageBuffer8BitAccess */
    bool int8;                  /* shaderInt8 */
    bool int_dot;               /* VK_KHR_shader_integer_dot_product (or 1.3) */
    bool int_dot_accel;         /* integerDotProduct4x8BitPackedSignedAccelerated */
    bool coopmat;               /* VK_KHR_cooperative_matrix supported by the driver */
    /* VK_NV_cooperative_matrix enabled, with 16 x 16 x 16 f16 A/B and f32 C/D
     * at subgroup scope (what gpu/shaders/mm_coop.comp uses; Debian 12's
     * glslc compiles GL_NV_cooperative_matrix but not the KHR form) */
    bool coopmat_nv;
    bool push_descriptor; /* VK_KHR_push_descriptor */
    bool subgroup_arith;  /* subgroup arithmetic ops in compute */
    uint32_t max_wg_size[3], max_wg_invocations, max_wg_count[3];
    float timestamp_period_ns; /* ns per timestamp tick; 0: no timestamps on the queue */
    bool has_pci;              /* VK_EXT_pci_bus_info: the address below (NUMA locality) */
    uint32_t pci_domain, pci_bus, pci_device, pci_function;
};

/* The number of physical devices (0 without a loader or an ICD). */
int vk_dev_count(void);
/* Opens device `index` (-1: the best one). STRATA_E_NOT_FOUND: no Vulkan
 * or no such device; STRATA_E_UNSUPPORTED: the device lacks what strata
 * needs (Vulkan 1.2, a compute queue); STRATA_E_NOMEM. *out owned: close
 * with vk_dev_close. */
int vk_dev_open(int index, struct vk_dev **out, struct strata_error *err);
const struct vk_dev_info *vk_dev_info(const struct vk_dev *d); /* borrowed */
/* Waits for the queue, frees what the device made. NULL is a no-op. Every
 * buffer and pipeline must be freed first. */
void vk_dev_close(struct vk_dev *d);
/* Keeps compiled pipelines in the file at path (loaded now when it exists
 * and the driver accepts it: the driver checks its own header, a foreign or
 * stale file is ignored; written back at vk_dev_close, through a temporary
 * file renamed over it). Call before the first vk_pipe_create. A driver
 * compiles a dequantizing matmul in ~0.1-1 s; a model needs ~30-60 of them.
 * 0, or STRATA_E_NOMEM. */
int vk_dev_pipeline_cache(struct vk_dev *d, const char *path, struct strata_error *err);
/* 1 once the device was lost (every later call fails). */
bool vk_dev_lost(const struct vk_dev *d);
/* Dispatches recorded on the device since it was opened (tests count what
 * a step records: the fused forms of gpu/backend-vk-fuse.c). */
uint64_t vk_dev_dispatches(const struct vk_dev *d);
/* Caps the device memory vk_buf_alloc hands out at `bytes` (0: no cap
 * beyond the device's own): an allocation past it fails as the device's
 * out-of-memory does (STRATA_E_NOMEM), so tests on lavapipe reach that
 * path and a shared GPU can be given a share (--gpu-mem-budget). */
void vk_dev_set_budget(struct vk_dev *d, uint64_t bytes);
/* Bytes allocated through vk_buf_alloc now, per kind (for /status, leaks). */
uint64_t vk_dev_allocated(const struct vk_dev *d, int device_memory);

/* ---- buffers ---- */

struct vk_buf; /* opaque: one VkBuffer + its memory */

enum vk_mem {
    VK_MEM_DEVICE = 0, /* device-local when the device has it */
    VK_MEM_HOST = 1,   /* host-visible, coherent: staging, readback */
};

/* A buffer of `bytes` (> 0), zeroed: owned, free with vk_buf_free.
 * STRATA_E_NOMEM when no memory type has room, STRATA_E_RANGE above
 * max_buffer_bytes. */
struct vk_buf *vk_buf_alloc(struct vk_dev *d, uint64_t bytes, enum vk_mem mem,
                            struct strata_error *err);
void vk_buf_free(struct vk_dev *d, struct vk_buf *b); /* NULL is a no-op */
uint64_t vk_buf_size(const struct vk_buf *b);
bool vk_buf_host(const struct vk_buf *b); /* host-visible memory (either kind) */
void *vk_buf_map(struct vk_buf *b);       /* host-visible buffers only, else NULL */
/* Synchronous copies through a staging buffer (or the mapping of a
 * host-visible buffer), outside a recording: they wait for the queue. */
int vk_buf_upload(struct vk_dev *d, struct vk_buf *dst, uint64_t off, const void *src, uint64_t n,
                  struct strata_error *err);
int vk_buf_download(struct vk_dev *d, const struct vk_buf *src, uint64_t off, void *dst, uint64_t n,
                    struct strata_error *err);
/* Synchronous copy of n bytes between device buffers (regions must not
 * overlap when src == dst). */
int vk_buf_copy(struct vk_dev *d, const struct vk_buf *src, uint64_t soff, struct vk_buf *dst,
                uint64_t doff, uint64_t n, struct strata_error *err);
/* Synchronous fill with a 32-bit pattern (off, n multiples of 4). */
int vk_buf_fill(struct vk_dev *d, struct vk_buf *dst, uint64_t off, uint64_t n, uint32_t value,
                struct strata_error *err);

/* ---- pipelines ---- */

struct vk_pipe; /* one compute pipeline with its layouts */

/* spv: SPIR-V words (borrowed during the call), spv_bytes a multiple of 4.
 * Owned: free with vk_pipe_free. */
struct vk_pipe *vk_pipe_create(struct vk_dev *d, const char *name, const uint32_t *spv,
                               size_t spv_bytes, int n_bind, uint32_t push_bytes,
                               const uint32_t *spec, int n_spec, struct strata_error *err);
void vk_pipe_free(struct vk_dev *d, struct vk_pipe *p); /* NULL is a no-op */
const char *vk_pipe_name(const struct vk_pipe *p);

/* One storage-buffer binding: bytes [off, off + range) of buf; range 0
 * means to the end of the buffer (capped at max_storage_range). off must
 * be a multiple of min_storage_align. */
struct vk_bind {
    const struct vk_buf *buf;
    uint64_t off, range;
};

/* ---- recording ---- */

int vk_rec_begin(struct vk_dev *d, struct strata_error *err);
/* binds: the pipeline's n_bind bindings; push: its push_bytes (may be NULL
 * when 0). gx, gy, gz workgroups (each >= 1, within max_wg_count). */
void vk_dispatch(struct vk_dev *d, const struct vk_pipe *p, const struct vk_bind *binds,
                 const void *push, uint32_t gx, uint32_t gy, uint32_t gz);
/* n bytes from src at soff to dst at doff (multiples of 4), recorded. */
void vk_copy(struct vk_dev *d, const struct vk_buf *src, uint64_t soff, const struct vk_buf *dst,
             uint64_t doff, uint64_t n);
/* Fills n bytes of dst at off with a 32-bit pattern (multiples of 4), recorded. */
void vk_fill(struct vk_dev *d, const struct vk_buf *dst, uint64_t off, uint64_t n, uint32_t value);
/* Independent commands: between vk_rec_group(d, true) and vk_rec_group(d,
 * false) dispatches, copies and fills get no barrier after each (they must
 * not read what another of the group writes: the Q, K and V matmuls of one
 * input); closing the group records the one barrier. Saves a pipeline
 * drain per command (~2-5 us each on a big GPU, where a decode step is a
 * few hundred dispatches). */
void vk_rec_group(struct vk_dev *d, bool on);
bool vk_rec_active(const struct vk_dev *d);  /* between vk_rec_begin and vk_rec_submit */
bool vk_rec_pending(const struct vk_dev *d); /* submitted, not waited for */
/* Queues the recording (0, or the first recording error: nothing runs). */
int vk_rec_submit(struct vk_dev *d, struct strata_error *err);
/* Waits for the submitted recording (0 at once when none is pending).
 * STRATA_E_IO "device lost" on VK_ERROR_DEVICE_LOST. */
int vk_rec_wait(struct vk_dev *d, struct strata_error *err);

/* ---- profile ---- */

/* Timestamps around each dispatch of the next recordings (false: off). */
void vk_prof_enable(struct vk_dev *d, bool on);
/* Per pipeline name: dispatches, total and mean microseconds, share of the
 * total, sorted by total time; then resets the table. Nothing when empty. */
void vk_prof_report(struct vk_dev *d, FILE *out);

#endif
