/* gpu/vk-mem.c: buffers with preferred/fallback memory types, synchronous
 * staging uploads, downloads and fills (gpu/vk.h). */
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-impl.h"

/* The first memory type in `allowed` with all of `want`, or -1. */
static int vk_mem_type(const struct vk_dev *d, uint32_t allowed, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < d->mem_props.memoryTypeCount; i++)
        if ((allowed & (1u << i)) && (d->mem_props.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

struct vk_buf *vk_buf_alloc(struct vk_dev *d, uint64_t bytes, enum vk_mem mem,
                            struct strata_error *err) {
    if (d->lost) {
        strata_error_set(err, STRATA_E_IO, "vulkan: device lost");
        return NULL;
    }
    if (bytes == 0 || bytes > d->info.max_buffer_bytes) {
        strata_error_set(err, STRATA_E_RANGE,
                         "vulkan: buffer of %llu bytes (the device takes 1 .. %llu)",
                         (unsigned long long)bytes, (unsigned long long)d->info.max_buffer_bytes);
        return NULL;
    }
    if (mem == VK_MEM_DEVICE && d->budget && d->alloc_dev + bytes > d->budget) {
        strata_error_set(err, STRATA_E_NOMEM,
                         "vulkan: out of device memory: %llu bytes more would pass the budget of "
                         "%llu (--gpu-mem-budget; %llu held)",
                         (unsigned long long)bytes, (unsigned long long)d->budget,
                         (unsigned long long)d->alloc_dev);
        return NULL;
    }
    struct vk_buf *b = calloc(1, sizeof *b);
    if (!b) {
        strata_error_set(err, STRATA_E_NOMEM, "vulkan: out of memory");
        return NULL;
    }
    b->size = bytes;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = bytes,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (vk_check(d, vkCreateBuffer(d->dev, &bci, NULL, &b->buf), "vkCreateBuffer", err))
        goto fail;
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, b->buf, &req);
    const VkMemoryPropertyFlags HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    /* preferred first, then fallbacks; -1 ends */
    VkMemoryPropertyFlags order[3];
    int n_order = 0;
    if (mem == VK_MEM_DEVICE) {
        order[n_order++] = DL;
        order[n_order++] = 0;
    } else {
        order[n_order++] = HV | HC | CA;
        order[n_order++] = HV | HC;
    }
    VkResult last = VK_ERROR_OUT_OF_DEVICE_MEMORY;
    for (int k = 0; k < n_order && !b->mem; k++) {
        int t = vk_mem_type(d, req.memoryTypeBits, order[k]);
        if (t < 0)
            continue;
        VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                    .allocationSize = req.size,
                                    .memoryTypeIndex = (uint32_t)t};
        last = vkAllocateMemory(d->dev, &mai, NULL, &b->mem);
        if (last == VK_ERROR_DEVICE_LOST)
            break;
        if (last != VK_SUCCESS) {
            b->mem = VK_NULL_HANDLE;
            continue;
        }
        VkMemoryPropertyFlags fl = d->mem_props.memoryTypes[t].propertyFlags;
        b->device = (fl & DL) != 0;
        if ((fl & HV) && (fl & HC) &&
            vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)
            b->map = NULL;
    }
    if (!b->mem) {
        vk_check(d, last, "vkAllocateMemory", err);
        strata_error_prefix(err, "%llu bytes", (unsigned long long)bytes);
        goto fail;
    }
    if (vk_check(d, vkBindBufferMemory(d->dev, b->buf, b->mem, 0), "vkBindBufferMemory", err))
        goto fail;
    if (mem == VK_MEM_DEVICE)
        d->alloc_dev += bytes;
    else
        d->alloc_host += bytes;
    b->device = mem == VK_MEM_DEVICE;
    if (b->map)
        memset(b->map, 0, bytes);
    else if (vk_buf_fill(d, b, 0, bytes & ~3ull, 0, err)) {
        vk_buf_free(d, b);
        return NULL;
    }
    return b;
fail:
    if (b->mem)
        vkFreeMemory(d->dev, b->mem, NULL);
    if (b->buf)
        vkDestroyBuffer(d->dev, b->buf, NULL);
    free(b);
    return NULL;
}

void vk_buf_free(struct vk_dev *d, struct vk_buf *b) {
    if (!b)
        return;
    if (b->device)
        d->alloc_dev -= b->size;
    else
        d->alloc_host -= b->size;
    if (b->map)
        vkUnmapMemory(d->dev, b->mem);
    vkDestroyBuffer(d->dev, b->buf, NULL);
    vkFreeMemory(d->dev, b->mem, NULL);
    free(b);
}

uint64_t vk_buf_size(const struct vk_buf *b) {
    return b->size;
}
bool vk_buf_host(const struct vk_buf *b) {
    return b->map != NULL;
}
void *vk_buf_map(struct vk_buf *b) {
    return b->map;
}

int vk_xfer_begin(struct vk_dev *d, struct strata_error *err) {
    if (d->lost)
        return strata_error_set(err, STRATA_E_IO, "vulkan: device lost");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    return vk_check(d, vkBeginCommandBuffer(d->xfer, &bi), "vkBeginCommandBuffer", err);
}

