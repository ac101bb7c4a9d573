/* gpu/vk-dev.c: instance, physical-device choice, the logical device and its
 * compute queue (gpu/vk.h). */
#ifndef _GNU_SOURCE /* meson passes -D_GNU_SOURCE; kept for a build without it */
#define _GNU_SOURCE /* RTLD_NOLOAD, RTLD_NODELETE, dl_iterate_phdr */
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/vk-impl.h"

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <link.h>

/* ASan builds only: every library loaded so far (the Vulkan driver the
 * loader just opened) stays mapped until exit. Lavapipe (Mesa 22.3) keeps
 * 2 x 128 bytes of its CPU-topology detection (AMD Zen hosts only, a
 * pthread_once in its util code) in its own globals and never frees them;
 * the loader unmaps the driver at vkDestroyInstance, and LeakSanitizer then
 * reports them as leaks of "<unknown module>" in every process that probed
 * Vulkan (every test of the suite on such a host). Mapped, its globals are
 * roots and the bytes are reachable, as they are in the driver's design. */
static int vk_pin_loaded(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (info->dlpi_name && info->dlpi_name[0])
        (void)dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}
#endif

int vk_check(struct vk_dev *d, VkResult r, const char *what, struct strata_error *err) {
    if (r == VK_SUCCESS)
        return 0;
    if (r == VK_ERROR_DEVICE_LOST) {
        if (d)
            d->lost = true;
        return strata_error_set(err, STRATA_E_IO, "vulkan: %s: device lost", what);
    }
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ||
        r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL)
        return strata_error_set(err, STRATA_E_NOMEM, "vulkan: %s: out of %s memory", what,
                                r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host");
    return strata_error_set(err, STRATA_E_IO, "vulkan: %s failed (VkResult %d)", what, (int)r);
}

static VkInstance vk_instance_make(struct strata_error *err) {
    uint32_t api = 0;
    if (vkEnumerateInstanceVersion(&api) != VK_SUCCESS || api < VK_API_VERSION_1_2) {
        strata_error_set(err, STRATA_E_NOT_FOUND, "vulkan: no Vulkan 1.2 loader");
        return VK_NULL_HANDLE;
    }
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "strata",
        .pEngineName = "strata",
        .apiVersion = api >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2,
    };
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkInstance inst = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ci, NULL, &inst);
    if (r != VK_SUCCESS) {
        strata_error_set(err, STRATA_E_NOT_FOUND, "vulkan: no instance (VkResult %d)", (int)r);
        return VK_NULL_HANDLE;
    }
#if defined(__SANITIZE_ADDRESS__)
    dl_iterate_phdr(vk_pin_loaded, NULL);
#endif
    return inst;
}

int vk_dev_count(void) {
    VkInstance inst = vk_instance_make(NULL);
    if (!inst)
        return 0;
    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(inst, &n, NULL) != VK_SUCCESS)
        n = 0;
    vkDestroyInstance(inst, NULL);
    return (int)n;
}

/* A compute queue family (one with compute and without graphics first:
 * NVIDIA's async compute family), or -1. */
static int vk_compute_family(VkPhysicalDevice p) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
    VkQueueFamilyProperties qf[32];
    if (n > 32)
        n = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, qf);
    int any = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || qf[i].queueCount == 0)
            continue;
        /* the graphics+compute family first: its timestamps are valid on
         * every driver we met, and there is one queue to feed anyway */
        if (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)
            return (int)i;
        if (any < 0)
            any = (int)i;
    }
    return any;
}

static int vk_type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
        return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
        return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
        return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
        return 1;
    default:
        return 0;
    }
}

static bool vk_has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0)
            return true;
    return false;
}

