/* gpu/vk-rec.c: compute pipelines, descriptor binding (push descriptors, or
 * sets from pools reset at each recording), the recording with its
 * barriers, submit and wait, and the timestamp profile (gpu/vk.h). */
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-impl.h"

/* The driver's statistics of p's executables, one stderr line each
 * (STRATA_VK_PIPE_STATS, gpu/vk-impl.h): what a benchmark reads for
 * registers, spills and shared memory a kernel takes. */
static void pipe_stats(struct vk_dev *d, const struct vk_pipe *p) {
    VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = p->pipe};
    uint32_t n = 0;
    if (d->exec_props(d->dev, &pi, &n, NULL) != VK_SUCCESS)
        return;
    for (uint32_t e = 0; e < n && e < 4; e++) {
        VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                          .pipeline = p->pipe,
                                          .executableIndex = e};
        VkPipelineExecutableStatisticKHR st[32];
        uint32_t ns = 32;
        for (uint32_t i = 0; i < ns; i++)
            st[i] = (VkPipelineExecutableStatisticKHR){
                .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
        VkResult r = d->exec_stats(d->dev, &ei, &ns, st);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE)
            continue;
        fprintf(stderr, "pipe-stats %s:", p->name);
        for (uint32_t i = 0; i < ns; i++) {
            fprintf(stderr, " %s=", st[i].name);
            switch (st[i].format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
                fprintf(stderr, "%u", (unsigned)st[i].value.b32);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
                fprintf(stderr, "%lld", (long long)st[i].value.i64);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                fprintf(stderr, "%llu", (unsigned long long)st[i].value.u64);
                break;
            default:
                fprintf(stderr, "%g", st[i].value.f64);
            }
        }
        fprintf(stderr, "\n");
    }
}

struct vk_pipe *vk_pipe_create(struct vk_dev *d, const char *name, const uint32_t *spv,
                               size_t spv_bytes, int n_bind, uint32_t push_bytes,
                               const uint32_t *spec, int n_spec, struct strata_error *err) {
    if (n_bind < 0 || n_bind > VK_BIND_MAX || push_bytes > d->info.max_push_bytes ||
        (push_bytes & 3) || spv_bytes == 0 || (spv_bytes & 3) || n_spec < 0 || n_spec > 32) {
        strata_error_set(err, STRATA_E_INVALID,
                         "vulkan: pipeline %s: %d bindings, %u push bytes, %d constants", name,
                         n_bind, push_bytes, n_spec);
        return NULL;
    }
    struct vk_pipe *p = calloc(1, sizeof *p);
    if (!p) {
        strata_error_set(err, STRATA_E_NOMEM, "vulkan: out of memory");
        return NULL;
    }
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n_bind = n_bind;
    p->push_bytes = push_bytes;
    VkShaderModuleCreateInfo sci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = spv_bytes, .pCode = spv};
    if (vk_check(d, vkCreateShaderModule(d->dev, &sci, NULL, &p->module), "shader module", err))
        goto fail;
    VkDescriptorSetLayoutBinding lb[VK_BIND_MAX];
    for (int i = 0; i < n_bind; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                               .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1,
                                               .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = d->push_desc ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0,
        .bindingCount = (uint32_t)n_bind,
        .pBindings = lb};
    if (vk_check(d, vkCreateDescriptorSetLayout(d->dev, &dci, NULL, &p->dsl), "set layout", err))
        goto fail;
    VkPushConstantRange pr = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = push_bytes};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &p->dsl,
                                      .pushConstantRangeCount = push_bytes ? 1 : 0,
                                      .pPushConstantRanges = &pr};
    if (vk_check(d, vkCreatePipelineLayout(d->dev, &lci, NULL, &p->layout), "pipeline layout", err))
        goto fail;
    VkSpecializationMapEntry me[32];
    for (int i = 0; i < n_spec; i++)
        me[i] = (VkSpecializationMapEntry){
            .constantID = (uint32_t)i, .offset = (uint32_t)(4 * i), .size = 4};
    VkSpecializationInfo si = {.mapEntryCount = (uint32_t)n_spec,
                               .pMapEntries = me,
                               .dataSize = (size_t)n_spec * 4,
                               .pData = spec};
    VkComputePipelineCreateInfo cci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = p->module,
                  .pName = "main",
                  .pSpecializationInfo = n_spec ? &si : NULL},
        .layout = p->layout};
    if (d->exec_props && d->exec_stats)
        cci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    if (vk_check(d, vkCreateComputePipelines(d->dev, d->pcache, 1, &cci, NULL, &p->pipe),
                 "compute pipeline", err))
        goto fail;
    if (d->exec_props && d->exec_stats)
        pipe_stats(d, p);
    return p;
