/* gpu/vk-ops-attn.c: KV writes into the paged cache and causal attention
 * over it (gpu/vk-ops.h; shaders op_kv_write, op_attn_split,
 * op_attn_prefill). The geometry of engine/kv/kv.h's blocks goes to the
 * shaders as words (two f16 each), which is why every row length must be
 * even. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gpu/vk-ops-impl.h"

static const uint32_t spv_attn_rope[] =
#include "gpu/shaders/op_attn_rope.spv.h"
    ;

struct push_kv_write {
    struct vkops_kv_geom g;
    uint32_t layer, n_head_kv, head_dim_k, head_dim_v, n_tiles, n_tok;
};
_Static_assert(sizeof(struct push_kv_write) == 56, "op_kv_write.comp");

/* The rope's and the norms' fields of op_rope_kv.comp and op_attn_rope.comp */
struct push_rope_fields {
    uint32_t n_rot, mode;
    float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
    uint32_t has_ff, norm_q, norm_k;
    float eps_q, eps_k;
};
_Static_assert(sizeof(struct push_rope_fields) == 52, "op_rope_kv.comp's n_rot .. eps_k");

struct push_rope_kv {
    struct vkops_kv_geom g;
    uint32_t layer, n_tok, n_head, n_head_kv, hdk, hdv;
    struct push_rope_fields r;
    uint32_t pad;
};
_Static_assert(sizeof(struct push_rope_kv) == 112, "op_rope_kv.comp");

struct push_attn_split {
    struct vkops_kv_geom g;
    uint32_t layer, n_tok, n_head, n_head_kv, hdk, hdv, chunk, n_chunk, direct;
    float scale;
    uint32_t q8out;
};
_Static_assert(sizeof(struct push_attn_split) == 76, "op_attn_split.comp");

/* op_attn_rope.comp: the split's block, then op_rope_kv.comp's rope and
 * norm fields (128 bytes: Vulkan's guaranteed push-constant size) */
struct push_attn_rope {
    struct push_attn_split a;
    struct push_rope_fields r;
};
_Static_assert(sizeof(struct push_attn_rope) == 128, "op_attn_rope.comp");

struct push_attn_prefill {
    struct vkops_kv_geom g;
    uint32_t layer, n_tok, n_head, n_head_kv, hdk, hdv, tq;
    float scale;
};
_Static_assert(sizeof(struct push_attn_prefill) == 64, "op_attn_prefill.comp");

/* Workgroups the split aims for: two per SM of an H200 (132 SMs), so a
 * single decoding sequence still fills the device; on smaller devices the
 * extra chunks cost one partial row of (head_dim_v + 2) floats each. */
#define ATTN_TARGET_WG 264
/* STRATA_VK_ATTN_WG=N replaces it: the benchmarks' knob for the split's
 * trade (fewer chunks: fewer partials and a shorter merge, fewer SMs).
 * Measured on an H100 (device call of 2026-12-07, 7B Q4_0, q8 on,
 * `gpu-bench MODEL -1 128 16 8 0 4300 PC auto 7`, tg128 tok/s): 32 (one
 * chunk a head) 201.4, 96 236.8, 264 251.1 / 252.7, 528 252.4; so 264
 * stays: at 1-128 positions the split pays for its merge. */
static int attn_wg = ATTN_TARGET_WG;
static pthread_once_t attn_wg_once = PTHREAD_ONCE_INIT;
static void attn_wg_read(void) {
    const char *e = getenv("STRATA_VK_ATTN_WG");
    const long n = e ? strtol(e, NULL, 10) : 0;
    if (n >= 1 && n <= 65536)
        attn_wg = (int)n;
}
/* read once, for every thread (a server's several backends record at once) */
static int attn_target_wg(void) {
    pthread_once(&attn_wg_once, attn_wg_read);
    return attn_wg;
}
/* Chunks are whole multiples of 16 positions (a pass of the split's 16
 * position groups), so a short context still spreads over several
 * workgroups: 64 positions of llama-2-7b's 32 KV heads make 4 chunks each,
 * 128 workgroups for 132 SMs, where whole 64-position tiles made 32. */
