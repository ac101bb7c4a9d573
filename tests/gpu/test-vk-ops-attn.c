/* tests/gpu/test-vk-ops-attn.c: kv_write and attention of gpu/vk-ops.h
 * against the CPU's (engine/cpu/cpu-attn.c's writes through kv_k_head with
 * ops_f32_to_f16_row, ops_attn_head), over a real engine/kv cache: three
 * sequences of 1, 37 and 150 positions whose blocks were taken in turns
 * (so block ids are not in position order and positions cross blocks of
 * 16), the pool in four device buffers, both part layouts (whole rows and
 * one part per KV head), GQA groups of 1, 3 and 8, head_dim_k 48 and
 * head_dim_v 32, and heads of 256 (the widest the kernels take); the fused
 * norm + rope + KV write (vkops_rope_kv) against the ops it replaces. Part
 * of test-vk-ops (its main and device fixture). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/ops.h"
#include "engine/kv/kv.h"
#include "engine/quant/quant.h"
#include "gpu/vk-ops.h"
#include "tests/harness.h"

TCase *vkops_attn_tcase(void);
void vkops_attn_use(struct vk_dev **d, struct vkops **o);

static struct vk_dev *dev;
static struct vkops *ops;

void vkops_attn_use(struct vk_dev **d, struct vkops **o) {
    dev = *d;
    ops = *o;
}

enum { N_LAYER = 3, N_SEQ = 3, N_CTX = 256, NB = 16, HKV = 2, PIECES = 4 };
/* head dims of the cache under test (test_attention_wide widens them) */
#define HDK_DEFAULT 48
static int HDK = HDK_DEFAULT, HDV = 32;
static const int lens[N_SEQ] = {1, 37, 150};

struct fixture {
    struct kv_cache *kv;
    int n_tok;                      /* every (seq, pos) of the three sequences */
    int32_t seq[188], pos[188];     /* token t: (seq[t], pos[t]), the reservation order */
    float *k[N_LAYER], *v[N_LAYER]; /* (n_tok, HKV * HDK), (n_tok, HKV * HDV) */
    struct vk_buf *pool[PIECES], *table;
    struct vkops_kv gkv;
};

static struct vk_buf *buf_of(const void *src, size_t n) {
    struct strata_error err = {0};
    struct vk_buf *b = vk_buf_alloc(dev, n < 4 ? 4 : (n + 3) / 4 * 4, VK_MEM_DEVICE, &err);
    ck_assert_msg(b, "vk_buf_alloc: %s", err.message);
    if (src && n)
        ck_assert_msg(vk_buf_upload(dev, b, 0, src, n, &err) == 0, "upload: %s", err.message);
    return b;
}

static struct vk_bind bd(const struct vk_buf *b) {
    return (struct vk_bind){b, 0, 0};
}

static void run(void) {
    struct strata_error err = {0};
    ck_assert_msg(vk_rec_submit(dev, &err) == 0, "submit: %s", err.message);
    ck_assert_msg(vk_rec_wait(dev, &err) == 0, "wait: %s", err.message);
}

/* Layer 2's K/V hold the f16 conversion's edge cases (halfway values,
 * subnormals, overflow to inf, NaN); layers 0 and 1 random values, which
 * the attention reads. */
static void fill_values(struct fixture *f, struct strata_rng *r) {
    for (int l = 0; l < N_LAYER; l++) {
        f->k[l] = malloc((size_t)f->n_tok * HKV * HDK * sizeof(float));
        f->v[l] = malloc((size_t)f->n_tok * HKV * HDV * sizeof(float));
        for (int i = 0; i < f->n_tok * HKV * HDK; i++)
            f->k[l][i] = (float)(strata_rng_uniform(r) * 2 - 1);
        for (int i = 0; i < f->n_tok * HKV * HDV; i++)
            f->v[l][i] = (float)(strata_rng_uniform(r) * 2 - 1);
    }
    const float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                             0x1p-25f,        0x1.8p-25f,
                             0x1p-26f,        3e-6f,
                             -5.96e-8f,       65504.0f,
                             65519.0f,        65520.0f,
                             -1e6f,           NAN,
                             INFINITY,        -0.0f,
                             6.1e-5f,         2049.0f,
                             2051.0f,         0x1.0018p-14f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < f->n_tok * HKV * HDK; i += 7)
        f->k[2][i] = special[(i / 7) % ns];
    for (int i = 0; i < f->n_tok * HKV * HDV; i += 5)
        f->v[2][i] = special[(i / 5) % ns] * ((i / 5) % 3 ? 1.0f : -1.0f);
}

/* A cache with n_part parts (1: whole rows; HKV: a part per KV head), the
 * sequences' blocks reserved in turns, and the device side: a pool of four
 * pieces and the block table. */
