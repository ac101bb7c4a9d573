/* tests/gpu/test-vk-model.c: whole models on the Vulkan backend
 * (gpu/backend-vk.h) on whatever device exists (lavapipe in CI):
 * stories260K's greedy ids equal the golden file the CPU tests use; tiny
 * synthesized llama, qwen3, qwen3moe (and the other architectures the model
 * binds) give the CPU backend's greedy tokens under the teacher-forced
 * near-tie rule, for single-sequence decode, a prefill chunk, and three
 * sequences interleaved in one batch; weights and the KV pool split over
 * several bindings; the backend's own step semantics (reads land at the
 * wait, several submits in one step, a begin drops the unsubmitted part).
 * Exit 77 (skipped) only when no Vulkan device exists. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/backend-split.h"
#include "engine/cpu/backend-cpu.h"
#include "engine/host/pool.h"
#include "engine/kv/kv.h"
#include "engine/sample/sampler.h"
#include "engine/model/model.h"
#include "gpu/backend-vk.h"
#include "gpu/gpu-choose.h"
#include "tests/engine/model/model-helper.h"
#include "tests/engine/model/model-spec.h"
#include "tests/harness.h"

/* Teacher-forced near-tie rule: where the GPU's argmax differs from the
 * CPU's token, the GPU's own logit gap between its top token and the CPU's
 * must be below this (two correct implementations may pick either of two
 * near-tied tokens: another summation order). f32 weights: both sides sum
 * in f32; quantized: the CPU quantizes activations to the weights' 8-bit
 * block format (ggml's vec_dot), the GPU may not, which moves logits by
 * ~1e-2 (tests/peers/model-llamacpp.mjs measured the same floor against
 * llama.cpp). */
#define NEAR_TIE_F32 2e-3f
#define NEAR_TIE_QUANT 6e-2f
/* and every logit within this share of the row's largest magnitude */
#define LOGIT_TOL_F32 2e-3f
#define LOGIT_TOL_QUANT 6e-2f

static struct backend *gpu_backend(uint64_t piece_bytes, uint64_t kv_piece_bytes) {
    struct strata_error err = {0};
    struct backend_vk_params vp = backend_vk_params_default();
    vp.piece_bytes = piece_bytes;
    vp.kv_piece_bytes = kv_piece_bytes;
    struct backend *be = backend_vk_init(&vp, &err);
    ck_assert_msg(be != NULL, "backend_vk_init: %s", err.message);
    ck_assert_ptr_nonnull(backend_vk_info(be));
    return be;
}

/* n_lo > 0: be (the GPU) for layers [0, n_lo) and a CPU backend for the
 * rest (backend-split.h); else be itself. */
static struct backend *split_on(struct backend *be, int n_lo, int n_layer) {
    if (n_lo <= 0)
        return be;
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *cpu = backend_cpu_init(&cp, &err);
    ck_assert_msg(cpu != NULL, "%s", err.message);
    struct backend *sp = backend_split_init(be, cpu, n_lo, n_layer, &err);
    ck_assert_msg(sp != NULL, "%s", err.message);
    return sp;
}