fail:
    strata_error_prefix(err, "pipeline %s", name);
    vk_pipe_free(d, p);
    return NULL;
}

void vk_pipe_free(struct vk_dev *d, struct vk_pipe *p) {
    if (!p)
        return;
    if (p->pipe)
        vkDestroyPipeline(d->dev, p->pipe, NULL);
    if (p->layout)
        vkDestroyPipelineLayout(d->dev, p->layout, NULL);
    if (p->dsl)
        vkDestroyDescriptorSetLayout(d->dev, p->dsl, NULL);
    if (p->module)
        vkDestroyShaderModule(d->dev, p->module, NULL);
    free(p);
}

const char *vk_pipe_name(const struct vk_pipe *p) {
    return p->name;
}

static void vk_rec_fail(struct vk_dev *d, int code, const char *msg) {
    if (d->rec_err)
        return;
    d->rec_err = code;
    /* a longer message is cut at the buffer (the caller's text is a log line) */
    const size_t n = strnlen(msg, sizeof d->rec_msg - 1);
    memcpy(d->rec_msg, msg, n);
    d->rec_msg[n] = '\0';
}

void vk_rec_free(struct vk_dev *d) {
    for (int i = 0; i < d->n_dpool; i++)
        vkDestroyDescriptorPool(d->dev, d->dpools[i], NULL);
    free(d->dpools);
    d->dpools = NULL;
    d->n_dpool = d->dpool_used = 0;
    if (d->qpool)
        vkDestroyQueryPool(d->dev, d->qpool, NULL);
    d->qpool = VK_NULL_HANDLE;
    free(d->prof_rows);
    d->prof_rows = NULL;
    d->prof_n_rows = d->prof_cap_rows = 0;
}

int vk_rec_begin(struct vk_dev *d, struct strata_error *err) {
    int rc = vk_rec_wait(d, err);
    if (rc)
        return rc;
    if (d->recording) { /* an unsubmitted recording is dropped */
        if (d->cmd)
            vkEndCommandBuffer(d->cmd);
        d->recording = false;
        if (d->part > 0) /* its first parts run: no fence covers them */
            vkQueueWaitIdle(d->queue);
    }
    d->part = 0;
    d->n_since_split = 0;
    d->cmd = d->cmds[0];
    if (d->lost)
        return strata_error_set(err, STRATA_E_IO, "vulkan: device lost");
    for (int i = 0; i < d->dpool_used; i++)
        vkResetDescriptorPool(d->dev, d->dpools[i], 0);
    d->dpool_used = 0;
    d->rec_err = 0;
    d->rec_msg[0] = '\0';
    d->prof_n = 0;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if ((rc = vk_check(d, vkResetCommandBuffer(d->cmd, 0), "vkResetCommandBuffer", err)) ||
        (rc = vk_check(d, vkBeginCommandBuffer(d->cmd, &bi), "vkBeginCommandBuffer", err)))
        return rc;
    d->recording = true;
    d->group = d->group_dirty = false;
    if (d->prof_on && d->info.timestamp_period_ns > 0) {
        if (!d->qpool) {
            VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                         .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                         .queryCount = 2 * VK_PROF_MAX};
            if (vkCreateQueryPool(d->dev, &qci, NULL, &d->qpool) != VK_SUCCESS)
                d->qpool = VK_NULL_HANDLE;
        }
        if (d->qpool)
            vkCmdResetQueryPool(d->cmd, d->qpool, 0, 2 * VK_PROF_MAX);
    }
    return 0;
}