static void fixture_init(struct fixture *f, int n_part) {
    memset(f, 0, sizeof *f);
    struct strata_error err = {0};
    const struct kv_params kp = {.n_layer = N_LAYER,
                                 .n_seq_max = N_SEQ,
                                 .n_ctx = N_CTX,
                                 .n_embd_k = HKV * HDK,
                                 .n_embd_v = HKV * HDV,
                                 .n_block = NB,
                                 .n_head_kv = n_part};
    f->kv = kv_init(&kp, &err);
    ck_assert_msg(f->kv, "kv_init: %s", err.message);
    for (int s = 0; s < N_SEQ; s++)
        ck_assert_int_eq(kv_seq_reserve(f->kv, s, &err), 0);
    for (int p = 0; p < N_CTX; p++)
        for (int s = 0; s < N_SEQ; s++)
            if (p < lens[s]) {
                ck_assert_int_eq(kv_seq_reserve_pos(f->kv, s, p, &err), 0);
                f->seq[f->n_tok] = s;
                f->pos[f->n_tok++] = p;
            }
    for (int s = 0; s < N_SEQ; s++)
        kv_seq_set_len(f->kv, s, lens[s]);
    struct strata_rng r;
    strata_rng_seed(&r, 21 + (uint64_t)n_part);
    fill_values(f, &r);

    const struct kv_params *ep = kv_get_params(f->kv);
    const int bpp = (ep->n_blocks + PIECES - 1) / PIECES;
    const uint64_t bb = kv_block_bytes(ep);
    for (int i = 0; i < PIECES; i++)
        f->pool[i] = buf_of(NULL, (size_t)(bpp * bb));
    const int stride = N_CTX / NB;
    int32_t tab[N_SEQ * (N_CTX / NB)];
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < stride; i++)
            tab[s * stride + i] = i < kv_seq_n_blocks(f->kv, s) ? kv_seq_block(f->kv, s, i) : 0;
    f->table = buf_of(tab, sizeof tab);
    f->gkv = (struct vkops_kv){.n_piece = PIECES,
                               .blocks_per_piece = bpp,
                               .block_bytes = bb,
                               .table = bd(f->table),
                               .table_stride = stride,
                               .n_layer = N_LAYER,
                               .n_block = NB,
                               .n_part = n_part,
                               .n_embd_k = HKV * HDK,
                               .n_embd_v = HKV * HDV};
    for (int i = 0; i < PIECES; i++)
        f->gkv.pool[i] = bd(f->pool[i]);
}

static void fixture_free(struct fixture *f) {
    vk_buf_free(dev, f->table);
    for (int i = PIECES - 1; i >= 0; i--)
        vk_buf_free(dev, f->pool[i]);
    for (int l = 0; l < N_LAYER; l++) {
        free(f->k[l]);
        free(f->v[l]);
    }
    kv_free(f->kv);
}

/* The CPU backend's kv_write (cpu_kv_write_run): every token, every head. */
static void cpu_write(struct fixture *f) {
    for (int l = 0; l < N_LAYER; l++)
        for (int t = 0; t < f->n_tok; t++)
            for (int h = 0; h < HKV; h++) {
                ops_f32_to_f16_row(f->k[l] + (t * HKV + h) * HDK,
                                   kv_k_head(f->kv, l, f->seq[t], f->pos[t], h, HDK), HDK);
                ops_f32_to_f16_row(f->v[l] + (t * HKV + h) * HDV,
                                   kv_v_head(f->kv, l, f->seq[t], f->pos[t], h, HDV), HDV);
            }
}

static void gpu_write(struct fixture *f) {
    struct strata_error err = {0};
    struct vk_buf *bs = buf_of(f->seq, f->n_tok * 4), *bp = buf_of(f->pos, f->n_tok * 4);
    struct vk_buf *bk[N_LAYER], *bv[N_LAYER];
    for (int l = 0; l < N_LAYER; l++) {
        bk[l] = buf_of(f->k[l], (size_t)f->n_tok * HKV * HDK * 4);
        bv[l] = buf_of(f->v[l], (size_t)f->n_tok * HKV * HDV * 4);
    }
    ck_assert_int_eq(vk_rec_begin(dev, &err), 0);
    for (int l = 0; l < N_LAYER; l++)
        vkops_kv_write(ops, &f->gkv, l, bd(bk[l]), bd(bv[l]), bd(bs), bd(bp), f->n_tok, HKV, HDK,
                       HDV);
    run();
    for (int l = N_LAYER - 1; l >= 0; l--) {
        vk_buf_free(dev, bv[l]);
        vk_buf_free(dev, bk[l]);
    }
    vk_buf_free(dev, bp);
    vk_buf_free(dev, bs);
}

/* Every written K and V head on the device equals the host cache's bits at
 * the same block offset (kv.c decides the offset: the host address minus
 * the block's first element). */
static void check_rows(struct fixture *f, const char *what) {
    const struct kv_params *ep = kv_get_params(f->kv);
    const int bpp = f->gkv.blocks_per_piece;
    const size_t piece_bytes = (size_t)bpp * f->gkv.block_bytes;
    uint16_t *dp[PIECES];
    struct strata_error err = {0};
    for (int i = 0; i < PIECES; i++) {
        dp[i] = malloc(piece_bytes);
        ck_assert_int_eq(vk_buf_download(dev, f->pool[i], 0, dp[i], piece_bytes, &err), 0);
    }
    for (int l = 0; l < N_LAYER; l++)
        for (int t = 0; t < f->n_tok; t++) {
            const int s = f->seq[t], p = f->pos[t];
            const int blk = kv_seq_block(f->kv, s, p / ep->n_block);
            const uint16_t *base = kv_k_part(f->kv, 0, s, p & ~(ep->n_block - 1), 0);
            const uint16_t *dev_blk = dp[blk / bpp] + (size_t)(blk % bpp) * f->gkv.block_bytes / 2;
            for (int h = 0; h < HKV; h++) {
                const uint16_t *hk = kv_k_head(f->kv, l, s, p, h, HDK);
                const uint16_t *hv = kv_v_head(f->kv, l, s, p, h, HDV);
                for (int i = 0; i < HDK; i++) /* one assert a failure, not a value */
                    if (dev_blk[hk - base + i] != hk[i])
                        ck_abort_msg("%s K layer %d seq %d pos %d head %d [%d] (%g): %04x vs %04x",
                                     what, l, s, p, h, i, (double)f->k[l][(t * HKV + h) * HDK + i],
                                     dev_blk[hk - base + i], hk[i]);
                for (int i = 0; i < HDV; i++)
                    if (dev_blk[hv - base + i] != hv[i])
                        ck_abort_msg("%s V layer %d seq %d pos %d head %d [%d] (%g): %04x vs %04x",
                                     what, l, s, p, h, i, (double)f->v[l][(t * HKV + h) * HDV + i],
                                     dev_blk[hv - base + i], hv[i]);
            }
        }
    for (int i = 0; i < PIECES; i++)
        free(dp[i]);
}