static struct model *load_on(const char *path, struct backend *be, int n_ctx) {
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.n_ctx_max = n_ctx;
    mp.n_batch_max = 32;
    struct model *m = model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "model_load %s on %s: %s", path, be->ops->name, err.message);
    return m;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Parses "greedy ids from BOS: [a, b, ...]" (tests/engine/model's format). */
static int read_golden(const char *rel, int32_t *ids, int cap) {
    char path[1024];
    char *txt = test_read_file(test_shared_path(path, sizeof path, rel), NULL);
    ck_assert_msg(txt != NULL, "missing %s", path);
    char *p = strstr(txt, "greedy ids from BOS: [");
    ck_assert_msg(p != NULL, "%s: no id list", path);
    p = strchr(p, '[') + 1;
    int n = 0;
    while (n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
        if (*p == ']')
            break;
    }
    free(txt);
    return n;
}

/* A split ran each side's share of the weights' work: the GPU's n_lo of
 * n_layer layers at least half their proportional share of the matmul calls
 * (the CPU also runs the output head), and the CPU some. A split that bound
 * every layer's matrices on the CPU (names without their "blk.N." prefix
 * once did: the GPU ran attention only, 7B decode on the H200 no faster
 * than the CPU) fails here. */
static void check_placement(const struct backend *be, int n_lo, int n_layer) {
    uint64_t lo = 0, hi = 0;
    backend_split_counts(be, &lo, &hi);
    ck_assert_msg(lo > 0 && hi > 0 && 2 * lo * (uint64_t)(n_layer - n_lo) >= hi * (uint64_t)n_lo,
                  "split %d of %d layers: %llu matmul calls on the GPU, %llu on the CPU", n_lo,
                  n_layer, (unsigned long long)lo, (unsigned long long)hi);
}

#define N_GOLDEN 60

/* n_lo > 0: the first n_lo layers on the GPU, the rest on the CPU. */
static void golden_split(const char *model_rel, const char *golden_rel, uint64_t piece_bytes,
                         uint64_t kv_piece_bytes, int n_lo) {
    int32_t want[N_GOLDEN + 8];
    ck_assert_int_eq(read_golden(golden_rel, want, N_GOLDEN + 8), N_GOLDEN);
    char path[1024];
    test_shared_path(path, sizeof path, model_rel);
    struct model_probe pr;
    ck_assert_int_eq(model_probe(path, &pr, NULL), 0);
    struct backend *be = split_on(gpu_backend(piece_bytes, kv_piece_bytes), n_lo, pr.hp.n_layer);
    struct model *m = load_on(path, be, 256);
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    const int V = model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t tok = model_hparams(m)->bos_token_id;
    for (int i = 0; i < N_GOLDEN; i++) {
        struct model_batch_entry e = {.seq_id = 0, .pos = i, .token = tok, .want_logits = true};
        struct model_batch b = {.entries = &e, .n_entries = 1};
        ck_assert_msg(model_forward(m, kv, &b, logits, &err) == 0, "%s", err.message);
        tok = argmax(logits, V);
        ck_assert_msg(tok == want[i], "%s on the GPU: step %d: got %d want %d", model_rel, i, tok,
                      want[i]);
    }
    if (n_lo > 0)
        check_placement(be, n_lo, pr.hp.n_layer);
    if (n_lo > 0) { /* the hidden-state rows (embeddings) of a split: the CPU's */
        struct model_params mp = model_params_default();
        mp.n_ctx_max = 256;
        struct model *mc = test_model_load(path, &mp, &err);
        ck_assert_msg(mc != NULL, "%s", err.message);
        struct kv_cache *kc = model_kv_init(mc, 1, 0, &err), *kg = model_kv_init(m, 1, 0, &err);
        ck_assert(kc && kg);
        const int E = model_hparams(m)->n_embd;
        struct model_batch_entry e[4];
        for (int i = 0; i < 4; i++)
            e[i] = (struct model_batch_entry){0, i, (int32_t)(7 + 31 * i), i == 3};
        struct model_batch b = {e, 4};
        const int32_t rows[2] = {1, 3};
        float *hc = malloc(2 * (size_t)E * sizeof(float)), *hg = malloc(2 * (size_t)E * 4);
        ck_assert_int_eq(model_forward_hidden(mc, kc, &b, logits, rows, 2, hc, &err), 0);
        ck_assert_int_eq(model_forward_hidden(m, kg, &b, logits, rows, 2, hg, &err), 0);
        float scale = 0, diff = 0;
        for (int i = 0; i < 2 * E; i++) {
            scale = fabsf(hc[i]) > scale ? fabsf(hc[i]) : scale;
            diff = fabsf(hc[i] - hg[i]) > diff ? fabsf(hc[i] - hg[i]) : diff;
        }
        ck_assert_msg(scale > 0 && diff <= LOGIT_TOL_F32 * scale, "hidden rows differ by %g of %g",
                      (double)diff, (double)scale);
        free(hc), free(hg);
        kv_free(kc);
        kv_free(kg);
        test_model_free(mc);
    }
    free(logits);
    kv_free(kv);
    model_free(m);
    backend_free(be);
}

static void golden(const char *model_rel, const char *golden_rel, uint64_t piece_bytes,
                   uint64_t kv_piece_bytes) {
    golden_split(model_rel, golden_rel, piece_bytes, kv_piece_bytes, 0);
}

START_TEST(test_golden_stories260k) {
    golden("models/stories260K.gguf", "models/golden_stories260K_gguf_greedy.txt", 0, 0);
}
END_TEST

/* The same with every weight cut into pieces of at most 16 KiB (the
 * embedding and output into several bindings) and the KV pool into pieces
 * of one block (60 positions: 4 blocks of 16, VKOPS_KV_PIECES). */
START_TEST(test_golden_stories260k_pieces) {
    golden("models/stories260K.gguf", "models/golden_stories260K_gguf_greedy.txt", 16384, 1);
}
END_TEST

START_TEST(test_golden_llama2_tiny_random) {
    golden("models/llama-2-tiny-random.gguf", "models/golden_llama2_tiny_random_greedy.txt", 0, 0);
}
END_TEST

/* One side's step: n entries of (seq, pos, token), logits of all. */
static void step(struct model *m, struct kv_cache *kv, const struct model_batch_entry *e, int n,
                 float *logits) {
    struct strata_error err = {0};
    struct model_batch b = {(struct model_batch_entry *)e, n};
    ck_assert_msg(model_forward(m, kv, &b, logits, &err) == 0, "%s", err.message);
}

struct cmp_stats {
    int steps, mismatches;
    float max_gap, max_err;
};

/* Compares one logits row: the CPU's pick against the GPU's under the
 * near-tie rule, and every logit within tol of the row's scale. Returns the
 * CPU's pick (the teacher). */
static int compare_row(const float *lc, const float *lg, int V, float near_tie, float tol,
                       struct cmp_stats *st, const char *what, int at) {
    const int tc = argmax(lc, V), tg = argmax(lg, V);
    float scale = 0, err = 0;
    for (int i = 0; i < V; i++) {
        ck_assert_msg(isfinite(lg[i]), "%s step %d: logit %d is %g", what, at, i, lg[i]);
        scale = fabsf(lc[i]) > scale ? fabsf(lc[i]) : scale;
        err = fabsf(lc[i] - lg[i]) > err ? fabsf(lc[i] - lg[i]) : err;
    }
    err /= scale > 0 ? scale : 1;
    st->max_err = err > st->max_err ? err : st->max_err;
    ck_assert_msg(err <= tol, "%s step %d: logits differ by %.3g of their scale (tol %.3g)", what,
                  at, err, tol);
    st->steps++;
    if (tc != tg) {
        const float gap = lg[tg] - lg[tc];
        st->mismatches++;
        st->max_gap = gap > st->max_gap ? gap : st->max_gap;
        ck_assert_msg(gap < near_tie,
                      "%s step %d: the GPU picks %d, the CPU %d, %.4g apart on the GPU (near-tie "
                      "rule %.3g)",
                      what, at, tg, tc, gap, near_tie);
    }
    return tc;
}

/* A synthesized model on both backends, teacher-forced on the CPU's greedy
 * tokens: a 9-token prompt as one chunk (past the decode attention's
 * VKOPS_ATTN_DECODE_MAX = 8 tokens: the prefill kernel), then 12 decode steps
 * of three sequences in one batch (one of them one position behind). */
#define SPLIT_LAYERS 4

static void arch_vs_cpu_split(const char *which, uint64_t piece_bytes, int kv_piece_blocks,
                              int n_lo) {
    struct spec s = spec_of(which);
    if (n_lo > 0) /* a split: 4 layers (the tiny specs have 2), so N can be 1, 2 or 3 */
        s.n_layer = SPLIT_LAYERS;
    const struct kv_params kp = {.n_layer = s.n_layer,
                                 .n_embd_k = s.n_head_kv * s.head_dim,
                                 .n_embd_v = s.n_head_kv * s.head_dim,
                                 .n_block = 16};
    const uint64_t kv_piece_bytes = (uint64_t)kv_piece_blocks * kv_block_bytes(&kp);
    char path[256];
    tmp_path(path, sizeof path, which);
    write_model(path, &s);
    const bool quant = s.mat_type != QUANT_F32 && s.mat_type != QUANT_F16;
    const float near_tie = quant ? NEAR_TIE_QUANT : NEAR_TIE_F32;
    const float tol = quant ? LOGIT_TOL_QUANT : LOGIT_TOL_F32;

    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.n_ctx_max = 64;
    mp.n_batch_max = 32;
    struct model *mc = test_model_load(path, &mp, &err);
    ck_assert_msg(mc != NULL, "%s on the CPU: %s", which, err.message);
    struct backend *be = split_on(gpu_backend(piece_bytes, kv_piece_bytes), n_lo, s.n_layer);
    struct model *mg = load_on(path, be, 64);
    struct kv_cache *kc = model_kv_init(mc, 3, 0, &err);
    struct kv_cache *kg = model_kv_init(mg, 3, 0, &err);
    ck_assert_msg(kc && kg, "%s", err.message);
    const int V = model_n_vocab(mc);
    float *lc = malloc((size_t)16 * V * sizeof(float)),
          *lg = malloc((size_t)16 * V * sizeof(float));
    struct cmp_stats st = {0};
    char what[64];

    /* prefill: 9 prompt tokens of seq 0 in one step, every position's logits */
    struct model_batch_entry e[16];
    const int n_prompt = 9;
    for (int i = 0; i < n_prompt; i++)
        e[i] = (struct model_batch_entry){0, i, (int32_t)((i * 37 + 11) % V), true};
    step(mc, kc, e, n_prompt, lc);
    step(mg, kg, e, n_prompt, lg);
    snprintf(what, sizeof what, "%s prefill", which);
    int32_t next[3] = {0};
    for (int i = 0; i < n_prompt; i++)
        next[0] =
            compare_row(lc + (size_t)i * V, lg + (size_t)i * V, V, near_tie, tol, &st, what, i);
    /* seqs 1, 2 start from one token each; then all three decode together */
    next[1] = 5 % V;
    next[2] = 17 % V;
    int pos[3] = {n_prompt, 0, 0};
    snprintf(what, sizeof what, "%s batched decode", which);
    for (int t = 0; t < 12; t++) {
        int n = 0;
        for (int q = 0; q < 3; q++) {
            if (q == 2 && t == 0)
                continue; /* seq 2 joins a step later */
            e[n++] = (struct model_batch_entry){q, pos[q], next[q], true};
        }
        step(mc, kc, e, n, lc);
        step(mg, kg, e, n, lg);
        for (int i = 0; i < n; i++) {
            const int q = e[i].seq_id;
            next[q] =
                compare_row(lc + (size_t)i * V, lg + (size_t)i * V, V, near_tie, tol, &st, what, t);
            pos[q]++;
        }
    }
    /* a rewind: seq 1 goes back 3 positions and takes another token */
    ck_assert_int_eq(kv_seq_truncate(kc, 1, pos[1] - 3, &err), 0);
    ck_assert_int_eq(kv_seq_truncate(kg, 1, pos[1] - 3, &err), 0);
    e[0] = (struct model_batch_entry){1, pos[1] - 3, 3 % V, true};
    step(mc, kc, e, 1, lc);
    step(mg, kg, e, 1, lg);
    snprintf(what, sizeof what, "%s after a rewind", which);
    compare_row(lc, lg, V, near_tie, tol, &st, what, 0);
    /* a copy-on-write fork: seq 2 shares seq 0's prefix, then diverges */
    ck_assert_int_eq(kv_seq_copy(kc, 2, 0, 5, &err), 0);
    ck_assert_int_eq(kv_seq_copy(kg, 2, 0, 5, &err), 0);
    e[0] = (struct model_batch_entry){2, 5, 7 % V, true};
    step(mc, kc, e, 1, lc);
    step(mg, kg, e, 1, lg);
    snprintf(what, sizeof what, "%s after a fork", which);
    compare_row(lc, lg, V, near_tie, tol, &st, what, 0);
    printf("%s: %d rows, %d near-tie mismatches (largest gap %.3g), logit error %.3g of scale\n",
           which, st.steps, st.mismatches, st.max_gap, st.max_err);
    free(lc);
    free(lg);
    kv_free(kc);
    kv_free(kg);
    if (n_lo > 0)
        check_placement(be, n_lo, s.n_layer);
    model_free(mg);
    backend_free(be);
    test_model_free(mc);
    unlink(path);
}

static void arch_vs_cpu(const char *which, uint64_t piece_bytes, int kv_piece_blocks) {
    arch_vs_cpu_split(which, piece_bytes, kv_piece_blocks, 0);
}

START_TEST(test_llama) {
    arch_vs_cpu("llama", 0, 0);
}
END_TEST
START_TEST(test_llama_q8) {
    arch_vs_cpu("llama-q8", 0, 0);
}
END_TEST
START_TEST(test_llama_yarn) {
    arch_vs_cpu("llama-yarn", 0, 0);
}
END_TEST
START_TEST(test_qwen2) {
    arch_vs_cpu("qwen2", 0, 0);
}
END_TEST
START_TEST(test_qwen3) {
    arch_vs_cpu("qwen3", 0, 0);
}
END_TEST
START_TEST(test_qwen3moe) {
    arch_vs_cpu("qwen3moe", 0, 0);
}
END_TEST
START_TEST(test_qwen2moe) {
    arch_vs_cpu("qwen2moe", 0, 0);
}
END_TEST
START_TEST(test_mixtral) {
    arch_vs_cpu("mixtral", 0, 0);
}
END_TEST

/* Weights in pieces of at most 4 KiB (an expert stack: whole experts per
 * piece) and the KV pool in pieces of 3 blocks (its 12 blocks in
 * VKOPS_KV_PIECES bindings): every kernel reads across bindings. */
START_TEST(test_qwen3moe_pieces) {
    arch_vs_cpu("qwen3moe", 4096, 3);
}
END_TEST
START_TEST(test_llama_pieces) {
    arch_vs_cpu("llama", 4096, 3);
}
END_TEST

/* Split offload (backend-split.h): the first N layers on the GPU, the rest
 * on the CPU, at several N: stories260K's golden greedy ids, and the
 * synthesized models against the CPU backend (prefill chunk, batched
 * decode of three sequences, a rewind, a copy-on-write fork). */
START_TEST(test_split_golden_stories260k) {
    for (int n_lo = 1; n_lo < 5; n_lo += 2) /* of its 5 layers */
        golden_split("models/stories260K.gguf", "models/golden_stories260K_gguf_greedy.txt", 0, 0,
                     n_lo);
    golden_split("models/stories260K.gguf", "models/golden_stories260K_gguf_greedy.txt", 16384, 1,
                 4);
}
END_TEST
START_TEST(test_split_llama) {
    for (int n_lo = 1; n_lo < SPLIT_LAYERS; n_lo++)
        arch_vs_cpu_split("llama", 0, 0, n_lo);
    arch_vs_cpu_split("llama-q8", 0, 0, 2);
}
END_TEST
START_TEST(test_split_qwen3) {
    arch_vs_cpu_split("qwen3", 0, 0, 1);
    arch_vs_cpu_split("qwen3", 0, 0, SPLIT_LAYERS - 1);
}
END_TEST
START_TEST(test_split_qwen3moe) {
    arch_vs_cpu_split("qwen3moe", 0, 0, 1);
    arch_vs_cpu_split("qwen3moe", 0, 0, 2);
    arch_vs_cpu_split("qwen3moe", 4096, 3, SPLIT_LAYERS - 1); /* weights and KV in pieces */
}
END_TEST

/* Out of device memory at load (a budget below the weights, and one the
 * weights fit but not the forward tensors): model_load fails with
 * STRATA_E_NOMEM and says so, whole-model and split, never a crash; the
 * caller (run, serve: tests/gpu/server-gpu.mjs) then loads on the CPU. */
START_TEST(test_oom_at_load) {
    char path[1024];
    test_shared_path(path, sizeof path, "models/stories260K.gguf");
    const uint64_t budgets[] = {100000, 1250000};
    for (int split = 0; split < 2; split++)
        for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
            struct strata_error err = {0};
            struct backend_vk_params vp = backend_vk_params_default();
            vp.mem_budget = budgets[i] / (split ? 2 : 1);
            struct backend *be = backend_vk_init(&vp, &err);
            ck_assert_msg(be != NULL, "%s", err.message);
            be = split_on(be, split ? 2 : 0, 5);
            struct model_params mp = model_params_default();
            mp.backend = be;
            mp.n_ctx_max = 64;
            struct model *m = model_load(path, &mp, &err);
            ck_assert_msg(m == NULL, "budget %llu: loaded", (unsigned long long)vp.mem_budget);
            ck_assert_int_eq(err.code, STRATA_E_NOMEM);
            ck_assert_msg(strstr(err.message, "out of device memory") != NULL, "%s", err.message);
            backend_free(be);
        }
}
END_TEST