/* A descriptor set for p from this recording's pools (no push descriptors). */
static VkDescriptorSet vk_set_alloc(struct vk_dev *d, const struct vk_pipe *p) {
    for (;;) {
        if (d->dpool_used == d->n_dpool) {
            VkDescriptorPool *np = realloc(d->dpools, (size_t)(d->n_dpool + 1) * sizeof *np);
            if (!np)
                return VK_NULL_HANDLE;
            d->dpools = np;
            VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .descriptorCount = VK_DESC_POOL_SETS * 8};
            VkDescriptorPoolCreateInfo pci = {.sType =
                                                  VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                              .maxSets = VK_DESC_POOL_SETS,
                                              .poolSizeCount = 1,
                                              .pPoolSizes = &ps};
            if (vkCreateDescriptorPool(d->dev, &pci, NULL, &d->dpools[d->n_dpool]) != VK_SUCCESS)
                return VK_NULL_HANDLE;
            d->n_dpool++;
        }
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = d->dpools[d->dpool_used],
                                          .descriptorSetCount = 1,
                                          .pSetLayouts = &p->dsl};
        VkDescriptorSet s = VK_NULL_HANDLE;
        VkResult r = vkAllocateDescriptorSets(d->dev, &ai, &s);
        if (r == VK_SUCCESS)
            return s;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
            return VK_NULL_HANDLE;
        d->dpool_used++; /* this pool is full: the next one */
    }
}

/* Between commands: device writes before, device reads and writes after.
 * The host's view comes once, at the end of the recording (vk_host_barrier),
 * not after every command. */
static const VkMemoryBarrier vk_barrier = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
static const VkMemoryBarrier vk_host_barrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT |
                                                                 VK_ACCESS_TRANSFER_WRITE_BIT,
                                                .dstAccessMask = VK_ACCESS_HOST_READ_BIT};

/* Submits the part recorded so far (no fence) and opens the next. */
static void vk_rec_split(struct vk_dev *d) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &d->cmd};
    VkResult r = vkEndCommandBuffer(d->cmd);
    if (r == VK_SUCCESS)
        r = vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE);
    if (r == VK_SUCCESS) {
        d->part++;
        d->cmd = d->cmds[d->part];
        r = vkResetCommandBuffer(d->cmd, 0);
        if (r == VK_SUCCESS)
            r = vkBeginCommandBuffer(d->cmd, &bi);
    }
    d->n_since_split = 0;
    if (r != VK_SUCCESS) {
        struct strata_error e = {0};
        vk_check(d, r, "a recording's part", &e);
        vk_rec_fail(d, e.code, e.message); /* submit reports it; nothing more is recorded */
        d->cmd = VK_NULL_HANDLE;
    }
}

static const VkMemoryBarrier vk_cbarrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                            .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                            .dstAccessMask = VK_ACCESS_SHADER_READ_BIT |
                                                             VK_ACCESS_SHADER_WRITE_BIT};
static const VkMemoryBarrier vk_tbarrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                            .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                            .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT |
                                                             VK_ACCESS_TRANSFER_WRITE_BIT};

/* With bar_compute: before a copy or fill, what the dispatches wrote (the
 * barrier after them named the compute stage alone). */
static void vk_barrier_to_transfer(struct vk_dev *d) {
    if (d->cmd && d->bar_compute)
        vkCmdPipelineBarrier(d->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &vk_tbarrier, 0, NULL, 0, NULL);
}

static void vk_barrier_after(struct vk_dev *d, bool transfer) {
    if (!d->cmd)
        return; /* a part failed to open (the recording's error says so) */
    if (d->group) {
        d->group_dirty = true;
        d->group_transfer |= transfer;
        return;
    }
    if (d->bar_compute && !transfer) {
        vkCmdPipelineBarrier(d->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &vk_cbarrier, 0, NULL, 0,
                             NULL);
        return;
    }
    vkCmdPipelineBarrier(d->cmd,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                         1, &vk_barrier, 0, NULL, 0, NULL);
}