START_TEST(test_kv_write) {
    for (int n_part = 1; n_part <= HKV; n_part += HKV - 1) {
        struct fixture f;
        fixture_init(&f, n_part);
        gpu_write(&f);
        const enum kernels_isa saved = kernels_isa_active();
        for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++) { /* F16C and scalar */
            kernels_isa_force((enum kernels_isa)isa);
            cpu_write(&f);
            check_rows(&f, kernels_isa_name((enum kernels_isa)isa));
        }
        kernels_isa_force(saved);
        fixture_free(&f);
    }
}
END_TEST

/* ---- the fused norm + rope + KV write (vkops_rope_kv) ------------------------- */

/* The unfused ops (per-head rmsnorms, two ropes, kv_write: each checked
 * against the CPU above and in test-vk-ops.c) against vkops_rope_kv on
 * copies of the same q, k, v: q and k within float rounding (the norm's sum
 * runs in another order, the rope's products may contract differently), and
 * every f16 of the two caches equal or one ulp apart (an f32 that moved by
 * rounding can land on the other side of an f16 rounding boundary). Head
 * slots: 4 q heads over HKV = 2 (GQA 2), both part layouts, layers 0 and 1
 * (layer 2's NaN/inf values go through a norm differently in either order). */
#define ROPE_KV_NH (2 * HKV)

struct rope_kv_case {
    int n_rot, mode, norm_q, norm_k, ff;
    float fscale, ext;
};

/* vkops_rope_kv's arguments over these buffers (HKV KV heads of HDK / HDV
 * values, case kc's norms, eps 1e-6). */
static struct vkops_rope_kv rope_kv_args(struct vk_buf *q, struct vk_buf *k, struct vk_buf *v,
                                         struct vk_buf *seq, struct vk_buf *pos, int layer,
                                         int n_tok, int n_head, const struct vkops_rope *rc,
                                         const struct rope_kv_case *kc, struct vk_buf *qn,
                                         struct vk_buf *kn) {
    return (struct vkops_rope_kv){.q = bd(q),
                                  .k = bd(k),
                                  .v = bd(v),
                                  .seq = bd(seq),
                                  .pos = bd(pos),
                                  .layer = layer,
                                  .n_tok = n_tok,
                                  .n_head = n_head,
                                  .n_head_kv = HKV,
                                  .head_dim_k = HDK,
                                  .head_dim_v = HDV,
                                  .rope = *rc,
                                  .norm_q = kc->norm_q != 0,
                                  .norm_k = kc->norm_k != 0,
                                  .q_norm = bd(qn),
                                  .k_norm = bd(kn),
                                  .eps_q = 1e-6f,
                                  .eps_k = 1e-6f};
}

/* A second pool of the fixture's shape, zeroed. */
static void pool_copy(struct fixture *f, struct vk_buf *dst[PIECES]) {
    for (int i = 0; i < PIECES; i++)
        dst[i] = buf_of(NULL, (size_t)vk_buf_size(f->pool[i]));
}