/* Sampling on the device (model_forward_sample): stories260K on the GPU,
 * three sequences decoding in one batch for 40 steps, each with its own
 * seed. The reference is the CPU sampler (sampler_sample) over the logits
 * the same GPU model gives on a second KV cache fed the same tokens, so
 * both see the same probabilities; the device draws with the u the
 * reference sampler's RNG stream gives (sampler_next_uniform on a twin
 * sampler of the same seed). Greedy must match exactly; for sampling the
 * device sums in f32 where sampler.c sums in double (gpu/vk-ops.h), so
 * only a u within ~1e-6 of a cumulative boundary could pick the
 * neighbour: none of these 120 draws per rule lands there, and the test
 * asserts every draw equal. */
START_TEST(test_device_sampling) {
    char path[1024];
    test_shared_path(path, sizeof path, "models/stories260K.gguf");
    struct backend *be = gpu_backend(0, 0);
    struct model *m = load_on(path, be, 128);
    ck_assert(model_can_sample(m));
    struct strata_error err = {0};
    const int V = model_n_vocab(m), NS = 3, STEPS = 20;
    const struct sampler_rule rules[] = {
        {0, 1.0f, 0.0f, 0.0f},    /* greedy */
        {40, 1.0f, 0.0f, 0.8f},   /* top_k */
        {50, 0.9f, 0.0f, 1.0f},   /* top_k + top_p */
        {256, 0.95f, 0.05f, 1.3f} /* the largest top_k, top_p, min_p */
    };
    float *logits = malloc((size_t)NS * V * sizeof(float));
    for (size_t ri = 0; ri < sizeof rules / sizeof rules[0]; ri++) {
        struct kv_cache *kr = model_kv_init(m, NS, 0, &err), *kd = model_kv_init(m, NS, 0, &err);
        ck_assert_msg(kr && kd, "%s", err.message);
        struct sampler *ref[3], *dev[3];
        struct sampler_params sp = sampler_params_default();
        sp.temperature = rules[ri].temperature;
        sp.top_k = rules[ri].top_k;
        sp.top_p = rules[ri].top_p;
        sp.min_p = rules[ri].min_p;
        sp.want_logprob = false;
        for (int q = 0; q < NS; q++) {
            sp.seed = 77 + 1000 * (uint64_t)q + ri;
            ref[q] = sampler_init(&sp, V, &err);
            dev[q] = sampler_init(&sp, V, &err);
            ck_assert(ref[q] && dev[q]);
            struct sampler_rule got;
            ck_assert_int_eq(sampler_device_rule(dev[q], 256, &got), 1);
        }
        int32_t tok[3] = {1, 1, 1};
        for (int t = 0; t < STEPS; t++) {
            struct model_batch_entry e[3];
            float u[3];
            for (int q = 0; q < NS; q++) {
                e[q] = (struct model_batch_entry){q, t, tok[q], true};
                u[q] = rules[ri].temperature > 0 ? (float)sampler_next_uniform(dev[q]) : 0;
            }
            struct model_batch b = {e, NS};
            ck_assert_msg(model_forward(m, kr, &b, logits, &err) == 0, "%s", err.message);
            int32_t ids[3];
            const struct model_sample rule = {rules[ri].top_k, rules[ri].top_p, rules[ri].min_p,
                                              rules[ri].temperature};
            ck_assert_msg(model_forward_sample(m, kd, &b, &rule, u, ids, &err) == 0, "%s",
                          err.message);
            for (int q = 0; q < NS; q++) {
                struct sampler_result r;
                ck_assert_int_eq(sampler_sample(ref[q], logits + (size_t)q * V, &r, &err), 0);
                ck_assert_msg(ids[q] == r.token,
                              "rule %zu step %d seq %d (u %.7f): device %d, sampler %d", ri, t, q,
                              (double)u[q], ids[q], r.token);
                tok[q] = r.token;
            }
        }
        for (int q = 0; q < NS; q++)
            sampler_free(ref[q]), sampler_free(dev[q]);
        kv_free(kr);
        kv_free(kd);
    }
    /* a rule the device does not take: unsupported, nothing advanced */
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    struct model_batch_entry e0 = {0, 0, 1, true};
    struct model_batch b0 = {&e0, 1};
    const struct model_sample all_vocab = {0, 1.0f, 0.0f, 0.7f};
    int32_t id0;
    float u0 = 0.5f;
    ck_assert_int_eq(model_forward_sample(m, kv, &b0, &all_vocab, &u0, &id0, &err),
                     STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(kv_seq_len(kv, 0), 0);
    kv_free(kv);
    model_free(m);
    backend_free(be);
    /* a split backend samples on the host (its logits come from the CPU) */
    be = split_on(gpu_backend(0, 0), 2, 5);
    m = load_on(path, be, 64);
    ck_assert(!model_can_sample(m));
    kv = model_kv_init(m, 1, 0, &err);
    const struct model_sample greedy = {0, 1.0f, 0.0f, 0.0f};
    ck_assert_int_eq(model_forward_sample(m, kv, &b0, &greedy, NULL, &id0, &err),
                     STRATA_E_UNSUPPORTED);
    kv_free(kv);
    model_free(m);
    backend_free(be);
    free(logits);
}
END_TEST

/* The fused forms of the backend's step (backend-vk-fuse.c): a model on a
 * backend with every fusion and on one with none gives the same logits
 * within float rounding (relative 1e-4 of a row's scale: the per-head norms
 * sum in another order), and each step records exactly the dispatches the
 * fusions save a layer: for up to 32 rows a llama 4 (the two residual adds
 * into the output and down matvecs, both ropes into the KV write), a qwen3
 * 6 (its q and k norms too) and a qwen3moe 6 (the attention's add, the MoE
 * sum's add, the ropes' 2, the q/k norms' 2: 19 dispatches a layer become
 * 13);
 * above 32 rows (the tiled matmul) only the ropes' 2, the q/k norms' 2 and
 * the MoE sum's add. */
static void check_fused(const char *which, int save1, int save_big) {
    struct spec s = spec_of(which);
    char path[256];
    tmp_path(path, sizeof path, which);
    write_model(path, &s);
    struct strata_error err = {0};
    struct backend_vk_params vp = backend_vk_params_default();
    ck_assert_uint_eq(vp.fuse, BACKEND_VK_FUSE_ALL);
    /* not dispatch fusions: test_q8 and test_tq8 compare them */
    vp.fuse &= ~(BACKEND_VK_FUSE_Q8 | BACKEND_VK_FUSE_TQ8);
    struct backend *bf = backend_vk_init(&vp, &err);
    vp.fuse = 0;
    struct backend *bu = backend_vk_init(&vp, &err);
    ck_assert_msg(bf && bu, "backend_vk_init: %s", err.message);
    struct model_params mp = model_params_default();
    mp.n_ctx_max = 64;
    mp.n_batch_max = 40;
    mp.backend = bf;
    struct model *mf = model_load(path, &mp, &err);
    mp.backend = bu;
    struct model *mu = model_load(path, &mp, &err);
    ck_assert_msg(mf && mu, "model_load: %s", err.message);
    struct kv_cache *kf = model_kv_init(mf, 3, 0, &err), *ku = model_kv_init(mu, 3, 0, &err);
    ck_assert_msg(kf && ku, "%s", err.message);
    const int V = model_n_vocab(mf);
    float *lf = malloc((size_t)40 * V * sizeof(float)),
          *lu = malloc((size_t)40 * V * sizeof(float));
    struct model_batch_entry e[40];
    /* steps: a 40-token prompt of seq 0 (tiled), one token of seq 1, then
     * three steps of 1, 3 and 2 tokens */
    static const int steps[][3] = {{40, 0, 0}, {1, 1, 0}, {1, 0, 40}, {3, 0, 41}, {2, 1, 1}};
    int pos[3] = {0, 0, 0};
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
        const int n = steps[st][0];
        for (int i = 0; i < n; i++) {
            const int q = n == 40 ? 0 : n == 3 ? i : n == 2 ? i + 1 : steps[st][1];
            e[i] =
                (struct model_batch_entry){q, pos[q]++, (int32_t)((7 * i + 3 * st + 1) % V), true};
        }
        const uint64_t f0 = backend_vk_dispatches(bf), u0 = backend_vk_dispatches(bu);
        step(mf, kf, e, n, lf);
        step(mu, ku, e, n, lu);
        const uint64_t df = backend_vk_dispatches(bf) - f0, du = backend_vk_dispatches(bu) - u0;
        const int save = (n > 32 ? save_big : save1) * s.n_layer;
        ck_assert_msg(du - df == (uint64_t)save,
                      "%s step of %d rows: %llu dispatches fused, %llu not (want %d fewer)", which,
                      n, (unsigned long long)df, (unsigned long long)du, save);
        for (int i = 0; i < n; i++) {
            const float *a = lf + (size_t)i * V, *b = lu + (size_t)i * V;
            float scale = 0, d = 0;
            for (int j = 0; j < V; j++) {
                scale = fmaxf(scale, fabsf(b[j]));
                d = fmaxf(d, fabsf(a[j] - b[j]));
            }
            ck_assert_msg(d <= 1e-4f * scale,
                          "%s step of %d rows, row %d: logits %.3g apart (%.3g)", which, n, i, d,
                          scale);
        }
        printf("%s: a %d-row step, %llu dispatches fused, %llu not\n", which, n,
               (unsigned long long)df, (unsigned long long)du);
    }
    free(lf);
    free(lu);
    kv_free(kf);
    kv_free(ku);
    model_free(mf);
    model_free(mu);
    backend_free(bf);
    backend_free(bu);
    unlink(path);
}

