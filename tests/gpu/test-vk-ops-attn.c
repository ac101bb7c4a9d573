/* tests/gpu/test-vk-ops-attn.c: kv_write and attention of gpu/vk-ops.h
 * against the CPU's (engine/cpu/cpu-attn.c's writes through kv_k_head with
 * ops_f32_to_f16_row, ops_attn_head), over a real engine/kv cache: three
 * sequences of 1, 37 and 150 positions whose blocks were taken in turns
 * (so block ids are not in position order and positions cross blocks of
 * 16), the pool in four device buffers, both part layouts (whole rows and
 * one part per KV head), GQA groups of 1, 3 and 8, head_dim_k 48 and
 * head_dim_v 32, and heads of 256 (the widest the kernels take). Part of test-vk-ops (its main and
 * device fixture). */
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
static int HDK = 48, HDV = 32;
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
                for (int i = 0; i < HDK; i++)
                    ck_assert_msg(dev_blk[hk - base + i] == hk[i],
                                  "%s K layer %d seq %d pos %d head %d [%d] (%g): %04x vs %04x",
                                  what, l, s, p, h, i, (double)f->k[l][(t * HKV + h) * HDK + i],
                                  dev_blk[hk - base + i], hk[i]);
                for (int i = 0; i < HDV; i++)
                    ck_assert_msg(dev_blk[hv - base + i] == hv[i],
                                  "%s V layer %d seq %d pos %d head %d [%d] (%g): %04x vs %04x",
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

/* Attention of n_tok queries (seq[t], pos[t]) at layer `layer` on the GPU
 * against ops_attn_head on the host cache; `kernel` names the pipeline that
 * must have run (read from the device's profile, where it has timestamps),
 * host_seq whether the kernel choice sees the sequence ids. */
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
    const struct vkops_attn a = {.q = bd(bq),
                                 .out = bd(bo),
                                 .seq = bd(bs),
                                 .pos = bd(bp),
                                 .scratch = bd(bsc),
                                 .layer = layer,
                                 .n_tok = n_tok,
                                 .n_head = n_head,
                                 .n_head_kv = HKV,
                                 .head_dim_k = HDK,
                                 .head_dim_v = HDV,
                                 .n_kv_max = n_kv_max,
                                 .scale = 1.0f / sqrtf((float)HDK),
                                 .host_seq = host_seq ? seq : NULL};
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
    vkops_attention(ops, &f->gkv, &a);
    run();
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
            ck_assert_msg(cnt[i] == 0, "merge counter %d left at %u", i, cnt[i]);
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
        ck_assert_msg(fabsf(got[i] - want[i]) <= 2e-5f,
                      "attention n_tok %d n_head %d layer %d [%d] (token %d): gpu %.8g vs cpu %.8g",
                      n_tok, n_head, layer, i, i / (n_head * HDV), (double)got[i], (double)want[i]);
    free(sc);
    free(vr);
    free(kr);
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

TCase *vkops_attn_tcase(void) {
    TCase *tc = tcase_create("attention");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_kv_write);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_attention_wide);
    return tc;
}