#define ATTN_TILE 16
/* op_attn_split.comp ATTN_COUNTERS: the (token, KV head) counters at the
 * head of the scratch; a fixed area, so every dispatch finds its counters
 * zero whatever shape the one before had. */
#define ATTN_COUNTERS 65536

void vkops_kv_geom(const struct vkops_kv *kv, struct vkops_kv_geom *g) {
    STRATA_ASSERT(kv->n_piece >= 1 && kv->n_piece <= VKOPS_KV_PIECES && kv->blocks_per_piece >= 1);
    STRATA_ASSERT(kv->n_embd_k % 2 == 0 && kv->n_embd_v % 2 == 0 && kv->n_part >= 1 &&
                  kv->n_embd_k % kv->n_part == 0 && kv->n_embd_v % kv->n_part == 0);
    STRATA_ASSERT(kv->n_block >= 1 && (kv->n_block & (kv->n_block - 1)) == 0);
    STRATA_ASSERT(kv->block_bytes ==
                  (uint64_t)kv->n_layer * kv->n_block * (kv->n_embd_k + kv->n_embd_v) * 2);
    STRATA_ASSERT((uint64_t)kv->blocks_per_piece * kv->block_bytes / 4 <= UINT32_MAX);
    *g = (struct vkops_kv_geom){
        .table_stride = (uint32_t)kv->table_stride,
        .blocks_per_piece = (uint32_t)kv->blocks_per_piece,
        .block_words = (uint32_t)(kv->block_bytes / 4),
        .n_block = (uint32_t)kv->n_block,
        .n_part = (uint32_t)kv->n_part,
        .n_embd_k = (uint32_t)kv->n_embd_k,
        .n_embd_v = (uint32_t)kv->n_embd_v,
        .k_words = (uint32_t)((uint64_t)kv->n_layer * kv->n_block * kv->n_embd_k / 2),
    };
}

/* Bindings KV_BIND .. KV_BIND + 4: the table, then four pool pieces (the
 * unused ones repeat piece 0, never read). */
static void kv_binds(const struct vkops_kv *kv, struct vk_bind *b) {
    b[0] = kv->table;
    for (int i = 0; i < VKOPS_KV_PIECES; i++)
        b[1 + i] = kv->pool[i < kv->n_piece ? i : 0];
}

/* Head h of a part must be whole: the part's row holds an integer number of
 * heads (kv_k_head's rule). */
static void check_heads(const struct vkops_kv *kv, int n_head_kv, int hdk, int hdv) {
    STRATA_ASSERT(hdk >= 2 && hdv >= 2 && hdk % 2 == 0 && hdv % 2 == 0);
    STRATA_ASSERT(n_head_kv * hdk == kv->n_embd_k && n_head_kv * hdv == kv->n_embd_v);
    STRATA_ASSERT((kv->n_embd_k / kv->n_part) % hdk == 0 && (kv->n_embd_v / kv->n_part) % hdv == 0);
}

void vkops_kv_write(struct vkops *o, const struct vkops_kv *kv, int layer, struct vk_bind k,
                    struct vk_bind v, struct vk_bind seq, struct vk_bind pos, int n_tok,
                    int n_head_kv, int head_dim_k, int head_dim_v) {
    STRATA_ASSERT(n_tok >= 0 && layer >= 0 && layer < kv->n_layer);
    check_heads(kv, n_head_kv, head_dim_k, head_dim_v);
    if (n_tok == 0)
        return;
    struct push_kv_write push = {.layer = (uint32_t)layer,
                                 .n_head_kv = (uint32_t)n_head_kv,
                                 .head_dim_k = (uint32_t)head_dim_k,
                                 .head_dim_v = (uint32_t)head_dim_v,
                                 .n_tok = (uint32_t)n_tok};
    vkops_kv_geom(kv, &push.g);
    const uint32_t pairs = (uint32_t)(kv->n_embd_k + kv->n_embd_v) / 2;
    push.n_tiles = (pairs + 255) / 256;
    struct vk_bind b[9] = {k, v, seq, pos};
    kv_binds(kv, b + 4);
    uint32_t gx, gy;
    vkops_grid((uint64_t)n_tok * push.n_tiles, &gx, &gy);
    vk_dispatch(o->dev, o->kv_write, b, &push, gx, gy, 1);
}