START_TEST(test_fusions) {
    check_fused("llama", 4, 2);
    check_fused("qwen3", 6, 4);
    check_fused("qwen3moe", 6, 5);
}
END_TEST

/* q8 activations (BACKEND_VK_FUSE_Q8): a one-token step's norms write a q8
 * copy that the q/k/v, gate + up and routed experts' matvecs read
 * (mv_dot.comp), so the logits move by the activations' q8 rounding only:
 * NMSE of each row against the same fusions without it below
 * MODEL_Q8_NMSE, and its greedy pick the same unless the two best logits
 * lie within twice the largest difference of the row (a near-tie). Steps
 * of several rows do not use it but read the KV the one-token steps wrote,
 * so they are held to the same rule. The dispatches a step records do not
 * change (the norm writes its copy in its own dispatch), and some one-token
 * logits must move (the path ran). */
#define MODEL_Q8_NMSE 1e-3
/* One synthesized model on two backends: the fusions `base` less `bits`
 * (f) and with them (q), both on the prefill path mm_path (NULL: auto),
 * each with a model of up to 40-token steps, a cache of n_seq sequences
 * and 40 rows of logits. mat_type QUANT_F32 keeps the spec's matrices. */
struct vk_pair {
    char path[256];
    struct spec s;
    struct backend *bf, *bq;
    struct model *mf, *mq;
    struct kv_cache *kf, *kq;
    int V;
    float *lf, *lq;
};