static void rope_kv_case(struct fixture *f, int layer, const struct rope_kv_case *k,
                         struct strata_rng *r) {
    struct strata_error err = {0};
    const int nt = f->n_tok, nq = nt * ROPE_KV_NH * HDK, nk = nt * HKV * HDK, nv = nt * HKV * HDV;
    float *q = malloc((size_t)nq * 4), *qn = malloc(HDK * 4), *kn = malloc(HDK * 4);
    float *ff = malloc(HDK * 4);
    for (int i = 0; i < nq; i++)
        q[i] = (float)(strata_rng_uniform(r) * 4 - 2);
    for (int i = 0; i < HDK; i++) {
        qn[i] = (float)(0.5 + strata_rng_uniform(r));
        kn[i] = (float)(0.5 + strata_rng_uniform(r));
        ff[i] = 1.0f + (float)(i % 5) * 0.5f;
    }
    struct vk_buf *bs = buf_of(f->seq, nt * 4), *bp = buf_of(f->pos, nt * 4);
    struct vk_buf *bqn = buf_of(qn, HDK * 4), *bkn = buf_of(kn, HDK * 4),
                  *bff = buf_of(ff, HDK * 4);
    struct vk_buf *q1 = buf_of(q, nq * 4), *k1 = buf_of(f->k[layer], nk * 4);
    struct vk_buf *q2 = buf_of(q, nq * 4), *k2 = buf_of(f->k[layer], nk * 4);
    struct vk_buf *bv = buf_of(f->v[layer], nv * 4);
    struct vk_buf *pool2[PIECES];
    pool_copy(f, pool2);
    for (int i = 0; i < PIECES; i++) /* both caches start empty */
        ck_assert_int_eq(vk_buf_fill(dev, f->pool[i], 0, vk_buf_size(f->pool[i]), 0, &err), 0);
    struct vkops_kv kv2 = f->gkv;
    for (int i = 0; i < PIECES; i++)
        kv2.pool[i] = bd(pool2[i]);
    const struct vkops_rope rc = {k->n_rot, k->mode, 10000.0f,   k->fscale, k->ext,
                                  1.0f,     64,      k->ff != 0, bd(bff)};
    const float eps = 1e-6f;
    ck_assert_int_eq(vk_rec_begin(dev, &err), 0);
    if (k->norm_q)
        vkops_rmsnorm(ops, bd(q1), bd(bqn), true, bd(q1), nt * ROPE_KV_NH, HDK, eps);
    if (k->norm_k)
        vkops_rmsnorm(ops, bd(k1), bd(bkn), true, bd(k1), nt * HKV, HDK, eps);
    vkops_rope(ops, bd(q1), nt, ROPE_KV_NH, HDK, bd(bp), &rc);
    vkops_rope(ops, bd(k1), nt, HKV, HDK, bd(bp), &rc);
    vkops_kv_write(ops, &f->gkv, layer, bd(k1), bd(bv), bd(bs), bd(bp), nt, HKV, HDK, HDV);
    const struct vkops_rope_kv a =
        rope_kv_args(q2, k2, bv, bs, bp, layer, nt, ROPE_KV_NH, &rc, k, bqn, bkn);
    ck_assert(vkops_rope_kv_supported(HDK, HDV, k->n_rot));
    vkops_rope_kv(ops, &kv2, &a);
    run();
    char what[96];
    snprintf(what, sizeof what, "rope_kv n_rot %d mode %d norms %d%d ff %d layer %d parts %d",
             k->n_rot, k->mode, k->norm_q, k->norm_k, k->ff, layer, f->gkv.n_part);
    float *g1 = malloc((size_t)nq * 4), *g2 = malloc((size_t)nq * 4);
    ck_assert_int_eq(vk_buf_download(dev, q1, 0, g1, (size_t)nq * 4, &err), 0);
    ck_assert_int_eq(vk_buf_download(dev, q2, 0, g2, (size_t)nq * 4, &err), 0);
    /* one assert a failure, not a value: a passing ck_assert marks a point
     * through Check's pipe, which made these loops most of this test's
     * 28.2 s under ASan (1.7 s now) */
    for (int i = 0; i < nq; i++)
        if (!(fabsf(g1[i] - g2[i]) <= 4e-6f * fmaxf(1.0f, fabsf(g1[i]))))
            ck_abort_msg("%s: q[%d] %.9g fused %.9g", what, i, g1[i], g2[i]);
    ck_assert_int_eq(vk_buf_download(dev, k1, 0, g1, (size_t)nk * 4, &err), 0);
    ck_assert_int_eq(vk_buf_download(dev, k2, 0, g2, (size_t)nk * 4, &err), 0);
    for (int i = 0; i < nk; i++)
        if (!(fabsf(g1[i] - g2[i]) <= 4e-6f * fmaxf(1.0f, fabsf(g1[i]))))
            ck_abort_msg("%s: k[%d] %.9g fused %.9g", what, i, g1[i], g2[i]);
    int n_diff = 0;
    for (int p = 0; p < PIECES; p++) {
        const size_t bytes = (size_t)vk_buf_size(f->pool[p]);
        uint16_t *h1 = malloc(bytes), *h2 = malloc(bytes);
        ck_assert_int_eq(vk_buf_download(dev, f->pool[p], 0, h1, bytes, &err), 0);
        ck_assert_int_eq(vk_buf_download(dev, pool2[p], 0, h2, bytes, &err), 0);
        for (size_t i = 0; i < bytes / 2; i++) {
            const int d = (int)h1[i] - (int)h2[i];
            if (d < -1 || d > 1 || (h1[i] & 0x8000) != (h2[i] & 0x8000))
                ck_abort_msg("%s: cache piece %d f16 %zu: %04x fused %04x", what, p, i, h1[i],
                             h2[i]);
            n_diff += d != 0;
        }
        free(h2);
        free(h1);
    }
    ck_assert_msg(n_diff * 1000 <= nk + nv, "%s: %d f16 one ulp apart", what, n_diff);
    free(g2);
    free(g1);
    for (int i = PIECES - 1; i >= 0; i--)
        vk_buf_free(dev, pool2[i]);
    vk_buf_free(dev, bv);
    vk_buf_free(dev, k2);
    vk_buf_free(dev, q2);
    vk_buf_free(dev, k1);
    vk_buf_free(dev, q1);
    vk_buf_free(dev, bff);
    vk_buf_free(dev, bkn);
    vk_buf_free(dev, bqn);
    vk_buf_free(dev, bp);
    vk_buf_free(dev, bs);
    free(ff);
    free(kn);
    free(qn);
    free(q);
}

START_TEST(test_rope_kv) {
    static const struct rope_kv_case cases[] = {
        {HDK_DEFAULT, 0, 0, 0, 0, 1.0f, 0.0f},  /* llama */
        {32, 2, 1, 1, 0, 1.0f, 0.0f},           /* qwen3: norms, neox over part of the head */
        {HDK_DEFAULT, 2, 0, 1, 1, 0.25f, 1.0f}, /* k norm only, freq factors, YaRN */
        {20, 2, 1, 0, 0, 1.0f, 0.0f},           /* neox with an odd half (10) */
        {20, 0, 1, 1, 0, 1.0f, 0.0f},           /* adjacent pairs, n_rot < head_dim */
    };
    struct strata_rng r;
    strata_rng_seed(&r, 77);
    for (int n_part = 1; n_part <= HKV; n_part += HKV - 1) {
        struct fixture f;
        fixture_init(&f, n_part);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int layer = 0; layer < 2; layer++)
                rope_kv_case(&f, layer, &cases[c], &r);
        fixture_free(&f);
    }
}
END_TEST

/* vkops_attention's arguments over these buffers (HKV KV heads of HDK /
 * HDV values, scale 1 / sqrt(HDK)); yq NULL: no q8 copy asked for. */