bool vkops_rope_kv_supported(int head_dim_k, int head_dim_v, int n_rot) {
    return head_dim_k >= 2 && head_dim_v >= 2 && head_dim_k % 2 == 0 && head_dim_v % 2 == 0 &&
           head_dim_k <= VKOPS_HEAD_DIM_MAX && head_dim_v <= VKOPS_HEAD_DIM_MAX && n_rot >= 2 &&
           n_rot % 2 == 0 && n_rot <= head_dim_k && n_rot <= VKOPS_ROT_MAX;
}

static bool same_bind(struct vk_bind x, struct vk_bind y) {
    return x.buf == y.buf && x.off == y.off;
}

static struct push_rope_fields rope_fields(const struct vkops_rope_kv *a) {
    struct vkops_rope_angles an;
    vkops_rope_angles(&a->rope, &an);
    return (struct push_rope_fields){.n_rot = (uint32_t)a->rope.n_rot,
                                     .mode = a->rope.mode == 2 ? 2u : 0u,
                                     .theta_scale = an.theta_scale,
                                     .freq_scale = an.freq_scale,
                                     .ext_factor = an.ext_factor,
                                     .mscale = an.mscale,
                                     .corr0 = an.corr0,
                                     .corr1 = an.corr1,
                                     .has_ff = a->rope.has_freq_factors,
                                     .norm_q = a->norm_q,
                                     .norm_k = a->norm_k,
                                     .eps_q = a->eps_q,
                                     .eps_k = a->eps_k};
}

/* The freq factors and the two norms' weights (unused ones bound to pos). */
static void rope_weight_binds(const struct vkops_rope_kv *a, struct vk_bind *b) {
    b[0] = a->rope.has_freq_factors ? a->rope.freq_factors : a->pos;
    b[1] = a->norm_q ? a->q_norm : a->pos;
    b[2] = a->norm_k ? a->k_norm : a->pos;
}

void vkops_rope_kv(struct vkops *o, const struct vkops_kv *kv, const struct vkops_rope_kv *a) {
    STRATA_ASSERT(a->n_tok >= 0 && a->layer >= 0 && a->layer < kv->n_layer && a->n_head >= 1);
    STRATA_ASSERT(vkops_rope_kv_supported(a->head_dim_k, a->head_dim_v, a->rope.n_rot));
    check_heads(kv, a->n_head_kv, a->head_dim_k, a->head_dim_v);
    if (a->n_tok == 0)
        return;
    struct push_rope_kv push = {.layer = (uint32_t)a->layer,
                                .n_tok = (uint32_t)a->n_tok,
                                .n_head = (uint32_t)a->n_head,
                                .n_head_kv = (uint32_t)a->n_head_kv,
                                .hdk = (uint32_t)a->head_dim_k,
                                .hdv = (uint32_t)a->head_dim_v,
                                .r = rope_fields(a)};
    vkops_kv_geom(kv, &push.g);
    struct vk_bind b[13] = {a->q, a->k, a->v, a->seq, a->pos};
    rope_weight_binds(a, b + 5);
    kv_binds(kv, b + 8);
    uint32_t gx, gy;
    vkops_grid((uint64_t)a->n_tok * (uint64_t)(a->n_head + 2 * a->n_head_kv), &gx, &gy);
    vk_dispatch(o->dev, o->rope_kv, b, &push, gx, gy, 1);
}

bool vkops_attn_supported(int n_head, int n_head_kv, int head_dim_k, int head_dim_v) {
    return n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0 &&
           n_head / n_head_kv <= VKOPS_GROUP_MAX && head_dim_k >= 2 && head_dim_v >= 2 &&
           head_dim_k % 2 == 0 && head_dim_v % 2 == 0 && head_dim_k <= VKOPS_HEAD_DIM_MAX &&
           head_dim_v <= VKOPS_HEAD_DIM_MAX;
}