static void pair_open(struct vk_pair *p, const char *which, enum quant_type mat_type,
                      const char *mm_path, unsigned base, unsigned bits, int n_seq) {
    p->s = spec_of(which);
    if (mat_type != QUANT_F32)
        p->s.mat_type = mat_type;
    tmp_path(p->path, sizeof p->path, which);
    write_model(p->path, &p->s);
    struct strata_error err = {0};
    struct backend_vk_params vp = backend_vk_params_default();
    vp.mm_path = mm_path;
    vp.fuse = base & ~bits;
    p->bf = backend_vk_init(&vp, &err);
    vp.fuse |= bits;
    p->bq = backend_vk_init(&vp, &err);
    ck_assert_msg(p->bf && p->bq, "backend_vk_init: %s", err.message);
    struct model_params mp = model_params_default();
    mp.n_ctx_max = 64;
    mp.n_batch_max = 40;
    mp.backend = p->bf;
    p->mf = model_load(p->path, &mp, &err);
    mp.backend = p->bq;
    p->mq = model_load(p->path, &mp, &err);
    ck_assert_msg(p->mf && p->mq, "model_load: %s", err.message);
    p->kf = model_kv_init(p->mf, n_seq, 0, &err);
    p->kq = model_kv_init(p->mq, n_seq, 0, &err);
    ck_assert_msg(p->kf && p->kq, "%s", err.message);
    p->V = model_n_vocab(p->mf);
    p->lf = malloc((size_t)40 * p->V * sizeof(float));
    p->lq = malloc((size_t)40 * p->V * sizeof(float));
    ck_assert(p->lf && p->lq);
}

static void pair_close(struct vk_pair *p) {
    free(p->lf);
    free(p->lq);
    kv_free(p->kf);
    kv_free(p->kq);
    model_free(p->mf);
    model_free(p->mq);
    backend_free(p->bf);
    backend_free(p->bq);
    unlink(p->path);
}

/* check_with(which, type, base, bits, NMSE, save, less): the model on a
 * backend with the fusions `base` less `bits` (bf) against one with them
 * (bq), as above, each row's logits within NMSE (0: the same bits); a
 * one-token step of the second records save * n_layer - less dispatches
 * fewer (with FUSE_ATTN in bits, so does the step of one token in each of
 * two sequences), other steps as many. For q8 (save 0) some one-token logits must
 * move. */
static void check_with(const char *which, enum quant_type mat_type, unsigned base, unsigned bits,
                       double nmse, int save, int less) {
    struct vk_pair pr;
    pair_open(&pr, which, mat_type, NULL, base, bits, 2);
    const struct spec s = pr.s;
    struct backend *bf = pr.bf, *bq = pr.bq;
    struct model *mf = pr.mf, *mq = pr.mq;
    struct kv_cache *kf = pr.kf, *kq = pr.kq;
    const int V = pr.V;
    float *lf = pr.lf, *lq = pr.lq;
    struct model_batch_entry e[40];
    /* (tokens, sequence: 0, 1, or 2 for both in turns) */
    static const int steps[][2] = {{20, 0}, {1, 0}, {1, 1}, {3, 2}, {1, 0}, {2, 2}, {1, 0}};
    int pos[2] = {0, 0};
    double worst = 0;
    bool moved = false;
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
        const int n = steps[st][0];
        for (int i = 0; i < n; i++) {
            const int q = steps[st][1] == 2 ? i % 2 : steps[st][1];
            e[i] =
                (struct model_batch_entry){q, pos[q]++, (int32_t)((11 * i + 5 * st + 3) % V), true};
        }
        const uint64_t f0 = backend_vk_dispatches(bf), q0 = backend_vk_dispatches(bq);
        step(mf, kf, e, n, lf);
        step(mq, kq, e, n, lq);
        /* FUSE_MQ8 changes the steps of 2-32 rows only, and adds the q8
         * copies of inputs no norm or attention wrote: counted there */
        const bool mq8 = (bits & BACKEND_VK_FUSE_MQ8) && n > 1;
        /* FUSE_ATTN's form runs wherever each sequence has one token */
        const bool one_each = n == 1 || (n == 2 && steps[st][1] == 2);
        const int64_t fewer =
            n == 1 || (one_each && (bits & BACKEND_VK_FUSE_ATTN)) ? save * s.n_layer - less : 0;
        ck_assert_msg(mq8 || (int64_t)(backend_vk_dispatches(bf) - f0) -
                                     (int64_t)(backend_vk_dispatches(bq) - q0) ==
                                 fewer,
                      "%s step %zu: %llu dispatches with, %llu without (want %lld fewer)", which,
                      st, (unsigned long long)(backend_vk_dispatches(bq) - q0),
                      (unsigned long long)(backend_vk_dispatches(bf) - f0), (long long)fewer);
        for (int row = 0; row < n; row++) {
            const float *lf_r = lf + (size_t)row * V, *lq_r = lq + (size_t)row * V;
            double es = 0, ss = 0, dmax = 0;
            int af = 0, aq = 0, a2 = -1;
            for (int j = 0; j < V; j++) {
                const double d = (double)lq_r[j] - lf_r[j];
                es += d * d;
                ss += (double)lf_r[j] * lf_r[j];
                dmax = fmax(dmax, fabs(d));
                if (lf_r[j] > lf_r[af])
                    af = j;
                if (lq_r[j] > lq_r[aq])
                    aq = j;
            }
            for (int j = 0; j < V; j++)
                if (j != af && (a2 < 0 || lf_r[j] > lf_r[a2]))
                    a2 = j;
            const double e1 = ss > 0 ? es / ss : es;
            worst = fmax(worst, e1);
            moved = moved || ((bits & BACKEND_VK_FUSE_MQ8 ? n > 1 : n == 1) && es > 0);
            ck_assert_msg(nmse > 0 ? e1 < nmse : es == 0,
                          "%s step %zu row %d: logits NMSE %.3g with fuse bits %u", which, st, row,
                          e1, bits);
            ck_assert_msg(af == aq || lf_r[af] - lf_r[a2] < 2 * dmax,
                          "%s step %zu: greedy %d with fuse bits %u, %d without (gap %.3g, diff "
                          "%.3g)",
                          which, st, aq, bits, af, lf_r[af] - lf_r[a2], dmax);
        }
    }
    ck_assert_msg(moved || save, "%s: no logits moved: the q8 path did not run", which);
    printf("%s: fuse bits %u, worst logits NMSE %.2g\n", which, bits, worst);
    fflush(stdout);
    pair_close(&pr);
}