void vk_dispatch(struct vk_dev *d, const struct vk_pipe *p, const struct vk_bind *binds,
                 const void *push, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (!d->recording || d->rec_err)
        return;
    if (gx == 0 || gy == 0 || gz == 0)
        return; /* nothing to do */
    if (gx > d->info.max_wg_count[0] || gy > d->info.max_wg_count[1] ||
        gz > d->info.max_wg_count[2]) {
        char m[160];
        snprintf(m, sizeof m, "vulkan: %s: %u x %u x %u workgroups exceed the device's limit",
                 p->name, gx, gy, gz);
        vk_rec_fail(d, STRATA_E_RANGE, m);
        return;
    }
    VkDescriptorBufferInfo bi[VK_BIND_MAX];
    VkWriteDescriptorSet w[VK_BIND_MAX];
    for (int i = 0; i < p->n_bind; i++) {
        const struct vk_bind *b = &binds[i];
        uint64_t range = b->range;
        if (!b->buf || b->off >= b->buf->size || (b->off % d->info.min_storage_align) ||
            (range && range > b->buf->size - b->off)) {
            char m[160];
            snprintf(m, sizeof m, "vulkan: %s: binding %d outside its buffer or misaligned",
                     p->name, i);
            vk_rec_fail(d, STRATA_E_INTERNAL, m);
            return;
        }
        if (!range)
            range = b->buf->size - b->off;
        if (range > d->info.max_storage_range)
            range = d->info.max_storage_range & ~3ull;
        bi[i] = (VkDescriptorBufferInfo){.buffer = b->buf->buf, .offset = b->off, .range = range};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
    if (d->push_desc) {
        d->push_desc(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, (uint32_t)p->n_bind, w);
    } else if (p->n_bind) {
        VkDescriptorSet s = vk_set_alloc(d, p);
        if (!s) {
            vk_rec_fail(d, STRATA_E_NOMEM, "vulkan: descriptor pool out of memory");
            return;
        }
        for (int i = 0; i < p->n_bind; i++)
            w[i].dstSet = s;
        vkUpdateDescriptorSets(d->dev, (uint32_t)p->n_bind, w, 0, NULL);
        vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &s, 0,
                                NULL);
    }
    if (p->push_bytes)
        vkCmdPushConstants(d->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes, push);
    bool timed = d->prof_on && d->qpool && d->prof_n < VK_PROF_MAX;
    if (timed)
        vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, d->qpool,
                            (uint32_t)(2 * d->prof_n));
    vkCmdDispatch(d->cmd, gx, gy, gz);
    d->n_dispatch++;
    if (timed) {
        vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d->qpool,
                            (uint32_t)(2 * d->prof_n + 1));
        d->prof_pipe[d->prof_n++] = p;
    }
    vk_barrier_after(d, false);
    d->n_since_split++;
    if (!d->group && !d->rec_err && d->part + 1 < VK_REC_PARTS &&
        d->n_since_split >= (d->part == 0 ? VK_REC_SPLIT_FIRST : VK_REC_SPLIT_EVERY))
        vk_rec_split(d);
}

void vk_copy(struct vk_dev *d, const struct vk_buf *src, uint64_t soff, const struct vk_buf *dst,
             uint64_t doff, uint64_t n) {
    if (!d->recording || d->rec_err || n == 0)
        return;
    if (soff > src->size || n > src->size - soff || doff > dst->size || n > dst->size - doff) {
        vk_rec_fail(d, STRATA_E_INTERNAL, "vulkan: copy outside its buffers");
        return;
    }
    VkBufferCopy bc = {.srcOffset = soff, .dstOffset = doff, .size = n};
    vk_barrier_to_transfer(d);
    vkCmdCopyBuffer(d->cmd, src->buf, dst->buf, 1, &bc);
    vk_barrier_after(d, true);
}

void vk_fill(struct vk_dev *d, const struct vk_buf *dst, uint64_t off, uint64_t n, uint32_t value) {
    if (!d->recording || d->rec_err || n == 0)
        return;
    if ((off | n) & 3 || off > dst->size || n > dst->size - off) {
        vk_rec_fail(d, STRATA_E_INTERNAL, "vulkan: fill outside its buffer or misaligned");
        return;
    }
    vk_barrier_to_transfer(d);
    vkCmdFillBuffer(d->cmd, dst->buf, off, n, value);
    vk_barrier_after(d, true);
}

void vk_rec_group(struct vk_dev *d, bool on) {
    if (on == d->group)
        return;
    d->group = on;
    if (!on && d->group_dirty && d->recording)
        vk_barrier_after(d, d->group_transfer);
    d->group_dirty = false;
    d->group_transfer = false;
}

bool vk_rec_active(const struct vk_dev *d) {
    return d->recording;
}
bool vk_rec_pending(const struct vk_dev *d) {
    return d->pending;
}

