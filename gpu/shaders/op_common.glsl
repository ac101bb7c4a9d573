/* gpu/shaders/op_common.glsl: helpers of the op_*.comp kernels (gpu/vk-ops.c).
 *
 * Buffers are declared uint[] and f16 values read as pairs (unpackHalf2x16):
 * that needs no 16-bit storage feature, so the same SPIR-V runs on every
 * Vulkan 1.2 device (lavapipe, NVIDIA, AMD). Rows of f16 in the KV cache are
 * whole heads of even length, so a pair never straddles two rows.
 *
 * Workgroup reductions: subgroupAdd / subgroupMax inside each subgroup, then
 * one shared slot per subgroup that every invocation sums in index order
 * (at most OPS_MAX_SUBGROUPS slots: 1024 invocations / subgroup 8), so the
 * result is the same in every invocation and does not depend on timing. */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#define OPS_MAX_SUBGROUPS 128

shared float ops_red[OPS_MAX_SUBGROUPS];

/* The linear workgroup id of a 2D grid: the host splits a large count over
 * x (<= 65535, the minimum maxComputeWorkGroupCount) and y. */
uint ops_group_id() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

float ops_wg_sum(float v) {
    v = subgroupAdd(v);
    barrier(); /* a previous call's readers are done with ops_red */
    if (subgroupElect())
        ops_red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++)
        s += ops_red[i];
    return s;
}

float ops_wg_max(float v) {
    v = subgroupMax(v);
    barrier();
    if (subgroupElect())
        ops_red[gl_SubgroupID] = v;
    barrier();
    float m = ops_red[0];
    for (uint i = 1; i < gl_NumSubgroups; i++)
        m = max(m, ops_red[i]);
    return m;
}

/* The largest (v, id) over the workgroup, lowest id among equal v (the
 * CPU's k passes and sampler.c's argmax break ties that way). v must not be
 * NaN. Same result in every invocation. */
shared float ops_arg_v[OPS_MAX_SUBGROUPS];
shared uint ops_arg_i[OPS_MAX_SUBGROUPS];

void ops_wg_argmax(inout float v, inout uint id) {
    const float m = subgroupMax(v);
    const uint im = subgroupMin(v == m ? id : 0xffffffffu);
    barrier();
    if (subgroupElect()) {
        ops_arg_v[gl_SubgroupID] = m;
        ops_arg_i[gl_SubgroupID] = im;
    }
    barrier();
    v = ops_arg_v[0];
    id = ops_arg_i[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        const float vi = ops_arg_v[i];
        const uint ii = ops_arg_i[i];
        if (vi > v || (vi == v && ii < id)) {
            v = vi;
            id = ii;
        }
    }
}