START_TEST(test_q8) {
    check_with("llama-q8", QUANT_F32, BACKEND_VK_FUSE_ALL & ~BACKEND_VK_FUSE_MULTI,
               BACKEND_VK_FUSE_Q8, MODEL_Q8_NMSE, 0, 0);
    check_with("llama", QUANT_Q4_0, BACKEND_VK_FUSE_ALL & ~BACKEND_VK_FUSE_MULTI,
               BACKEND_VK_FUSE_Q8, MODEL_Q8_NMSE, 0, 0);
    check_with("qwen3moe", QUANT_F32, BACKEND_VK_FUSE_ALL & ~BACKEND_VK_FUSE_MULTI,
               BACKEND_VK_FUSE_Q8, MODEL_Q8_NMSE, 0, 0);
    /* heads of 32 values: attention writes o's q8 copy too */
    check_with("qwen3", QUANT_Q4_0, BACKEND_VK_FUSE_ALL & ~BACKEND_VK_FUSE_MULTI,
               BACKEND_VK_FUSE_Q8, MODEL_Q8_NMSE, 0, 0);
}
END_TEST

/* The norm after the output and down projections' residual adds in their
 * matvec's last workgroup (BACKEND_VK_FUSE_NORM, vkmm_matmul_acc_norm): the
 * same q8 path with the norm's sum of squares in another order, so the
 * logits agree to 1e-6 NMSE (a q8 level may flip on a last-bit tie), and a
 * one-token step records two dispatches a layer fewer (a llama; one fewer
 * in all: the final norm runs in place), a qwen3moe one (its FFN ends in
 * the MoE sum, not a matvec). Opt-in and slower on an H100, so two models
 * (a qwen3 row, F32, was taken out for CI time). */
START_TEST(test_norm_tail) {
    check_with("llama", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_NORM, 1e-6, 2, 1);
    check_with("qwen3moe", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_NORM, 1e-6, 1, 0);
}
END_TEST

/* The matvecs whose x no norm quantized (o and down with their residual
 * adds, the output; the routed experts' down) on integer dot products over
 * x quantized in the lanes (BACKEND_VK_FUSE_XQ, vkmm_matmul_xq), against
 * the default fusions: the q8 rounding of those inputs only, as test_q8's
 * (MODEL_Q8_NMSE, the near-tie rule), no dispatch more or fewer; a llama
 * (o, down, output) and a qwen3moe (the experts' down). And the down
 * projection over a q8 copy of its own (BACKEND_VK_FUSE_QD). */
START_TEST(test_xq) {
    /* the down projection's x quantized by a dispatch of its own
     * (BACKEND_VK_FUSE_QD): one dispatch more a layer where attention
     * wrote o's copy (qwen3's heads of 32; llama's heads of 16 would make
     * it two: o needs one too); the q8 rounding */
    check_with("qwen3", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_QD, MODEL_Q8_NMSE, -1, 0);
    check_with("llama", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_XQ, MODEL_Q8_NMSE, 0, 0);
    check_with("qwen3moe", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_XQ, MODEL_Q8_NMSE, 0,
               0);
}
END_TEST

/* The decode attention that norms and ropes q and writes the new K and V
 * row itself (BACKEND_VK_FUSE_ATTN, op_attn_rope.comp) against FUSE_ROPE's
 * dispatch before it: the same bits, one dispatch a layer fewer in a
 * one-token step; the 3-token step (two of one sequence) and the prefill
 * keep the unfused form. A qwen3moe (q and k norms, neox halves; the
 * backend's wiring is the same for every architecture, and test-vk-ops'
 * test_attention_rope holds the kernel to the bit on llama's adjacent
 * pairs and YaRN too). */
START_TEST(test_attn_rope) {
    check_with("qwen3moe", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_ATTN, 0, 1, 0);
}
END_TEST

/* The steps of 2 to 32 rows on the integer-dot matvec's passes over q8
 * rows (BACKEND_VK_FUSE_MQ8): the 20-token prefill, the 3-token step (two
 * of one sequence: o's input quantized by a dispatch) and the 2-token
 * decode step (attention writes o's q8 rows); the q8 rounding only
 * (MODEL_Q8_NMSE, the near-tie rule), one-token steps unchanged. A llama
 * and a qwen3moe (its routed experts of 2 and 3 tokens on the
 * expert-indexed form). */
START_TEST(test_mq8) {
    check_with("llama", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_MQ8, MODEL_Q8_NMSE, 0, 0);
    check_with("qwen3moe", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_MQ8, MODEL_Q8_NMSE, 0,
               0);
}
END_TEST

/* Attention writes the o projection's q8 copy where heads are a multiple
 * of 32 values (qwen3's spec: 32): a one-token step of the default
 * fusions runs o as q4_0.mvq8.acc (the integer-dot matvec over those
 * blocks, with the residual add), which no other path of these fusions
 * names (FUSE_XQ's would be mvxq.acc, the f32 path's mv1.acc); test_q8's
 * qwen3 row holds the logits. Skipped, saying so, on a device without
 * timestamps or integer dot products. */
START_TEST(test_attn_q8) {
    struct vk_pair pr;
    pair_open(&pr, "qwen3", QUANT_Q4_0, NULL, BACKEND_VK_FUSE_ALL, 0, 1);
    const struct vk_dev_info *in = backend_vk_info(pr.bq);
    if (in->timestamp_period_ns <= 0 || !in->int_dot) {
        printf("vk-model attn q8: %s has no timestamps or integer dot products: skipped\n",
               in->name);
        pair_close(&pr);
        return;
    }
    struct model_batch_entry e[3];
    for (int i = 0; i < 3; i++)
        e[i] = (struct model_batch_entry){0, i, (int32_t)((7 * i + 3) % pr.V), true};
    step(pr.mq, pr.kq, e, 3, pr.lq);
    backend_vk_profile_enable(pr.bq, true);
    e[0] = (struct model_batch_entry){0, 3, 5, true};
    step(pr.mq, pr.kq, e, 1, pr.lq);
    char *rep = NULL;
    size_t rep_n = 0;
    FILE *mf = open_memstream(&rep, &rep_n);
    backend_vk_profile_report(pr.bq, mf);
    fclose(mf);
    ck_assert_msg(strstr(rep, "q4_0.mvq8.acc") != NULL, "o did not run on attention's q8:\n%s",
                  rep);
    free(rep);
    pair_close(&pr);
}
END_TEST

/* One dispatch for the one-token matvecs over one x (BACKEND_VK_FUSE_MULTI,
 * vkmm_matmul_multi) against one each: the same logits bit for bit (every
 * row is the single dispatch's arithmetic) and two dispatches a layer fewer
 * in a one-token step (q, k and v; their matrices lie in one buffer with
 * gaps where k's bytes are not a multiple of the arena's alignment), on the
 * norm's q8 copy (a llama, a qwen3 with q/k norms; a qwen3moe's attention
 * is the same calls) and on x quantized in the lanes (FUSE_XQ without
 * FUSE_Q8). */
START_TEST(test_multi) {
    check_with("llama", QUANT_Q4_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_MULTI, 0, 2, 0);
    check_with("qwen3", QUANT_Q8_0, BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_MULTI, 0, 2, 0);
    check_with("llama", QUANT_Q4_0,
               (BACKEND_VK_FUSE_ALL | BACKEND_VK_FUSE_XQ) & ~BACKEND_VK_FUSE_Q8,
               BACKEND_VK_FUSE_MULTI, 0, 2, 0);
}
END_TEST