int vk_rec_submit(struct vk_dev *d, struct strata_error *err) {
    if (!d->recording)
        return strata_error_set(err, STRATA_E_INVALID, "vulkan: submit without a recording");
    vk_rec_group(d, false);
    d->recording = false;
    if (d->rec_err) {
        if (d->cmd)
            vkEndCommandBuffer(d->cmd);
        if (d->part > 0) /* the parts that ran: nothing may be pending after an error */
            vkQueueWaitIdle(d->queue);
        return strata_error_set(err, d->rec_err, "%s", d->rec_msg);
    }
    vkCmdPipelineBarrier(d->cmd,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &vk_host_barrier, 0, NULL, 0, NULL);
    int rc = vk_check(d, vkEndCommandBuffer(d->cmd), "vkEndCommandBuffer", err);
    if (rc)
        return rc;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &d->cmd};
    if ((rc = vk_check(d, vkQueueSubmit(d->queue, 1, &si, d->fence), "vkQueueSubmit", err)))
        return rc;
    d->pending = true;
    return 0;
}

/* Adds this recording's timestamps to the table per pipeline name. */
static void vk_prof_collect(struct vk_dev *d) {
    if (d->prof_n == 0 || !d->qpool)
        return;
    uint64_t *ts = malloc((size_t)d->prof_n * 2 * sizeof *ts);
    if (!ts)
        return;
    if (vkGetQueryPoolResults(d->dev, d->qpool, 0, (uint32_t)(2 * d->prof_n),
                              (size_t)d->prof_n * 2 * sizeof *ts, ts, sizeof *ts,
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS) {
        for (int i = 0; i < d->prof_n; i++) {
            const char *name = d->prof_pipe[i]->name;
            int r = 0;
            while (r < d->prof_n_rows && strcmp(d->prof_rows[r].name, name) != 0)
                r++;
            if (r == d->prof_n_rows) {
                if (r == d->prof_cap_rows) {
                    int cap = d->prof_cap_rows ? 2 * d->prof_cap_rows : 32;
                    struct vk_prof_row *nr = realloc(d->prof_rows, (size_t)cap * sizeof *nr);
                    if (!nr)
                        break;
                    d->prof_rows = nr;
                    d->prof_cap_rows = cap;
                }
                memset(&d->prof_rows[r], 0, sizeof d->prof_rows[r]);
                snprintf(d->prof_rows[r].name, sizeof d->prof_rows[r].name, "%s", name);
                d->prof_n_rows++;
            }
            uint64_t t0 = ts[2 * i], t1 = ts[2 * i + 1];
            d->prof_rows[r].n++;
            d->prof_rows[r].ns += t1 > t0 ? (double)(t1 - t0) * d->info.timestamp_period_ns : 0;
        }
    }
    free(ts);
    d->prof_n = 0;
}

int vk_rec_wait(struct vk_dev *d, struct strata_error *err) {
    if (!d->pending)
        return d->lost ? strata_error_set(err, STRATA_E_IO, "vulkan: device lost") : 0;
    d->pending = false;
    int rc = vk_check(d, vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, UINT64_MAX),
                      "vkWaitForFences", err);
    vkResetFences(d->dev, 1, &d->fence);
    if (!rc)
        vk_prof_collect(d);
    return rc;
}

void vk_prof_enable(struct vk_dev *d, bool on) {
    d->prof_on = on;
}

static int vk_prof_cmp(const void *a, const void *b) {
    double x = ((const struct vk_prof_row *)a)->ns, y = ((const struct vk_prof_row *)b)->ns;
    return x < y ? 1 : x > y ? -1 : 0;
}

void vk_prof_report(struct vk_dev *d, FILE *out) {
    if (d->prof_n_rows == 0)
        return;
    qsort(d->prof_rows, (size_t)d->prof_n_rows, sizeof *d->prof_rows, vk_prof_cmp);
    double total = 0;
    uint64_t n = 0;
    for (int r = 0; r < d->prof_n_rows; r++) {
        total += d->prof_rows[r].ns;
        n += d->prof_rows[r].n;
    }
    fprintf(out, "gpu profile (%s): %llu dispatches, %.1f us\n", d->info.name,
            (unsigned long long)n, total / 1e3);
    fprintf(out, "  %-32s %10s %12s %10s %6s\n", "kernel", "calls", "total us", "mean us", "%");
    for (int r = 0; r < d->prof_n_rows; r++) {
        const struct vk_prof_row *w = &d->prof_rows[r];
        fprintf(out, "  %-32s %10llu %12.1f %10.2f %6.1f\n", w->name, (unsigned long long)w->n,
                w->ns / 1e3, w->ns / 1e3 / (double)w->n, total > 0 ? 100.0 * w->ns / total : 0.0);
    }
    d->prof_n_rows = 0;
}