/* Positions a chunk and the number of chunks for (n_tok x n_head_kv)
 * workgroup columns: enough chunks for ATTN_TARGET_WG workgroups, each a
 * whole number of tiles. More KV heads or tokens mean fewer chunks, so
 * n_head_kv = 1 bounds the count from above (the scratch size). */
static int attn_chunks(int n_tok, int n_head_kv, int n_kv_max, int *chunk) {
    const int cols = n_tok * n_head_kv;
    const int want = (attn_target_wg() + cols - 1) / cols;
    int c = (n_kv_max + want - 1) / want;
    c = (c + ATTN_TILE - 1) / ATTN_TILE * ATTN_TILE;
    *chunk = c;
    return (n_kv_max + c - 1) / c;
}

/* The prefill kernel for many tokens, when the device has it; with the
 * host's sequence ids, only where runs of one sequence are long enough
 * (>= 4 tokens on average) to share its K/V tiles: a batch of single
 * decoding tokens is split-K's case however many there are. */
static bool use_prefill(const struct vkops *o, const struct vkops_attn *a) {
    if (!o->attn_prefill || a->n_tok <= VKOPS_ATTN_DECODE_MAX)
        return false;
    if (!a->host_seq)
        return true;
    int runs = 1;
    for (int t = 1; t < a->n_tok; t++)
        runs += a->host_seq[t] != a->host_seq[t - 1];
    return a->n_tok >= 4 * runs;
}

static void attn_prefill(struct vkops *o, const struct vkops_kv *kv, const struct vkops_attn *a) {
    const int group = a->n_head / a->n_head_kv;
    struct push_attn_prefill push = {
        .layer = (uint32_t)a->layer,
        .n_tok = (uint32_t)a->n_tok,
        .n_head = (uint32_t)a->n_head,
        .n_head_kv = (uint32_t)a->n_head_kv,
        .hdk = (uint32_t)a->head_dim_k,
        .hdv = (uint32_t)a->head_dim_v,
        .tq = (uint32_t)(16 / group), /* rows of a workgroup: tq * group <= 16 */
        .scale = a->scale,
    };
    vkops_kv_geom(kv, &push.g);
    struct vk_bind b[9] = {a->q, a->seq, a->pos, a->out};
    kv_binds(kv, b + 4);
    const uint32_t n_tiles = (uint32_t)((a->n_tok + (int)push.tq - 1) / (int)push.tq);
    if (o->attn_late)
        vk_dispatch(o->dev, o->attn_prefill, b, &push, (uint32_t)a->n_head_kv, n_tiles, 1);
    else
        vk_dispatch(o->dev, o->attn_prefill, b, &push, n_tiles, (uint32_t)a->n_head_kv, 1);
}

/* op_attn_rope's pipeline, made at first use (vkops.attn_rope); NULL,
 * once and for good, where it cannot be made. Recording is the device
 * thread's only (vk-ops.h), so no lock. */
static struct vk_pipe *attn_rope_pipe(struct vkops *o) {
    if (!o->attn_rope && !o->attn_rope_failed) {
        struct strata_error e = {0};
        o->attn_rope = vk_pipe_create(o->dev, "op_attn_rope", spv_attn_rope, sizeof spv_attn_rope,
                                      16, sizeof(struct push_attn_rope), NULL, 0, &e);
        o->attn_rope_failed = o->attn_rope == NULL;
    }
    return o->attn_rope;
}

uint64_t vkops_attn_scratch_bytes(int n_tok, int n_head, int head_dim_v, int n_kv_max) {
    int chunk;
    const int n_chunk = attn_chunks(n_tok, 1, n_kv_max, &chunk);
    if (n_chunk <= 1)
        return 0;
    return ATTN_COUNTERS * sizeof(uint32_t) +
           (uint64_t)n_tok * n_head * n_chunk * (head_dim_v + 2) * sizeof(float);
}