static struct vkops_attn attn_args(struct vk_buf *q, struct vk_buf *out, struct vk_buf *seq,
                                   struct vk_buf *pos, struct vk_buf *scratch, struct vk_buf *yq,
                                   int layer, int n_tok, int n_head, int n_kv_max,
                                   const int32_t *host_seq) {
    return (struct vkops_attn){.q = bd(q),
                               .out = bd(out),
                               .seq = bd(seq),
                               .pos = bd(pos),
                               .scratch = bd(scratch),
                               .layer = layer,
                               .n_tok = n_tok,
                               .n_head = n_head,
                               .n_head_kv = HKV,
                               .head_dim_k = HDK,
                               .head_dim_v = HDV,
                               .n_kv_max = n_kv_max,
                               .scale = 1.0f / sqrtf((float)HDK),
                               .host_seq = host_seq,
                               .yq = yq ? bd(yq) : (struct vk_bind){0}};
}

/* Attention of n_tok queries (seq[t], pos[t]) at layer `layer` on the GPU
 * against ops_attn_head on the host cache; `kernel` names the pipeline that
 * must have run (read from the device's profile, where it has timestamps),
 * host_seq whether the kernel choice sees the sequence ids. With heads of a
 * multiple of 32 values the call asks for the q8 copy too (vkops_attn.yq):
 * the split kernel writes it, the bytes vkops_quant_q8 makes of out; the
 * prefill kernel does not (and says so). */
static void check_attn(struct fixture *f, int layer, int n_head, int n_tok, const int32_t *seq,
                       const int32_t *pos, bool host_seq, const char *kernel,
                       struct strata_rng *r) {
    const int n_q = n_tok * n_head * HDK;
    float *q = malloc((size_t)n_q * 4), *got = malloc((size_t)n_tok * n_head * HDV * 4);
    float *want = malloc((size_t)n_tok * n_head * HDV * 4);
    for (int i = 0; i < n_q; i++)
        q[i] = (float)(strata_rng_uniform(r) * 4 - 2);
    int n_kv_max = 0;
    for (int t = 0; t < n_tok; t++)
        n_kv_max = pos[t] + 1 > n_kv_max ? pos[t] + 1 : n_kv_max;
    const uint64_t sb = vkops_attn_scratch_bytes(n_tok, n_head, HDV, n_kv_max);
    struct vk_buf *bq = buf_of(q, (size_t)n_q * 4), *bs = buf_of(seq, n_tok * 4);
    struct vk_buf *bp = buf_of(pos, n_tok * 4), *bsc = buf_of(NULL, sb);
    struct vk_buf *bo = buf_of(NULL, (size_t)n_tok * n_head * HDV * 4);
    const bool q8 = HDV % 32 == 0, split = strcmp(kernel, "op_attn_split") == 0;
    const uint64_t qn = q8 ? vkops_q8_bytes(n_tok, (int64_t)n_head * HDV) : 16;
    struct vk_buf *byq = buf_of(NULL, qn), *bref = buf_of(NULL, qn);
    const struct vkops_attn a = attn_args(bq, bo, bs, bp, bsc, q8 ? byq : NULL, layer, n_tok,
                                          n_head, n_kv_max, host_seq ? seq : NULL);
    struct strata_error err = {0};
    const bool prof = vk_dev_info(dev)->timestamp_period_ns > 0;
    vk_prof_enable(dev, prof);
    /* out starts as NaN: every value must be written; the attention runs
     * twice in one recording over the same scratch, which needs the merge
     * counters back at zero after the first */
    ck_assert_int_eq(vk_buf_fill(dev, bo, 0, (uint64_t)n_tok * n_head * HDV * 4, 0x7fc00000u, &err),
                     0);
    ck_assert_int_eq(vk_rec_begin(dev, &err), 0);
    vkops_attention(ops, &f->gkv, &a);
    vk_fill(dev, bo, 0, (uint64_t)n_tok * n_head * HDV * 4, 0x7fc00000u);
    vk_fill(dev, byq, 0, qn, 0xdeadbeefu);
    const bool wrote = vkops_attention(ops, &f->gkv, &a);
    ck_assert_int_eq(wrote, q8 && split);
    if (wrote)
        ck_assert(vkops_quant_q8(ops, bd(bo), bd(bref), n_tok, (int64_t)n_head * HDV));
    run();
    if (wrote) {
        uint8_t *g8 = malloc(qn), *r8 = malloc(qn);
        ck_assert_int_eq(vk_buf_download(dev, byq, 0, g8, qn, &err), 0);
        ck_assert_int_eq(vk_buf_download(dev, bref, 0, r8, qn, &err), 0);
        ck_assert_msg(!memcmp(g8, r8, qn), "n_tok %d n_head %d: attention's q8 copy differs", n_tok,
                      n_head);
        free(r8);
        free(g8);
    }
    vk_prof_enable(dev, false);
    if (prof) {
        char *rep = NULL;
        size_t rep_n = 0;
        FILE *mf = open_memstream(&rep, &rep_n);
        vk_prof_report(dev, mf);
        fclose(mf);
        ck_assert_msg(strstr(rep, kernel) != NULL, "n_tok %d: %s did not run:\n%s", n_tok, kernel,
                      rep);
        free(rep);
    }
    ck_assert_int_eq(vk_buf_download(dev, bo, 0, got, (size_t)n_tok * n_head * HDV * 4, &err), 0);
    if (sb > 0) { /* the counters: zero again */
        uint32_t *cnt = malloc(sb);
        ck_assert_int_eq(vk_buf_download(dev, bsc, 0, cnt, sb, &err), 0);
        for (int i = 0; i < n_tok * HKV; i++)
            if (cnt[i] != 0)
                ck_abort_msg("merge counter %d left at %u", i, cnt[i]);
        free(cnt);
    }
    const uint16_t **kr = malloc(N_CTX * sizeof *kr), **vr = malloc(N_CTX * sizeof *vr);
    float *sc = malloc(N_CTX * sizeof *sc);
    const int group = n_head / HKV;
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            for (int p = 0; p <= pos[t]; p++) {
                kr[p] = kv_k_head(f->kv, layer, seq[t], p, h / group, HDK);
                vr[p] = kv_v_head(f->kv, layer, seq[t], p, h / group, HDV);
            }
            ops_attn_head(q + (t * n_head + h) * HDK, kr, vr, pos[t] + 1, HDK, HDV, a.scale, sc,
                          want + (t * n_head + h) * HDV);
        }
    for (int i = 0; i < n_tok * n_head * HDV; i++)
        if (!(fabsf(got[i] - want[i]) <= 2e-5f))
            ck_abort_msg(
                "attention n_tok %d n_head %d layer %d [%d] (token %d): gpu %.8g vs cpu %.8g",
                n_tok, n_head, layer, i, i / (n_head * HDV), (double)got[i], (double)want[i]);
    free(sc);
    free(vr);
    free(kr);
    vk_buf_free(dev, bref);
    vk_buf_free(dev, byq);
    vk_buf_free(dev, bo);
    vk_buf_free(dev, bsc);
    vk_buf_free(dev, bp);
    vk_buf_free(dev, bs);
    vk_buf_free(dev, bq);
    free(want);
    free(got);
    free(q);
}