static void vk_fill_info(struct vk_dev *d, const VkExtensionProperties *ext, uint32_t n_ext,
                         const VkPhysicalDeviceVulkan11Features *f11,
                         const VkPhysicalDeviceVulkan12Features *f12, bool int_dot_feat,
                         const VkPhysicalDeviceFeatures *f10) {
    struct vk_dev_info *in = &d->info;
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &drv};
    VkPhysicalDeviceShaderIntegerDotProductProperties dot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sg};
    if (int_dot_feat) {
        dot.pNext = m3.pNext;
        m3.pNext = &dot;
    }
    /* the PCI address: which NUMA node the device is local to (--numa auto
     * binds the pool there: engine/model/model-numa.h model_numa_gpu_node) */
    VkPhysicalDevicePCIBusInfoPropertiesEXT pci = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
    in->has_pci = vk_has_ext(ext, n_ext, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
    if (in->has_pci) {
        pci.pNext = m3.pNext;
        m3.pNext = &pci;
    }
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &m3};
    vkGetPhysicalDeviceProperties2(d->phys, &p2);
    const VkPhysicalDeviceProperties *p = &p2.properties;
    const VkPhysicalDeviceLimits *lim = &p->limits;
    snprintf(in->name, sizeof in->name, "%s", p->deviceName);
    if (in->has_pci) {
        in->pci_domain = pci.pciDomain;
        in->pci_bus = pci.pciBus;
        in->pci_device = pci.pciDevice;
        in->pci_function = pci.pciFunction;
    }
    if (drv.driverName[0])
        snprintf(in->driver, sizeof in->driver, "%.120s %.120s", drv.driverName, drv.driverInfo);
    else
        snprintf(in->driver, sizeof in->driver, "version %u", p->driverVersion);
    in->vendor_id = p->vendorID;
    in->device_id = p->deviceID;
    in->discrete = p->deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    in->cpu = p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem_props);
    uint64_t vram = 0, any = 0;
    for (uint32_t h = 0; h < d->mem_props.memoryHeapCount; h++) {
        uint64_t sz = d->mem_props.memoryHeaps[h].size;
        if (sz > any)
            any = sz;
        if ((d->mem_props.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && sz > vram)
            vram = sz;
    }
    in->vram_bytes = vram ? vram : any;
    in->subgroup_size = sg.subgroupSize;
    in->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    in->max_storage_range = lim->maxStorageBufferRange;
    in->max_buffer_bytes = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : (1ull << 30);
    in->min_storage_align = lim->minStorageBufferOffsetAlignment;
    in->max_shared_bytes = lim->maxComputeSharedMemorySize;
    in->max_push_bytes = lim->maxPushConstantsSize;
    for (int i = 0; i < 3; i++) {
        in->max_wg_size[i] = lim->maxComputeWorkGroupSize[i];
        in->max_wg_count[i] = lim->maxComputeWorkGroupCount[i];
    }
    in->max_wg_invocations = lim->maxComputeWorkGroupInvocations;
    in->fp16 = f12->shaderFloat16;
    in->int8 = f12->shaderInt8;
    in->storage8 = f12->storageBuffer8BitAccess;
    in->storage16 = f11->storageBuffer16BitAccess;
    in->int_dot = int_dot_feat;
    in->int_dot_accel = int_dot_feat && dot.integerDotProduct4x8BitPackedSignedAccelerated;
    in->coopmat = vk_has_ext(ext, n_ext, "VK_KHR_cooperative_matrix");
    in->coopmat_nv = false; /* vk_coopmat_nv_probe decides */
    in->push_descriptor = vk_has_ext(ext, n_ext, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    (void)f10;
}

/* Whether the device runs gpu/shaders/mm_coop.comp: VK_NV_cooperative_matrix
 * with its feature, f16 (shaderFloat16) and a 16 x 16 x 16 f16 x f16 + f32
 * subgroup-scope shape among the properties it lists. */
static bool vk_coopmat_nv_probe(struct vk_dev *d, bool ext_present, bool feature, bool fp16) {
    if (!ext_present || !feature || !fp16)
        return false;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
            d->instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    uint32_t n = 0;
    if (!get || get(d->phys, &n, NULL) != VK_SUCCESS || n == 0)
        return false;
    VkCooperativeMatrixPropertiesNV *pr = calloc(n, sizeof *pr);
    if (!pr)
        return false;
    for (uint32_t i = 0; i < n; i++)
        pr[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    bool ok = false;
    if (get(d->phys, &n, pr) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !ok; i++)
            ok = pr[i].MSize == 16 && pr[i].NSize == 16 && pr[i].KSize == 16 &&
                 pr[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                 pr[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                 pr[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                 pr[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV && pr[i].scope == VK_SCOPE_SUBGROUP_NV;
    free(pr);
    return ok;
}

/* Creates the logical device over d->phys with what strata's shaders use. */
static int vk_device_make(struct vk_dev *d, uint32_t api, struct strata_error *err) {
    uint32_t n_ext = 0;
    vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = calloc(n_ext ? n_ext : 1, sizeof *ext);
    if (!ext)
        return strata_error_set(err, STRATA_E_NOMEM, "vulkan: out of memory");
    vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n_ext, ext);

    VkPhysicalDeviceShaderIntegerDotProductFeatures dotf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceVulkan13Features f13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    bool has13 = api >= VK_API_VERSION_1_3;
    bool dot_ext = !has13 && vk_has_ext(ext, n_ext, "VK_KHR_shader_integer_dot_product");
    if (has13)
        f12.pNext = &f13;
    else if (dot_ext)
        f12.pNext = &dotf;
    const bool coop_ext = vk_has_ext(ext, n_ext, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coopf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    if (coop_ext) {
        coopf.pNext = f11.pNext;
        f11.pNext = &coopf;
    }
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    bool int_dot = has13 ? f13.shaderIntegerDotProduct : (dot_ext && dotf.shaderIntegerDotProduct);
    vk_fill_info(d, ext, n_ext, &f11, &f12, int_dot, &f2.features);
    d->info.coopmat_nv =
        vk_coopmat_nv_probe(d, coop_ext, coopf.cooperativeMatrix, f12.shaderFloat16);

    /* enable only what shaders use (and the device has) */
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    e2.features.shaderInt16 = f2.features.shaderInt16;
    e2.features.shaderInt64 = f2.features.shaderInt64;
    VkPhysicalDeviceVulkan11Features e11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    e11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
    e11.uniformAndStorageBuffer16BitAccess = f11.uniformAndStorageBuffer16BitAccess;
    VkPhysicalDeviceVulkan12Features e12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    e12.shaderFloat16 = f12.shaderFloat16;
    e12.shaderInt8 = f12.shaderInt8;
    e12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
    e12.uniformAndStorageBuffer8BitAccess = f12.uniformAndStorageBuffer8BitAccess;
    e12.hostQueryReset = f12.hostQueryReset;
    e12.bufferDeviceAddress = VK_FALSE;
    VkPhysicalDeviceVulkan13Features e13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    e13.subgroupSizeControl = f13.subgroupSizeControl;
    e13.computeFullSubgroups = f13.computeFullSubgroups;
    e13.shaderIntegerDotProduct = f13.shaderIntegerDotProduct;
    e13.maintenance4 = f13.maintenance4;
    VkPhysicalDeviceShaderIntegerDotProductFeatures edot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
        .shaderIntegerDotProduct = dotf.shaderIntegerDotProduct};
    e2.pNext = &e11;
    e11.pNext = &e12;
    if (has13)
        e12.pNext = &e13;
    else if (dot_ext)
        e12.pNext = &edot;
    const char *ps_env = getenv("STRATA_VK_PIPE_STATS");
    const bool pstats = ps_env && *ps_env && strcmp(ps_env, "0") != 0 &&
                        vk_has_ext(ext, n_ext, "VK_KHR_pipeline_executable_properties");
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR epx = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pipelineExecutableInfo = VK_TRUE};
    if (pstats) {
        epx.pNext = e11.pNext;
        e11.pNext = &epx;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesNV ecoop = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE};
    if (d->info.coopmat_nv) {
        ecoop.pNext = e11.pNext;
        e11.pNext = &ecoop;
    }

    const char *want[5];
    uint32_t n_want = 0;
    if (pstats)
        want[n_want++] = "VK_KHR_pipeline_executable_properties";
    if (d->info.push_descriptor)
        want[n_want++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    if (dot_ext)
        want[n_want++] = "VK_KHR_shader_integer_dot_product";
    if (d->info.coopmat_nv)
        want[n_want++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    free(ext);

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->queue_family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &e2,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = n_want,
                              .ppEnabledExtensionNames = want};
    int rc = vk_check(d, vkCreateDevice(d->phys, &dci, NULL, &d->dev), "vkCreateDevice", err);
    if (rc)
        return rc;
    vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);
    if (d->info.push_descriptor)
        d->push_desc =
            (PFN_vkCmdPushDescriptorSetKHR)vkGetDeviceProcAddr(d->dev, "vkCmdPushDescriptorSetKHR");
    if (pstats) {
        d->exec_props = (PFN_vkGetPipelineExecutablePropertiesKHR)vkGetDeviceProcAddr(
            d->dev, "vkGetPipelineExecutablePropertiesKHR");
        d->exec_stats = (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(
            d->dev, "vkGetPipelineExecutableStatisticsKHR");
    }
    if (!d->push_desc)
        d->info.push_descriptor = false;
    const char *bar_env = getenv("STRATA_VK_BARRIER");
    d->bar_compute = bar_env && strcmp(bar_env, "compute") == 0;

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32)
        nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    VkPhysicalDeviceProperties pp;
    vkGetPhysicalDeviceProperties(d->phys, &pp);
    d->info.timestamp_period_ns =
        qf[d->queue_family].timestampValidBits ? pp.limits.timestampPeriod : 0.0f;
    return 0;
}

int vk_dev_open(int index, struct vk_dev **out, struct strata_error *err) {
    *out = NULL;
    struct vk_dev *d = calloc(1, sizeof *d);
    if (!d)
        return strata_error_set(err, STRATA_E_NOMEM, "vulkan: out of memory");
    int rc = 0;
    d->instance = vk_instance_make(err);
    if (!d->instance) {
        free(d);
        return STRATA_E_NOT_FOUND;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(d->instance, &n, NULL);
    VkPhysicalDevice phys[16];
    if (n > 16)
        n = 16;
    if (n)
        vkEnumeratePhysicalDevices(d->instance, &n, phys);
    if (n == 0) {
        rc = strata_error_set(err, STRATA_E_NOT_FOUND, "vulkan: no device");
        goto fail;
    }
    if (index >= (int)n) {
        rc = strata_error_set(err, STRATA_E_NOT_FOUND, "vulkan: no device %d (%u found)", index, n);
        goto fail;
    }
    int pick = -1, best = -1;
    uint32_t api = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (index >= 0 && (int)i != index)
            continue;
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(phys[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_2 || vk_compute_family(phys[i]) < 0) {
            if (index >= 0) {
                rc = strata_error_set(err, STRATA_E_UNSUPPORTED,
                                      "vulkan: device %d (%s) lacks Vulkan 1.2 compute", index,
                                      p.deviceName);
                goto fail;
            }
            continue;
        }
        int rank = vk_type_rank(p.deviceType);
        if (rank > best) {
            best = rank;
            pick = (int)i;
            api = p.apiVersion;
        }
    }
    if (pick < 0) {
        rc = strata_error_set(err, STRATA_E_UNSUPPORTED,
                              "vulkan: no device with Vulkan 1.2 compute (%u found)", n);
        goto fail;
    }
    d->phys = phys[pick];
    d->queue_family = (uint32_t)vk_compute_family(d->phys);
    if ((rc = vk_device_make(d, api, err)))
        goto fail;
    d->info.index = pick;

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->queue_family};
    if ((rc = vk_check(d, vkCreateCommandPool(d->dev, &pci, NULL, &d->pool), "command pool", err)))
        goto fail;
    VkCommandBuffer cb[VK_REC_PARTS + 1];
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = VK_REC_PARTS + 1};
    if ((rc = vk_check(d, vkAllocateCommandBuffers(d->dev, &ai, cb), "command buffers", err)))
        goto fail;
    for (int i = 0; i < VK_REC_PARTS; i++)
        d->cmds[i] = cb[i];
    d->cmd = cb[0];
    d->xfer = cb[VK_REC_PARTS];
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((rc = vk_check(d, vkCreateFence(d->dev, &fci, NULL, &d->fence), "fence", err)) ||
        (rc = vk_check(d, vkCreateFence(d->dev, &fci, NULL, &d->xfer_fence), "fence", err)))
        goto fail;
    *out = d;
    return 0;
fail:
    vk_dev_close(d);
    return rc;
}

const struct vk_dev_info *vk_dev_info(const struct vk_dev *d) {
    return &d->info;
}

bool vk_dev_lost(const struct vk_dev *d) {
    return d->lost;
}

uint64_t vk_dev_dispatches(const struct vk_dev *d) {
    return d->n_dispatch;
}

void vk_dev_set_budget(struct vk_dev *d, uint64_t bytes) {
    d->budget = bytes;
}

uint64_t vk_dev_allocated(const struct vk_dev *d, int device_memory) {
    return device_memory ? d->alloc_dev : d->alloc_host;
}

int vk_dev_pipeline_cache(struct vk_dev *d, const char *path, struct strata_error *err) {
    void *data = NULL;
    size_t n = 0;
    FILE *f = path && *path ? fopen(path, "rb") : NULL;
    if (f) {
        if (fseek(f, 0, SEEK_END) == 0) {
            long sz = ftell(f);
            if (sz > 0 && sz < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 &&
                (data = malloc((size_t)sz)))
                n = fread(data, 1, (size_t)sz, f) == (size_t)sz ? (size_t)sz : 0;
        }
        fclose(f);
    }
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                    .initialDataSize = n,
                                    .pInitialData = n ? data : NULL};
    VkPipelineCache c = VK_NULL_HANDLE;
    VkResult r = vkCreatePipelineCache(d->dev, &ci, NULL, &c);
    if (r != VK_SUCCESS && n) { /* data the driver refuses outright: start empty */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(d->dev, &ci, NULL, &c);
    }
    free(data);
    if (r != VK_SUCCESS)
        return vk_check(d, r, "vkCreatePipelineCache", err);
    if (d->pcache)
        vkDestroyPipelineCache(d->dev, d->pcache, NULL);
    d->pcache = c;
    free(d->pcache_path);
    d->pcache_path = path && *path ? strdup(path) : NULL;
    return 0;
}

/* Writes the pipeline cache to its file (best effort: a cache). */
static void vk_pcache_save(struct vk_dev *d) {
    size_t n = 0;
    if (!d->pcache || !d->pcache_path ||
        vkGetPipelineCacheData(d->dev, d->pcache, &n, NULL) != VK_SUCCESS || n == 0)
        return;
    void *data = malloc(n);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", d->pcache_path, (int)getpid());
    FILE *f = data ? fopen(tmp, "wb") : NULL;
    if (f && vkGetPipelineCacheData(d->dev, d->pcache, &n, data) == VK_SUCCESS &&
        fwrite(data, 1, n, f) == n && fclose(f) == 0) {
        f = NULL;
        if (rename(tmp, d->pcache_path) != 0)
            unlink(tmp);
    } else {
        if (f)
            fclose(f);
        unlink(tmp);
    }
    free(data);
}

void vk_dev_close(struct vk_dev *d) {
    if (!d)
        return;
    if (d->dev) {
        vkDeviceWaitIdle(d->dev);
        vk_pcache_save(d);
        if (d->pcache)
            vkDestroyPipelineCache(d->dev, d->pcache, NULL);
        free(d->pcache_path);
        vk_rec_free(d);
        vk_buf_free(d, d->staging);
        if (d->fence)
            vkDestroyFence(d->dev, d->fence, NULL);
        if (d->xfer_fence)
            vkDestroyFence(d->dev, d->xfer_fence, NULL);
        if (d->pool)
            vkDestroyCommandPool(d->dev, d->pool, NULL);
        vkDestroyDevice(d->dev, NULL);
    }
    if (d->instance)
        vkDestroyInstance(d->instance, NULL);
    free(d);
}