/* A prefill on the integer-dot tiles over q8 activations quantized once a
 * call (BACKEND_VK_FUSE_TQ8, vkmm_matmul_tq8) against the same tiles
 * quantizing their own copy (the default): the same levels, so the logits
 * agree to float rounding (1e-10 NMSE each row; a level off would be
 * ~1e-7), and a 40-token step records one more dispatch a layer for each
 * matmul whose input no norm wrote (o and down of a llama: 2; o of a
 * qwen3moe, whose experts keep their own tiles: 1) and one for the output
 * matrix (its norm runs in place, so it writes no copy), which is also what
 * shows the path ran. Skipped, saying so, where the device has no integer
 * dot product. */
static void check_tq8(const char *which, enum quant_type mat_type, int more) {
    struct vk_pair pr;
    pair_open(&pr, which, mat_type, "int-dot", BACKEND_VK_FUSE_ALL, BACKEND_VK_FUSE_TQ8, 1);
    const int V = pr.V;
    float *lf = pr.lf, *lq = pr.lq;
    struct model_batch_entry e[40];
    for (int i = 0; i < 40; i++)
        e[i] = (struct model_batch_entry){0, i, (int32_t)((7 * i + 3) % V), true};
    const uint64_t f0 = backend_vk_dispatches(pr.bf), q0 = backend_vk_dispatches(pr.bq);
    step(pr.mf, pr.kf, e, 40, lf);
    step(pr.mq, pr.kq, e, 40, lq);
    const int64_t extra =
        (int64_t)(backend_vk_dispatches(pr.bq) - q0) - (int64_t)(backend_vk_dispatches(pr.bf) - f0);
    double worst = 0;
    for (int row = 0; row < 40; row++) {
        double es = 0, ss = 0;
        for (int j = 0; j < V; j++) {
            const double d = (double)lq[(size_t)row * V + j] - lf[(size_t)row * V + j];
            es += d * d;
            ss += (double)lf[(size_t)row * V + j] * lf[(size_t)row * V + j];
        }
        worst = fmax(worst, ss > 0 ? es / ss : es);
    }
    ck_assert_msg(worst < 1e-10, "%s: prefill logits NMSE %.3g with q8 x", which, worst);
    ck_assert_msg(extra == (int64_t)more * pr.s.n_layer + 1,
                  "%s: %lld dispatches more with q8 x (want %d a layer of %d, and 1)", which,
                  (long long)extra, more, pr.s.n_layer);
    printf("%s: q8-x tiles, worst logits NMSE %.2g, %lld dispatches more\n", which, worst,
           (long long)extra);
    fflush(stdout);
    pair_close(&pr);
}

START_TEST(test_tq8) {
    struct strata_error err = {0};
    struct vk_dev *d = NULL;
    ck_assert_int_eq(vk_dev_open(-1, &d, &err), 0);
    const bool dot = vk_dev_info(d)->int_dot;
    vk_dev_close(d);
    if (!dot) {
        printf("vk-model: no integer dot product: the q8-x tiles skipped\n");
        return;
    }
    check_tq8("llama", QUANT_Q4_0, 2);
    check_tq8("qwen3moe", QUANT_Q4_0, 2); /* o, and the experts' down */
}
END_TEST

/* The backend's step: a write, an op and a read; a read lands only at the
 * wait; two submits in one step; a begin drops what was not submitted;
 * errors of bad use are reported at submit. */