START_TEST(test_attention) {
    struct strata_rng r;
    strata_rng_seed(&r, 31);
    for (int n_part = 1; n_part <= HKV; n_part += HKV - 1) {
        struct fixture f;
        fixture_init(&f, n_part);
        gpu_write(&f);
        cpu_write(&f);
        const int n_heads[] = {HKV, 3 * HKV, 8 * HKV}; /* groups of 1, 3, 8 */
        for (int hi = n_part == 1 ? 1 : 0; hi < (n_part == 1 ? 2 : 3); hi++) { /* lavapipe time */
            const int nh = n_heads[hi];
            /* decode: each sequence's last position (split into chunks, merged) */
            const int32_t ds[] = {0, 1, 2}, dpos[] = {0, 36, 149};
            check_attn(&f, hi % 2, nh, 3, ds, dpos, false, "op_attn_split", &r);
            /* one long sequence alone: the most chunks */
            const int32_t s1[] = {2}, p1[] = {149};
            check_attn(&f, 1, nh, 1, s1, p1, false, "op_attn_split", &r);
            /* a first token: one chunk (direct, no merge) */
            const int32_t s0[] = {1}, p0[] = {0};
            check_attn(&f, 0, nh, 1, s0, p0, false, "op_attn_split", &r);
            /* a prefill: every position of every sequence, in turns (tiles of
             * several sequences) */
            check_attn(&f, 0, nh, f.n_tok, f.seq, f.pos, false, "op_attn_prefill", &r);
            /* a prefill chunk of one sequence: positions 40 .. 149 of seq 2 */
            int32_t cs[110], cp[110];
            for (int i = 0; i < 110; i++)
                cs[i] = 2, cp[i] = 40 + i;
            check_attn(&f, 1, nh, 110, cs, cp, true, "op_attn_prefill", &r);
            /* 12 decoding tokens of three sequences in turns: with the host's
             * ids the split (runs of 1), without them the prefill kernel */
            int32_t bs[12], bp[12];
            for (int i = 0; i < 12; i++)
                bs[i] = i % 3, bp[i] = lens[i % 3] - 1 - i / 3 * (i % 3 ? 5 : 0);
            check_attn(&f, 0, nh, 12, bs, bp, true, "op_attn_split", &r);
            check_attn(&f, 0, nh, 12, bs, bp, false, "op_attn_prefill", &r);
        }
        fixture_free(&f);
    }
    ck_assert(vkops_attn_supported(32, 8, 128, 128));
    ck_assert(!vkops_attn_supported(32, 2, 128, 128)); /* a group of 16 */
    ck_assert(!vkops_attn_supported(8, 8, 512, 512));
    ck_assert(!vkops_attn_supported(8, 8, 63, 64));
}
END_TEST

/* The widest heads the kernels take (256: every word of the prefill's
 * 16-word slices and the split's q tile in use), llama's group of 4. */
START_TEST(test_attention_wide) {
    struct strata_rng r;
    strata_rng_seed(&r, 32);
    HDK = HDV = VKOPS_HEAD_DIM_MAX;
    struct fixture f;
    fixture_init(&f, HKV);
    gpu_write(&f);
    cpu_write(&f);
    check_rows(&f, "wide");
    const int32_t ds[] = {0, 1, 2}, dpos[] = {0, 36, 149};
    check_attn(&f, 1, 4 * HKV, 3, ds, dpos, false, "op_attn_split", &r);
    int32_t cs[40], cp[40];
    for (int i = 0; i < 40; i++)
        cs[i] = 2, cp[i] = 110 + i;
    check_attn(&f, 0, 4 * HKV, 40, cs, cp, true, "op_attn_prefill", &r);
    fixture_free(&f);
    HDK = 48, HDV = 32;
}
END_TEST

/* Heads whose words are not whole 16-byte runs (20 and 12 values: 10 and
 * 6 words), so the prefill kernel's uvec4 rows end in padding. */
START_TEST(test_attention_odd) {
    struct strata_rng r;
    strata_rng_seed(&r, 33);
    HDK = 20, HDV = 12;
    struct fixture f;
    fixture_init(&f, HKV);
    gpu_write(&f);
    cpu_write(&f);
    check_rows(&f, "odd");
    const int32_t ds[] = {0, 1, 2}, dpos[] = {0, 36, 149};
    check_attn(&f, 1, 2 * HKV, 3, ds, dpos, false, "op_attn_split", &r);
    int32_t cs[40], cp[40];
    for (int i = 0; i < 40; i++)
        cs[i] = 2, cp[i] = 110 + i;
    check_attn(&f, 0, 2 * HKV, 40, cs, cp, true, "op_attn_prefill", &r);
    fixture_free(&f);
    HDK = 48, HDV = 32;
}
END_TEST

