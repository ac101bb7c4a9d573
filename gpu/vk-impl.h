/* gpu/vk-impl.h: the runtime's internals shared by gpu/vk-dev.c (instance,
 * device), gpu/vk-mem.c (buffers, staging) and gpu/vk-rec.c (pipelines,
 * recording, profile). Not for callers: they use gpu/vk.h.
 *
 * Threading: as gpu/vk.h (one thread per device).
 */
#ifndef STRATA_VK_IMPL_H
#define STRATA_VK_IMPL_H

#include <vulkan/vulkan.h>

#include "gpu/vk.h"

#define VK_STAGING_BYTES (32ull << 20) /* one staging chunk: 32 MiB */
#define VK_PROF_MAX 4096               /* timed dispatches per recording (2 queries each) */
#define VK_DESC_POOL_SETS 1024         /* sets per descriptor pool (no push descriptors) */
#define VK_BIND_MAX 16                 /* storage buffers per pipeline */
/* A recording is submitted in parts as it grows, so the device starts on
 * the first layers while the host records the rest: the first part after
 * VK_REC_SPLIT_FIRST dispatches, then every VK_REC_SPLIT_EVERY, at most
 * VK_REC_PARTS parts (then one part to the end). Recording costs ~1 us a
 * dispatch on the host (push descriptors, push constants, barrier) and a
 * 7B decode step is ~450 dispatches, ~0.5 ms the device would otherwise
 * sit idle for; a submit costs ~10-20 us. */
#define VK_REC_PARTS 8
#define VK_REC_SPLIT_FIRST 32
#define VK_REC_SPLIT_EVERY 128

struct vk_prof_row {
    char name[48];
    uint64_t n;
    double ns;
};

struct vk_dev {
    struct vk_dev_info info;
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceMemoryProperties mem_props;
    VkCommandPool pool;
    VkCommandBuffer cmds[VK_REC_PARTS]; /* the recording's parts */
    VkCommandBuffer cmd;                /* the part being recorded: cmds[part] */
    int part;             /* parts submitted before cmd (no fence: the last's covers them) */
    int n_since_split;    /* dispatches recorded into cmd */
    VkFence fence;        /* signalled when cmd's submission has run */
    VkCommandBuffer xfer; /* synchronous uploads, downloads, fills */
    VkFence xfer_fence;
    PFN_vkCmdPushDescriptorSetKHR push_desc; /* NULL: descriptor pools */
    /* STRATA_VK_PIPE_STATS=1 where the driver has
     * VK_KHR_pipeline_executable_properties: each pipeline's compiler
     * statistics (registers, spills, ...) to stderr at its creation */
    PFN_vkGetPipelineExecutablePropertiesKHR exec_props;
    PFN_vkGetPipelineExecutableStatisticsKHR exec_stats;
    VkPipelineCache pcache; /* every pipeline's; VK_NULL_HANDLE: none */
    char *pcache_path;      /* owned: where vk_dev_close writes it; NULL: not */
    bool lost;
    bool recording, pending;
    bool group;          /* vk_rec_group: no barrier after each command */
    bool group_dirty;    /* a command was recorded in the open group */
    bool group_transfer; /* ... and one of them was a copy or a fill */
    /* STRATA_VK_BARRIER=compute (read at open): the barrier after a
     * dispatch names the compute stage alone, and a copy or fill gets one
     * from compute before it (vk-rec.c); else every barrier names compute
     * and transfer. For measuring what the stages cost (bench/mv-bench). */
    bool bar_compute;
    int rec_err;              /* first error of the recording (STRATA_E_*) */
    char rec_msg[160];        /* its message */
    struct vk_buf *staging;   /* VK_STAGING_BYTES host-visible, made at first use */
    VkDescriptorPool *dpools; /* (n_dpool) pools of VK_DESC_POOL_SETS sets */
    int n_dpool, dpool_used;  /* pools handed out in this recording */
    uint64_t alloc_dev, alloc_host;
    uint64_t budget; /* device memory vk_buf_alloc may hold, bytes; 0: the device's */
    /* profile */
    bool prof_on;
    uint64_t n_dispatch; /* dispatches recorded since open (vk_dev_dispatches) */
    VkQueryPool qpool;
    const struct vk_pipe *prof_pipe[VK_PROF_MAX]; /* dispatch i: queries 2i, 2i+1 */
    int prof_n;
    struct vk_prof_row *prof_rows;
    int prof_n_rows, prof_cap_rows;
};

struct vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    uint64_t size;
    void *map; /* host-visible: persistently mapped */
    bool device;
};

struct vk_pipe {
    char name[48];
    VkShaderModule module;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe;
    int n_bind;
    uint32_t push_bytes;
};

/* Sets err from a VkResult of `what` (marks the device lost on
 * VK_ERROR_DEVICE_LOST) and returns the STRATA_E_* code. */
int vk_check(struct vk_dev *d, VkResult r, const char *what, struct strata_error *err);
/* Records cmd's work into the transfer buffer through fn, submits it and waits. */
int vk_xfer_begin(struct vk_dev *d, struct strata_error *err);
int vk_xfer_end(struct vk_dev *d, struct strata_error *err);
void vk_rec_free(struct vk_dev *d); /* descriptor pools, query pool, profile table */

#endif