bool vkops_attention(struct vkops *o, const struct vkops_kv *kv, const struct vkops_attn *a) {
    STRATA_ASSERT(a->n_tok >= 0 && a->layer >= 0 && a->layer < kv->n_layer && a->n_kv_max >= 1);
    STRATA_ASSERT(vkops_attn_supported(a->n_head, a->n_head_kv, a->head_dim_k, a->head_dim_v));
    STRATA_ASSERT(a->n_tok <= 65535); /* z of the grid */
    check_heads(kv, a->n_head_kv, a->head_dim_k, a->head_dim_v);
    const struct vkops_rope_kv *rk = a->rope;
    if (rk) /* the same step's rows: one q, seq and pos, the same heads */
        STRATA_ASSERT(rk->n_tok == a->n_tok && rk->layer == a->layer && rk->n_head == a->n_head &&
                      rk->n_head_kv == a->n_head_kv && rk->head_dim_k == a->head_dim_k &&
                      rk->head_dim_v == a->head_dim_v && same_bind(rk->q, a->q) &&
                      same_bind(rk->seq, a->seq) && same_bind(rk->pos, a->pos));
    if (a->n_tok == 0)
        return false;
    if (use_prefill(o, a)) {
        if (rk)
            vkops_rope_kv(o, kv, rk);
        attn_prefill(o, kv, a);
        return false;
    }
    const bool q8 = a->yq.buf && a->head_dim_v % 32 == 0 && a->yq.off % 16 == 0;
    int chunk;
    const int n_chunk = attn_chunks(a->n_tok, a->n_head_kv, a->n_kv_max, &chunk);
    struct push_attn_split push = {
        .layer = (uint32_t)a->layer,
        .n_tok = (uint32_t)a->n_tok,
        .n_head = (uint32_t)a->n_head,
        .n_head_kv = (uint32_t)a->n_head_kv,
        .hdk = (uint32_t)a->head_dim_k,
        .hdv = (uint32_t)a->head_dim_v,
        .chunk = (uint32_t)chunk,
        .n_chunk = (uint32_t)n_chunk,
        .direct = n_chunk == 1,
        .scale = a->scale,
        .q8out = q8,
    };
    vkops_kv_geom(kv, &push.g);
    struct vk_bind b[11] = {a->q, a->seq, a->pos, a->out};
    kv_binds(kv, b + 4);
    b[9] = n_chunk == 1 ? a->out : a->scratch; /* unused when direct */
    b[10] = q8 ? a->yq : a->out;               /* unused without q8 */
    if (n_chunk > 1) { /* a caller bug: scratch from vkops_attn_scratch_bytes */
        STRATA_ASSERT(a->n_tok * a->n_head_kv <= ATTN_COUNTERS);
        STRATA_ASSERT(a->scratch.buf &&
                      (a->scratch.range == 0 ||
                       a->scratch.range >= vkops_attn_scratch_bytes(a->n_tok, a->n_head,
                                                                    a->head_dim_v, a->n_kv_max)));
    }
    if (rk && !attn_rope_pipe(o)) { /* not made: the two dispatches, as asked */
        vkops_rope_kv(o, kv, rk);
        rk = NULL;
    }
    if (rk) {
        STRATA_ASSERT(vkops_rope_kv_supported(rk->head_dim_k, rk->head_dim_v, rk->rope.n_rot));
        const struct push_attn_rope pr = {.a = push, .r = rope_fields(rk)};
        struct vk_bind br[16];
        memcpy(br, b, sizeof b);
        br[11] = rk->k;
        br[12] = rk->v;
        rope_weight_binds(rk, br + 13);
        vk_dispatch(o->dev, o->attn_rope, br, &pr, (uint32_t)n_chunk, (uint32_t)a->n_head_kv,
                    (uint32_t)a->n_tok);
    } else {
        vk_dispatch(o->dev, o->attn_split, b, &push, (uint32_t)n_chunk, (uint32_t)a->n_head_kv,
                    (uint32_t)a->n_tok);
    }
    return q8;
}