/* ---- the decode attention that does the rope + KV write itself ---------------- */

/* vkops_rope_kv then vkops_attention (path A, the fixture's cache) against
 * one vkops_attention with .rope (op_attn_rope.comp, path B, on a copy of
 * the cache), from the same unroped q, k and v of decoding tokens (one a
 * sequence): the outputs, their q8 copies and both caches must be equal to
 * the bit (the fused kernel runs op_rope_kv's arithmetic, op_rope_head.glsl,
 * in the same lane layout). */
static void attn_rope_case(struct fixture *f, int layer, int n_head, int n_tok, const int32_t *seq,
                           const int32_t *pos, const struct rope_kv_case *k, struct strata_rng *r) {
    struct strata_error err = {0};
    const int nq = n_tok * n_head * HDK, nk = n_tok * HKV * HDK, nv = n_tok * HKV * HDV;
    const int no = n_tok * n_head * HDV;
    float *q = malloc((size_t)nq * 4), *kk = malloc((size_t)nk * 4), *vv = malloc((size_t)nv * 4);
    float *w = malloc((size_t)3 * HDK * 4);
    for (int i = 0; i < nq; i++)
        q[i] = (float)(strata_rng_uniform(r) * 4 - 2);
    for (int i = 0; i < nk; i++)
        kk[i] = (float)(strata_rng_uniform(r) * 2 - 1);
    for (int i = 0; i < nv; i++)
        vv[i] = (float)(strata_rng_uniform(r) * 2 - 1);
    for (int i = 0; i < HDK; i++) {
        w[i] = (float)(0.5 + strata_rng_uniform(r));       /* q norm */
        w[HDK + i] = (float)(0.5 + strata_rng_uniform(r)); /* k norm */
        w[2 * HDK + i] = 1.0f + (float)(i % 5) * 0.5f;     /* freq factors */
    }
    int n_kv_max = 0;
    for (int t = 0; t < n_tok; t++)
        n_kv_max = pos[t] + 1 > n_kv_max ? pos[t] + 1 : n_kv_max;
    const uint64_t sb = vkops_attn_scratch_bytes(n_tok, n_head, HDV, n_kv_max);
    const bool q8 = HDV % 32 == 0;
    const uint64_t qn = q8 ? vkops_q8_bytes(n_tok, (int64_t)n_head * HDV) : 16;
    struct vk_buf *bs = buf_of(seq, n_tok * 4), *bp = buf_of(pos, n_tok * 4);
    struct vk_buf *bqn = buf_of(w, HDK * 4), *bkn = buf_of(w + HDK, HDK * 4),
                  *bff = buf_of(w + 2 * HDK, HDK * 4), *bv = buf_of(vv, (size_t)nv * 4);
    struct vk_buf *bq[2], *bk[2], *bo[2], *bsc[2], *byq[2], *pool2[PIECES];
    for (int i = 0; i < 2; i++) {
        bq[i] = buf_of(q, (size_t)nq * 4);
        bk[i] = buf_of(kk, (size_t)nk * 4);
        bo[i] = buf_of(NULL, (size_t)no * 4);
        bsc[i] = buf_of(NULL, sb);
        byq[i] = buf_of(NULL, qn);
    }
    for (int i = 0; i < PIECES; i++) { /* path B's cache: a copy of the fixture's */
        const size_t bytes = (size_t)vk_buf_size(f->pool[i]);
        uint8_t *h = malloc(bytes);
        ck_assert_int_eq(vk_buf_download(dev, f->pool[i], 0, h, bytes, &err), 0);
        pool2[i] = buf_of(h, bytes);
        free(h);
    }
    struct vkops_kv kv2 = f->gkv;
    for (int i = 0; i < PIECES; i++)
        kv2.pool[i] = bd(pool2[i]);
    const struct vkops_rope rc = {k->n_rot, k->mode, 10000.0f,   k->fscale, k->ext,
                                  1.0f,     64,      k->ff != 0, bd(bff)};
    struct vkops_rope_kv rk[2];
    struct vkops_attn a[2];
    for (int i = 0; i < 2; i++) {
        rk[i] = rope_kv_args(bq[i], bk[i], bv, bs, bp, layer, n_tok, n_head, &rc, k, bqn, bkn);
        a[i] = attn_args(bq[i], bo[i], bs, bp, bsc[i], q8 ? byq[i] : NULL, layer, n_tok, n_head,
                         n_kv_max, seq);
        a[i].rope = i == 1 ? &rk[1] : NULL;
    }
    const bool prof = vk_dev_info(dev)->timestamp_period_ns > 0;
    vk_prof_enable(dev, prof);
    ck_assert_int_eq(vk_rec_begin(dev, &err), 0);
    vkops_rope_kv(ops, &f->gkv, &rk[0]);
    ck_assert_int_eq(vkops_attention(ops, &f->gkv, &a[0]), q8);
    ck_assert_int_eq(vkops_attention(ops, &kv2, &a[1]), q8);
    run();
    char what[128];
    snprintf(what, sizeof what,
             "attn+rope n_rot %d mode %d norms %d%d ff %d layer %d heads %d tok %d", k->n_rot,
             k->mode, k->norm_q, k->norm_k, k->ff, layer, n_head, n_tok);
    vk_prof_enable(dev, false);
    if (prof) {
        char *rep = NULL;
        size_t rep_n = 0;
        FILE *mf = open_memstream(&rep, &rep_n);
        vk_prof_report(dev, mf);
        fclose(mf);
        ck_assert_msg(strstr(rep, "op_attn_rope") != NULL, "%s: op_attn_rope did not run:\n%s",
                      what, rep);
        free(rep);
    }
    const size_t ob = (size_t)no * 4;
    uint8_t *g0 = malloc(ob > qn ? ob : qn), *g1 = malloc(ob > qn ? ob : qn);
    ck_assert_int_eq(vk_buf_download(dev, bo[0], 0, g0, ob, &err), 0);
    ck_assert_int_eq(vk_buf_download(dev, bo[1], 0, g1, ob, &err), 0);
    for (int i = 0; i < no; i++)
        if (memcmp(g0 + 4 * i, g1 + 4 * i, 4))
            ck_abort_msg("%s: out[%d] %.9g fused %.9g", what, i, ((float *)g0)[i],
                         ((float *)g1)[i]);
    if (q8) {
        ck_assert_int_eq(vk_buf_download(dev, byq[0], 0, g0, qn, &err), 0);
        ck_assert_int_eq(vk_buf_download(dev, byq[1], 0, g1, qn, &err), 0);
        ck_assert_msg(!memcmp(g0, g1, qn), "%s: the q8 copies differ", what);
    }
    free(g1);
    free(g0);
    for (int i = 0; i < PIECES; i++) {
        const size_t bytes = (size_t)vk_buf_size(f->pool[i]);
        uint16_t *h0 = malloc(bytes), *h1 = malloc(bytes);
        ck_assert_int_eq(vk_buf_download(dev, f->pool[i], 0, h0, bytes, &err), 0);
        ck_assert_int_eq(vk_buf_download(dev, pool2[i], 0, h1, bytes, &err), 0);
        for (size_t e = 0; e < bytes / 2; e++)
            if (h0[e] != h1[e])
                ck_abort_msg("%s: cache piece %d f16 %zu: %04x fused %04x", what, i, e, h0[e],
                             h1[e]);
        free(h1);
        free(h0);
    }
    for (int i = PIECES - 1; i >= 0; i--)
        vk_buf_free(dev, pool2[i]);
    for (int i = 1; i >= 0; i--) {
        vk_buf_free(dev, byq[i]);
        vk_buf_free(dev, bsc[i]);
        vk_buf_free(dev, bo[i]);
        vk_buf_free(dev, bk[i]);
        vk_buf_free(dev, bq[i]);
    }
    vk_buf_free(dev, bv);
    vk_buf_free(dev, bff);
    vk_buf_free(dev, bkn);
    vk_buf_free(dev, bqn);
    vk_buf_free(dev, bp);
    vk_buf_free(dev, bs);
    free(w);
    free(vv);
    free(kk);
    free(q);
}