int vk_xfer_end(struct vk_dev *d, struct strata_error *err) {
    int rc = vk_check(d, vkEndCommandBuffer(d->xfer), "vkEndCommandBuffer", err);
    if (rc)
        return rc;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &d->xfer};
    if ((rc = vk_check(d, vkQueueSubmit(d->queue, 1, &si, d->xfer_fence), "vkQueueSubmit", err)))
        return rc;
    rc = vk_check(d, vkWaitForFences(d->dev, 1, &d->xfer_fence, VK_TRUE, UINT64_MAX),
                  "vkWaitForFences", err);
    vkResetFences(d->dev, 1, &d->xfer_fence);
    return rc;
}

static const VkMemoryBarrier vk_xfer_barrier = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT |
                     VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT};

static int vk_staging(struct vk_dev *d, struct strata_error *err) {
    if (!d->staging)
        d->staging = vk_buf_alloc(d, VK_STAGING_BYTES, VK_MEM_HOST, err);
    return d->staging ? 0 : (err ? err->code : STRATA_E_NOMEM);
}

static int vk_range_ok(const struct vk_buf *b, uint64_t off, uint64_t n, struct strata_error *err) {
    if (off > b->size || n > b->size - off)
        return strata_error_set(
            err, STRATA_E_RANGE, "vulkan: bytes %llu + %llu outside a buffer of %llu",
            (unsigned long long)off, (unsigned long long)n, (unsigned long long)b->size);
    return 0;
}

int vk_buf_upload(struct vk_dev *d, struct vk_buf *dst, uint64_t off, const void *src, uint64_t n,
                  struct strata_error *err) {
    int rc = vk_range_ok(dst, off, n, err);
    if (rc || n == 0)
        return rc;
    if (dst->map) {
        memcpy((char *)dst->map + off, src, n);
        return 0;
    }
    if ((rc = vk_staging(d, err)))
        return rc;
    for (uint64_t done = 0; done < n;) {
        uint64_t c = n - done < VK_STAGING_BYTES ? n - done : VK_STAGING_BYTES;
        memcpy(d->staging->map, (const char *)src + done, c);
        if ((rc = vk_xfer_begin(d, err)))
            return rc;
        VkBufferCopy bc = {.srcOffset = 0, .dstOffset = off + done, .size = c};
        vkCmdCopyBuffer(d->xfer, d->staging->buf, dst->buf, 1, &bc);
        vkCmdPipelineBarrier(d->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &vk_xfer_barrier, 0, NULL, 0,
                             NULL);
        if ((rc = vk_xfer_end(d, err)))
            return rc;
        done += c;
    }
    return 0;
}

int vk_buf_download(struct vk_dev *d, const struct vk_buf *src, uint64_t off, void *dst, uint64_t n,
                    struct strata_error *err) {
    int rc = vk_range_ok(src, off, n, err);
    if (rc || n == 0)
        return rc;
    if (src->map) {
        memcpy(dst, (const char *)src->map + off, n);
        return 0;
    }
    if ((rc = vk_staging(d, err)))
        return rc;
    for (uint64_t done = 0; done < n;) {
        uint64_t c = n - done < VK_STAGING_BYTES ? n - done : VK_STAGING_BYTES;
        if ((rc = vk_xfer_begin(d, err)))
            return rc;
        VkBufferCopy bc = {.srcOffset = off + done, .dstOffset = 0, .size = c};
        vkCmdCopyBuffer(d->xfer, src->buf, d->staging->buf, 1, &bc);
        vkCmdPipelineBarrier(d->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                             1, &vk_xfer_barrier, 0, NULL, 0, NULL);
        if ((rc = vk_xfer_end(d, err)))
            return rc;
        memcpy((char *)dst + done, d->staging->map, c);
        done += c;
    }
    return 0;
}

int vk_buf_fill(struct vk_dev *d, struct vk_buf *dst, uint64_t off, uint64_t n, uint32_t value,
                struct strata_error *err) {
    int rc = vk_range_ok(dst, off, n, err);
    if (rc || n == 0)
        return rc;
    if ((off | n) & 3)
        return strata_error_set(err, STRATA_E_INVALID, "vulkan: fill of %llu at %llu not 4-aligned",
                                (unsigned long long)n, (unsigned long long)off);
    if ((rc = vk_xfer_begin(d, err)))
        return rc;
    vkCmdFillBuffer(d->xfer, dst->buf, off, n, value);
    vkCmdPipelineBarrier(d->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &vk_xfer_barrier, 0, NULL, 0,
                         NULL);
    return vk_xfer_end(d, err);
}

int vk_buf_copy(struct vk_dev *d, const struct vk_buf *src, uint64_t soff, struct vk_buf *dst,
                uint64_t doff, uint64_t n, struct strata_error *err) {
    int rc = vk_range_ok(src, soff, n, err);
    if (rc || (rc = vk_range_ok(dst, doff, n, err)) || n == 0)
        return rc;
    if ((rc = vk_xfer_begin(d, err)))
        return rc;
    VkBufferCopy bc = {.srcOffset = soff, .dstOffset = doff, .size = n};
    vkCmdCopyBuffer(d->xfer, src->buf, dst->buf, 1, &bc);
    vkCmdPipelineBarrier(d->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &vk_xfer_barrier, 0, NULL, 0,
                         NULL);
    return vk_xfer_end(d, err);
}