START_TEST(test_step_semantics) {
    struct backend *be = gpu_backend(0, 0);
    const struct backend_ops *o = be->ops;
    void *c = be->ctx;
    struct strata_error err = {0};
    struct backend_tensor *a = o->tensor_alloc(c, BACKEND_F32, 4, 8, &err);
    struct backend_tensor *b = o->tensor_alloc(c, BACKEND_F32, 4, 8, &err);
    ck_assert(a && b);
    float ha[32], hb[32], out[32], out2[32];
    for (int i = 0; i < 32; i++)
        ha[i] = (float)i, hb[i] = 0.5f * (float)i;
    const struct backend_step st = {.n_tok = 4, .n_kv_max = 1};
    ck_assert_int_eq(o->begin(c, &st, &err), 0);
    o->tensor_write(c, a, 0, ha, 4);
    o->tensor_write(c, b, 1, hb + 8, 2); /* rows 1, 2 only */
    o->add(c, a, b, 4, 8);
    memset(out, 0, sizeof out);
    o->tensor_read(c, a, 0, out, 4);
    ck_assert_int_eq(o->submit(c, &err), 0);
    ck_assert_int_eq(o->wait(c, &err), 0);
    for (int i = 0; i < 32; i++) {
        const float want = ha[i] + (i >= 8 && i < 24 ? hb[i] : 0.0f);
        ck_assert_msg(out[i] == want, "out[%d] = %g, want %g", i, out[i], want);
    }
    /* two submits in one step: the second part sees the first's writes */
    ck_assert_int_eq(o->begin(c, &st, &err), 0);
    o->add(c, a, a, 4, 8); /* a = 2a */
    memset(out2, 0, sizeof out2);
    o->tensor_read(c, a, 0, out2, 4);
    ck_assert_int_eq(o->submit(c, &err), 0);
    ck_assert_int_eq(o->wait(c, &err), 0);
    for (int i = 0; i < 32; i++)
        ck_assert(out2[i] == 2 * out[i]);
    o->add(c, a, a, 4, 8); /* 4 a */
    o->tensor_read(c, a, 0, out2, 1);
    ck_assert_int_eq(o->submit(c, &err), 0);
    ck_assert_int_eq(o->wait(c, &err), 0);
    for (int i = 0; i < 8; i++)
        ck_assert(out2[i] == 4 * out[i]);
    /* a begin drops the unsubmitted recording (and its read) */
    o->add(c, a, a, 4, 8);
    float untouched[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    o->tensor_read(c, a, 0, untouched, 1);
    ck_assert_int_eq(o->begin(c, &st, &err), 0);
    o->tensor_read(c, a, 0, out2, 1);
    ck_assert_int_eq(o->submit(c, &err), 0);
    ck_assert_int_eq(o->wait(c, &err), 0);
    for (int i = 0; i < 8; i++) {
        ck_assert(out2[i] == 4 * out[i]);
        ck_assert(untouched[i] == -1);
    }
    /* a KV cache of another backend's store is refused at begin */
    struct kv_params kp = {.n_layer = 1, .n_seq_max = 1, .n_ctx = 16, .n_embd_k = 8, .n_embd_v = 8};
    struct kv_cache *host_kv = kv_init(&kp, &err);
    ck_assert_ptr_nonnull(host_kv);
    int32_t seq = 0, pos = 0;
    const struct backend_step st2 = {1, 1, host_kv, &seq, &pos};
    ck_assert_int_eq(o->begin(c, &st2, &err), STRATA_E_INVALID);
    ck_assert(strstr(err.message, "host") != NULL);
    kv_free(host_kv);
    ck_assert_uint_gt(backend_vk_device_bytes(be), 0);
    o->tensor_free(c, a);
    o->tensor_free(c, b);
    backend_free(be);
}
END_TEST

/* Weight binding: a type the kernels do not take is refused with its name;
 * tied bytes are uploaded once. */
START_TEST(test_bind) {
    struct backend *be = gpu_backend(0, 0);
    const struct backend_ops *o = be->ops;
    struct strata_error err = {0};
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i;
    struct backend_weight_desc d[3] = {
        {.name = "m",
         .host = {v, QUANT_F32, 2, 32, 128, BACKEND_LAYOUT_ROWS},
         .use = BACKEND_USE_MATMUL},
        {.name = "m-again",
         .host = {v, QUANT_F32, 2, 32, 128, BACKEND_LAYOUT_ROWS},
         .use = BACKEND_USE_ROWS},
        {.name = "vec",
         .host = {v, QUANT_F32, 1, 64, 256, BACKEND_LAYOUT_ROWS},
         .use = BACKEND_USE_VEC},
    };
    struct backend_weight *h[3];
    struct backend_bind_info info;
    struct backend_weights *set = o->weights_bind(be->ctx, d, 3, NULL, h, &info, &err);
    ck_assert_msg(set != NULL, "%s", err.message);
    ck_assert_uint_eq(info.copied_bytes, 256 + 256); /* the tied matrix once */
    o->weights_free(be->ctx, set);
    /* a VEC of f16 is not a type the backend takes */
    d[2].host.type = QUANT_F16;
    d[2].host.row_bytes = 128;
    ck_assert_ptr_null(o->weights_bind(be->ctx, d, 3, NULL, h, NULL, &err));
    ck_assert_int_eq(err.code, STRATA_E_UNSUPPORTED);
    ck_assert(strstr(err.message, "vec") != NULL);
    backend_free(be);
}
END_TEST

/* --gpu / --gpu-layers (gpu/gpu-choose.h) on the devices present. */
START_TEST(test_choose) {
    struct strata_error err = {0};
    struct gpu_choice ch;
    struct gpu_choice_in in = {.gpu = "off", .model_bytes = 1 << 20, .n_layer = 4};
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_ptr_null(ch.be);
    ck_assert(strstr(ch.rule, "--gpu off") != NULL);
    in.gpu = "0";
    in.gpu_layers = "0";
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_ptr_null(ch.be);
    ck_assert(strstr(ch.rule, "--gpu-layers 0") != NULL);
    in.gpu_layers = "3"; /* fewer than the 4 layers: the device, 3 layers on it */
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_msg(ch.be != NULL, "%s", ch.rule);
    ck_assert_int_eq(ch.n_layer_gpu, 3);
    ck_assert_msg(strstr(ch.rule, "layers 0-2 of 4 on the GPU") != NULL, "%s", ch.rule);
    struct backend_cpu_params cpp = backend_cpu_params_default();
    ck_assert_int_eq(gpu_choice_split(&ch, 4, backend_cpu_init(&cpp, &err), &err), 0);
    ck_assert_str_eq(ch.be->ops->name, "split");
    ck_assert_str_eq(gpu_choice_vk(&ch)->ops->name, "vulkan");
    backend_free(ch.be);
    /* auto: all when the weights fit, else the layers that do (of 256 KiB
     * each here: 0.9 * 600000 / 262144 - 1 = 1.06 -> 1), none: the CPU */
    ck_assert_int_eq(gpu_auto_layers(1 << 20, 4, 600000), 1);
    ck_assert_int_eq(gpu_auto_layers(1 << 20, 4, 1 << 30), 4);
    ck_assert_int_eq(gpu_auto_layers(1 << 20, 4, 200000), 0);
    in.gpu_layers = "auto";
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_msg(ch.be && ch.n_layer_gpu == 4 && strstr(ch.rule, "all 4 layers"), "%s", ch.rule);
    backend_free(ch.be);
    in.mem_budget = 600000;
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_msg(ch.be && ch.n_layer_gpu == 1 && strstr(ch.rule, "layers 0-0 of 4"), "%s",
                  ch.rule);
    backend_free(ch.be);
    in.mem_budget = 200000;
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_msg(!ch.be && strstr(ch.rule, "not one layer"), "%s", ch.rule);
    in.mem_budget = 0;
    in.gpu_layers = "4";
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_msg(ch.be != NULL, "%s", ch.rule);
    ck_assert_int_eq(ch.n_layer_gpu, 4);
    ck_assert_msg(strstr(ch.rule, "device 0 ") == ch.rule && strstr(ch.rule, "all 4 layers"), "%s",
                  ch.rule);
    ck_assert_str_eq(ch.be->ops->name, "vulkan");
    backend_free(ch.be);
    in.gpu_layers = "all";
    in.gpu = "99"; /* no such device: a line and the CPU, not an error */
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    ck_assert_ptr_null(ch.be);
    ck_assert_msg(strstr(ch.rule, "no device 99") != NULL, "%s", ch.rule);
    in.gpu = "auto"; /* never a CPU implementation; else the best device */
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
    struct vk_dev *d = NULL;
    ck_assert_int_eq(vk_dev_open(-1, &d, &err), 0);
    const bool best_is_cpu = vk_dev_info(d)->cpu;
    vk_dev_close(d);
    if (best_is_cpu) {
        ck_assert_ptr_null(ch.be);
        ck_assert_msg(strstr(ch.rule, "CPU implementation") != NULL, "%s", ch.rule);
    } else {
        ck_assert_msg(ch.be != NULL, "%s", ch.rule);
        backend_free(ch.be);
        in.model_bytes = 1ull << 50; /* a model no device holds */
        ck_assert_int_eq(gpu_choose(&in, &ch, &err), 0);
        ck_assert_ptr_null(ch.be);
        ck_assert_msg(strstr(ch.rule, "do not fit") != NULL, "%s", ch.rule);
    }
    in.gpu = "gpu1"; /* not a form it takes: a configuration error */
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), STRATA_E_CONFIG);
    in.gpu = "0";
    in.gpu_layers = "half";
    ck_assert_int_eq(gpu_choose(&in, &ch, &err), STRATA_E_CONFIG);
    ck_assert(strstr(err.message, "--gpu-layers half") != NULL);
}
END_TEST

static Suite *vk_model_suite(void) {
    Suite *s = suite_create("vk-model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_step_semantics);
    tcase_add_test(tc, test_bind);
    tcase_add_test(tc, test_choose);
    tcase_add_test(tc, test_golden_stories260k);
    tcase_add_test(tc, test_golden_stories260k_pieces);
    tcase_add_test(tc, test_split_golden_stories260k);
    tcase_add_test(tc, test_split_llama);
    tcase_add_test(tc, test_split_qwen3);
    tcase_add_test(tc, test_split_qwen3moe);
    tcase_add_test(tc, test_oom_at_load);
    tcase_add_test(tc, test_device_sampling);
    tcase_add_test(tc, test_fusions);
    tcase_add_test(tc, test_q8);
    tcase_add_test(tc, test_norm_tail);
    tcase_add_test(tc, test_xq);
    tcase_add_test(tc, test_multi);
    tcase_add_test(tc, test_attn_q8);
    tcase_add_test(tc, test_attn_rope);
    tcase_add_test(tc, test_mq8);
    tcase_add_test(tc, test_tq8);
    tcase_add_test(tc, test_golden_llama2_tiny_random);
    tcase_add_test(tc, test_llama);
    tcase_add_test(tc, test_llama_q8);
    tcase_add_test(tc, test_llama_yarn);
    tcase_add_test(tc, test_qwen2);
    tcase_add_test(tc, test_qwen3);
    tcase_add_test(tc, test_qwen3moe);
    tcase_add_test(tc, test_qwen2moe);
    tcase_add_test(tc, test_mixtral);
    tcase_add_test(tc, test_qwen3moe_pieces);
    tcase_add_test(tc, test_llama_pieces);
    suite_add_tcase(s, tc);
    return s;
}

/* Exit 77 (skipped) only when no Vulkan device exists at all. */
int main(void) {
    if (vk_dev_count() == 0) {
        printf("RESULT vk-model: no Vulkan device: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(vk_model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int n_run = srunner_ntests_run(sr), n_fail = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("RESULT vk-model: %d passed, %d failed\n", n_run - n_fail, n_fail);
    return n_fail ? 1 : 0;
}