START_TEST(test_attention_rope) {
    static const struct rope_kv_case cases[] = {
        {HDK_DEFAULT, 0, 0, 0, 0, 1.0f, 0.0f},  /* llama */
        {32, 2, 1, 1, 0, 1.0f, 0.0f},           /* qwen3: norms, neox over part of the head */
        {HDK_DEFAULT, 2, 0, 1, 1, 0.25f, 1.0f}, /* k norm only, freq factors, YaRN */
    };
    struct strata_rng r;
    strata_rng_seed(&r, 35);
    struct fixture f;
    fixture_init(&f, HKV);
    gpu_write(&f);
    /* decoding tokens, one a sequence: merged chunks, and a first token
     * (one chunk, direct); then one long sequence alone */
    const int32_t ds[] = {0, 1, 2}, dpos[] = {0, 36, 149}, s1[] = {2}, p1[] = {149};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_rope_case(&f, (int)c % 2, 3 * HKV, 3, ds, dpos, &cases[c], &r);
        attn_rope_case(&f, 1, HKV, 1, s1, p1, &cases[c], &r);
    }
    fixture_free(&f);
}
END_TEST

/* Chunks of more than one 64-position tile (the split's block-table
 * lookups double-buffered across tiles): STRATA_VK_ATTN_WG = 2 * HKV makes
 * one token's 150 positions two chunks of 80 (tiles of 64 + 16 and 64 + 6,
 * merged) and three tokens' one chunk of 150 (64 + 64 + 22, direct). The
 * knob is read once a process: Check forks each test, so it is this test's
 * alone; the chunk count is checked through the scratch size. */
START_TEST(test_attention_long_chunks) {
    ck_assert_int_eq(setenv("STRATA_VK_ATTN_WG", "4", 1), 0);
    ck_assert_int_eq(HKV, 2);
    /* the scratch is sized for one KV head (the most chunks): 4, where the
     * default target (264 workgroups) would make 10 */
    ck_assert_uint_eq(vkops_attn_scratch_bytes(1, 2 * HKV, HDV, 150),
                      65536 * 4 + (uint64_t)2 * HKV * 4 * (HDV + 2) * 4);
    struct strata_rng r;
    strata_rng_seed(&r, 34);
    struct fixture f;
    fixture_init(&f, HKV);
    gpu_write(&f);
    cpu_write(&f);
    const int32_t s1[] = {2}, p1[] = {149};
    check_attn(&f, 1, 2 * HKV, 1, s1, p1, false, "op_attn_split", &r);
    const int32_t ds[] = {0, 1, 2}, dpos[] = {0, 36, 149};
    check_attn(&f, 0, 2 * HKV, 3, ds, dpos, false, "op_attn_split", &r);
    fixture_free(&f);
}
END_TEST

TCase *vkops_attn_tcase(void) {
    TCase *tc = tcase_create("attention");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_kv_write);
    tcase_add_test(tc, test_rope_kv);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_attention_wide);
    tcase_add_test(tc, test_attention_odd);
    tcase_add_test(tc, test_attention_long_chunks);
    tcase_add_test(tc, test_attention_rope);
    return tc;
}
