/* tools/synth/synth.c: presets, the tensor plan of each arch, weight generation
 * (see synth.h for the initialisation and route-skew rules). */
#include "tools/synth/synth-impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "engine/quant/quant.h"

/* ---- presets --------------------------------------------------------------
 * Geometries from the models' Hugging Face config.json files. */
struct preset {
    const char *name, *arch, *doc;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int64_t n_expert, n_expert_used, n_ff_exp, n_ctx;
    float rope_base, rms_eps;
    bool tied;
};

static const struct preset presets[] = {
    {"tiny", "llama", "stories260K-like llama: 64 x 5 layers, 8/4 heads, ff 172, vocab 512", 64, 5,
     8, 4, 0, 172, 512, 0, 0, 0, 2048, 10000.0f, 1e-5f, false},
    {"stories15m", "llama", "TinyStories 15M llama: 288 x 6, 6 heads, ff 768, vocab 32000", 288, 6,
     6, 6, 0, 768, 32000, 0, 0, 0, 2048, 10000.0f, 1e-5f, false},
    {"qwen2.5-0.5b", "qwen2", "Qwen2.5-0.5B: 896 x 24, 14/2 heads, ff 4864, QKV bias, tied", 896,
     24, 14, 2, 64, 4864, 151936, 0, 0, 0, 32768, 1000000.0f, 1e-6f, true},
    {"qwen3-0.6b", "qwen3", "Qwen3-0.6B: 1024 x 28, 16/8 heads of 128, ff 3072, tied", 1024, 28, 16,
     8, 128, 3072, 151936, 0, 0, 0, 40960, 1000000.0f, 1e-6f, true},
    {"llama-3.2-1b", "llama", "Llama-3.2-1B: 2048 x 16, 32/8 heads, ff 8192, vocab 128256, tied",
     2048, 16, 32, 8, 0, 8192, 128256, 0, 0, 0, 131072, 500000.0f, 1e-5f, true},
    {"llama-2-7b", "llama", "Llama-2-7B: 4096 x 32, 32/32 heads, ff 11008, vocab 32000", 4096, 32,
     32, 32, 0, 11008, 32000, 0, 0, 0, 4096, 10000.0f, 1e-5f, false},
    {"llama-3.1-8b", "llama", "Llama-3.1-8B: 4096 x 32, 32/8 heads, ff 14336, vocab 128256", 4096,
     32, 32, 8, 0, 14336, 128256, 0, 0, 0, 131072, 500000.0f, 1e-5f, false},
    {"mixtral-8x7b", "llama",
     "Mixtral-8x7B (llama arch MoE): 4096 x 32, 32/8 heads, 8 experts top-2 of ff 14336", 4096, 32,
     32, 8, 0, 14336, 32000, 8, 2, 0, 32768, 1000000.0f, 1e-5f, false},
    {"qwen3-30b-a3b", "qwen3moe",
     "Qwen3-30B-A3B: 2048 x 48, 32/4 heads of 128, 128 experts top-8 of ff 768", 2048, 48, 32, 4,
     128, 6144, 151936, 128, 8, 768, 40960, 1000000.0f, 1e-6f, false},
    {"olmoe-1b-7b", "qwen3moe",
     "OLMoE-1B-7B geometry emitted as qwen3moe (per-head q/k norms, not OLMoE's full-width "
     "ones): 2048 x 16, 16 heads, 64 experts top-8 of ff 1024, vocab 50304",
     2048, 16, 16, 16, 128, 1024, 50304, 64, 8, 1024, 4096, 10000.0f, 1e-5f, false},
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

const char *const synth_preset_names[] = {
    "tiny",       "stories15m",   "qwen2.5-0.5b", "qwen3-0.6b",    "llama-3.2-1b",
    "llama-2-7b", "llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b",
    NULL};
const char *const synth_preset_docs[] = {presets[0].doc,
                                         presets[1].doc,
                                         presets[2].doc,
                                         presets[3].doc,
                                         presets[4].doc,
                                         presets[5].doc,
                                         presets[6].doc,
                                         presets[7].doc,
                                         presets[8].doc,
                                         presets[9].doc,
                                         NULL};

void synth_params_default(struct synth_params *p) {
    memset(p, 0, sizeof(*p));
    snprintf(p->recipe, sizeof(p->recipe), "f16");
    p->seed = 42;
    p->n_threads = 1;
    p->pooling = -1;
    synth_preset(p, "tiny", NULL);
}

int synth_preset(struct synth_params *p, const char *name, struct strata_error *err) {
    for (size_t i = 0; i < N_PRESETS; i++) {
        const struct preset *s = &presets[i];
        if (strcmp(s->name, name))
            continue;
        snprintf(p->arch, sizeof(p->arch), "%s", s->arch);
        snprintf(p->name, sizeof(p->name), "strata-synth-%s", s->name);
        p->n_embd = s->n_embd;
        p->n_layer = s->n_layer;
        p->n_head = s->n_head;
        p->n_head_kv = s->n_head_kv;
        p->head_dim = s->head_dim;
        p->n_ff = s->n_ff;
        p->n_vocab = s->n_vocab;
        p->n_expert = s->n_expert;
        p->n_expert_used = s->n_expert_used;
        p->n_ff_exp = s->n_ff_exp;
        p->n_ctx = s->n_ctx;
        p->rope_base = s->rope_base;
        p->rms_eps = s->rms_eps;
        p->tied_output = s->tied;
        return 0;
    }
    return strata_error_set(err, STRATA_E_NOT_FOUND, "unknown preset '%s'", name);
}

/* ---- rng ------------------------------------------------------------------ */
/* engine/core/rng.h's generator, seeded from the three ids of a row
 * (tensor, row, seed) mixed into one 64-bit value. */
void synth_rng_seed(struct synth_rng *r, uint64_t a, uint64_t b, uint64_t c) {
    strata_rng_seed(&r->g, a ^ (b * 0xD1B54A32D192ED03ull) ^ (c * 0x8CB92BA72F3D8DD7ull));
}

/* ---- tensor plan ---------------------------------------------------------- */
enum gen_kind { GEN_EMBD, GEN_GAIN, GEN_MAT, GEN_MAT_OUT, GEN_BIAS, GEN_ROUTER };

struct plan_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    enum gen_kind kind;
    int layer;  /* -1 outside blocks */
    float gain; /* GEN_GAIN centre */
    uint32_t type;
};

struct plan {
    struct plan_tensor *t;
    int64_t n;
    size_t cap;
};

static int plan_add(struct plan *pl, enum gen_kind kind, int layer, float gain, int64_t ne0,
                    int64_t ne1, int64_t ne2, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static int plan_add(struct plan *pl, enum gen_kind kind, int layer, float gain, int64_t ne0,
                    int64_t ne1, int64_t ne2, const char *fmt, ...) {
    if (strata_grow((void **)&pl->t, &pl->cap, (size_t)pl->n + 1, sizeof *pl->t) < 0)
        return -1;
    struct plan_tensor *t = &pl->t[pl->n++];
    memset(t, 0, sizeof(*t));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t->kind = kind;
    t->layer = layer;
    t->gain = gain;
    return 0;
}

static int64_t head_dim_of(const struct synth_params *p) {
    return p->head_dim ? p->head_dim : p->n_embd / p->n_head;
}

static int build_plan(const struct synth_params *p, int64_t n_vocab, struct plan *pl) {
    const int64_t E = p->n_embd, hd = head_dim_of(p);
    const int64_t q_dim = p->n_head * hd, kv_dim = p->n_head_kv * hd;
    const bool qwen2 = !strcmp(p->arch, "qwen2");
    const bool qk_norm = !strcmp(p->arch, "qwen3") || !strcmp(p->arch, "qwen3moe");
    const bool moe = p->n_expert > 0;
    const int64_t ff_exp = !strcmp(p->arch, "qwen3moe") ? p->n_ff_exp : p->n_ff;
    int rc = 0;
    rc |= plan_add(pl, GEN_EMBD, -1, 0, E, n_vocab, 1, "token_embd.weight");
    rc |= plan_add(pl, GEN_GAIN, -1, p->tied_output ? 1.0f / sqrtf((float)E) : 1.0f, E, 1, 1,
                   "output_norm.weight");
    if (!p->tied_output)
        rc |= plan_add(pl, GEN_MAT, -1, 0, E, n_vocab, 1, "output.weight");
    for (int l = 0; l < p->n_layer && !rc; l++) {
        rc |= plan_add(pl, GEN_GAIN, l, 1.0f, E, 1, 1, "blk.%d.attn_norm.weight", l);
        rc |= plan_add(pl, GEN_MAT, l, 0, E, q_dim, 1, "blk.%d.attn_q.weight", l);
        rc |= plan_add(pl, GEN_MAT, l, 0, E, kv_dim, 1, "blk.%d.attn_k.weight", l);
        rc |= plan_add(pl, GEN_MAT, l, 0, E, kv_dim, 1, "blk.%d.attn_v.weight", l);
        if (qwen2) {
            rc |= plan_add(pl, GEN_BIAS, l, 0, q_dim, 1, 1, "blk.%d.attn_q.bias", l);
            rc |= plan_add(pl, GEN_BIAS, l, 0, kv_dim, 1, 1, "blk.%d.attn_k.bias", l);
            rc |= plan_add(pl, GEN_BIAS, l, 0, kv_dim, 1, 1, "blk.%d.attn_v.bias", l);
        }
        if (qk_norm) {
            rc |= plan_add(pl, GEN_GAIN, l, 1.0f, hd, 1, 1, "blk.%d.attn_q_norm.weight", l);
            rc |= plan_add(pl, GEN_GAIN, l, 1.0f, hd, 1, 1, "blk.%d.attn_k_norm.weight", l);
        }
        rc |= plan_add(pl, GEN_MAT_OUT, l, 0, q_dim, E, 1, "blk.%d.attn_output.weight", l);
        rc |= plan_add(pl, GEN_GAIN, l, 1.0f, E, 1, 1, "blk.%d.ffn_norm.weight", l);
        if (moe) {
            rc |=
                plan_add(pl, GEN_ROUTER, l, 0, E, p->n_expert, 1, "blk.%d.ffn_gate_inp.weight", l);
            rc |= plan_add(pl, GEN_MAT, l, 0, E, ff_exp, p->n_expert, "blk.%d.ffn_gate_exps.weight",
                           l);
            rc |= plan_add(pl, GEN_MAT_OUT, l, 0, ff_exp, E, p->n_expert,
                           "blk.%d.ffn_down_exps.weight", l);
            rc |=
                plan_add(pl, GEN_MAT, l, 0, E, ff_exp, p->n_expert, "blk.%d.ffn_up_exps.weight", l);
        } else {
            rc |= plan_add(pl, GEN_MAT, l, 0, E, p->n_ff, 1, "blk.%d.ffn_gate.weight", l);
            rc |= plan_add(pl, GEN_MAT_OUT, l, 0, p->n_ff, E, 1, "blk.%d.ffn_down.weight", l);
            rc |= plan_add(pl, GEN_MAT, l, 0, E, p->n_ff, 1, "blk.%d.ffn_up.weight", l);
        }
    }
    return rc ? -1 : 0;
}

static int validate(const struct synth_params *p, struct strata_error *err) {
    const char *a = p->arch;
    if (strcmp(a, "llama") && strcmp(a, "qwen2") && strcmp(a, "qwen3") && strcmp(a, "qwen3moe"))
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "synth: arch '%s' (llama, qwen2, qwen3, qwen3moe)", a);
#define RANGE(x, lo, hi)                                                                           \
    if ((x) < (lo) || (x) > (hi))                                                                  \
        return strata_error_set(err, STRATA_E_RANGE, "synth: " #x " = %lld out of %lld..%lld",     \
                                (long long)(x), (long long)(lo), (long long)(hi));
    RANGE(p->n_embd, 1, 65536);
    RANGE(p->n_layer, 1, 1024);
    RANGE(p->n_head, 1, 1024);
    RANGE(p->n_head_kv, 1, p->n_head);
    RANGE(p->head_dim, 0, 1024);
    RANGE(p->n_ff, 1, 1 << 20);
    RANGE(p->n_ctx, 1, INT64_C(1) << 24);
    RANGE(p->n_expert, 0, 1024);
    RANGE(p->n_threads, 1, 256);
#undef RANGE
    if (p->n_head % p->n_head_kv)
        return strata_error_set(err, STRATA_E_INVALID,
                                "synth: n_head %lld is not a multiple of n_head_kv %lld",
                                (long long)p->n_head, (long long)p->n_head_kv);
    if (!p->head_dim && p->n_embd % p->n_head)
        return strata_error_set(err, STRATA_E_INVALID,
                                "synth: n_embd %lld is not a multiple of n_head %lld",
                                (long long)p->n_embd, (long long)p->n_head);
    if (head_dim_of(p) % 2)
        return strata_error_set(err, STRATA_E_INVALID, "synth: head dim must be even (rope)");
    bool moe_arch = !strcmp(a, "qwen3moe");
    if (moe_arch && p->n_expert == 0)
        return strata_error_set(err, STRATA_E_INVALID, "synth: qwen3moe needs --n-expert > 0");
    if ((!strcmp(a, "qwen2") || !strcmp(a, "qwen3")) && p->n_expert)
        return strata_error_set(err, STRATA_E_INVALID,
                                "synth: %s is dense (MoE: qwen3moe or llama)", a);
    if (p->n_expert && (p->n_expert_used < 1 || p->n_expert_used > p->n_expert))
        return strata_error_set(err, STRATA_E_RANGE,
                                "synth: n_expert_used %lld must be 1..n_expert (%lld)",
                                (long long)p->n_expert_used, (long long)p->n_expert);
    if (moe_arch && (p->n_ff_exp < 1 || p->n_ff_exp > (1 << 20)))
        return strata_error_set(err, STRATA_E_RANGE, "synth: n_ff_exp %lld out of 1..1048576",
                                (long long)p->n_ff_exp);
    if (!(p->route_skew >= 0 && p->route_skew <= 16))
        return strata_error_set(err, STRATA_E_RANGE, "synth: route skew %g out of 0..16",
                                p->route_skew);
    return 0;
}

static int write_kvs(struct gguf_writer *w, const struct synth_params *p, int64_t n_vocab,
                     int ftype, struct strata_error *err) {
    const char *a = p->arch;
    char k[128];
    int rc = 0;
#define KEY(suffix) (snprintf(k, sizeof(k), "%s." suffix, a), k)
    const int64_t hd = head_dim_of(p);
    rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", a, err);
    rc = rc ? rc : gguf_writer_set_str(w, "general.name", p->name, err);
    rc = rc ? rc : gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype, err);
    rc = rc ? rc : gguf_writer_set_u32(w, "general.quantization_version", 2, err);
    rc = rc ? rc : gguf_writer_set_u64(w, "general.seed", p->seed, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)p->n_layer, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head, err);
    rc = rc ? rc
            : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv, err);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps, err);
    rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base, err);
    rc = rc ? rc : gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd, err);
    if (p->head_dim || !strncmp(a, "qwen3", 5)) {
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hd, err);
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)hd, err);
    }
    if (p->n_expert) {
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)p->n_expert, err);
        rc = rc ? rc
                : gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)p->n_expert_used, err);
        if (!strcmp(a, "qwen3moe"))
            rc = rc ? rc
                    : gguf_writer_set_u32(w, KEY("expert_feed_forward_length"),
                                          (uint32_t)p->n_ff_exp, err);
    }
    if (p->pooling >= 0)
        rc = rc ? rc : gguf_writer_set_u32(w, KEY("pooling_type"), (uint32_t)p->pooling, err);
#undef KEY
    return rc;
}

/* ---- generation ------------------------------------------------------------ */
struct gen_ctx {
    const struct synth_params *p;
    const struct plan_tensor *t;
    int64_t index;     /* tensor index: part of every row's seed */
    const float *u;    /* (n_embd) route-skew direction, or NULL */
    const float *bias; /* (n_expert) router-logit bias of this layer, or NULL */
    float bias_scale;  /* sqrt(2 + l/L) / sqrt(n_embd) */
    float noise_scale; /* sqrt((2 + l/L) / (1 + l/L)): keeps the random logit std 1 */
};

static int gen_row(void *vctx, int64_t row, float *x, void *dst) {
    const struct gen_ctx *c = vctx;
    const struct plan_tensor *t = c->t;
    const int64_t n = t->ne[0];
    struct synth_rng r;
    synth_rng_seed(&r, c->p->seed, (uint64_t)c->index, (uint64_t)row);
    const float sqrt3 = 1.7320508f;
    float scale;
    switch (t->kind) {
    case GEN_EMBD:
        scale = sqrt3; /* std 1 */
        break;
    case GEN_GAIN:
        for (int64_t i = 0; i < n; i++)
            x[i] = t->gain * (1.0f + 0.05f * synth_rng_sym(&r));
        return quant_quantize_row(t->type, x, dst, n);
    case GEN_BIAS:
        scale = 0.02f * sqrt3;
        break;
    case GEN_MAT_OUT:
        scale = sqrt3 / sqrtf((float)n * 2.0f * (float)c->p->n_layer);
        break;
    default:
        scale = sqrt3 / sqrtf((float)n);
        break;
    }
    if (!c->p->exact_quant &&
        (t->kind == GEN_MAT || t->kind == GEN_MAT_OUT || (t->kind == GEN_EMBD && !c->u)) &&
        synth_direct_row(t->type, scale / sqrt3, &r, dst, n) == 0)
        return 0;
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * synth_rng_sym(&r);
    if (t->kind == GEN_EMBD && c->u) {
        const float s = sqrtf((float)n);
        for (int64_t i = 0; i < n; i++)
            x[i] += s * c->u[i];
    }
    if (t->kind == GEN_ROUTER && c->bias) {
        /* random part: orthogonal to u (else r.u would add a random per-expert
         * bias) and rescaled for the share of x's variance u takes */
        float dot = 0;
        for (int64_t i = 0; i < n; i++)
            dot += x[i] * c->u[i];
        const float b = c->bias[row] * c->bias_scale;
        for (int64_t i = 0; i < n; i++)
            x[i] = c->noise_scale * (x[i] - dot * c->u[i]) + b * c->u[i];
    }
    return quant_quantize_row(t->type, x, dst, n);
}

/* Router-logit bias for each popularity rank, calibrated so that top-k
 * selection over logits bias + N(0, 1) (the router's random part has logit
 * std ~1) picks rank r with frequency ~ r^-S. A bias of -S*ln(r) alone is far
 * too steep: Gaussian tails are thin, so with 16 experts, top-2 and S = 1.5
 * the most popular expert was chosen 665x as often as the median one instead
 * of 27x. Calibration: 40 rounds of a seeded Monte Carlo over 4096 tokens,
 * each moving bias[r] by 0.7 * ln(target / observed). Costs O(40 * 4096 *
 * n_expert * k) once per model. */
static int calibrate_rank_bias(const struct synth_params *p, float *rank_bias) {
    const int64_t ne = p->n_expert, k = p->n_expert_used, T = 4096;
    float *noise = malloc((size_t)ne * sizeof(float));
    double *target = malloc((size_t)ne * sizeof(double));
    int64_t *count = malloc((size_t)ne * sizeof(int64_t));
    unsigned char *taken = malloc((size_t)ne);
    if (!noise || !target || !count || !taken) {
        free(noise);
        free(target);
        free(count);
        free(taken);
        return -1;
    }
    double z = 0;
    for (int64_t r = 0; r < ne; r++)
        z += pow((double)(r + 1), -p->route_skew);
    for (int64_t r = 0; r < ne; r++) {
        target[r] = pow((double)(r + 1), -p->route_skew) / z; /* share of all picks */
        rank_bias[r] = 0;
    }
    for (int it = 0; it < 40; it++) {
        struct synth_rng g;
        synth_rng_seed(&g, p->seed, 0xCA1Bu, (uint64_t)it);
        memset(count, 0, (size_t)ne * sizeof(int64_t));
        for (int64_t t = 0; t < T; t++) {
            for (int64_t r = 0; r < ne; r += 2) { /* Box-Muller pairs */
                double u1 = (double)((synth_rng_next(&g) >> 11) + 1) / 9007199254740993.0;
                double u2 = (double)(synth_rng_next(&g) >> 11) / 9007199254740992.0;
                double m = sqrt(-2.0 * log(u1));
                noise[r] = rank_bias[r] + (float)(m * cos(6.283185307179586 * u2));
                if (r + 1 < ne)
                    noise[r + 1] = rank_bias[r + 1] + (float)(m * sin(6.283185307179586 * u2));
            }
            memset(taken, 0, (size_t)ne);
            for (int64_t j = 0; j < k; j++) {
                int64_t best = -1;
                for (int64_t r = 0; r < ne; r++)
                    if (!taken[r] && (best < 0 || noise[r] > noise[best]))
                        best = r;
                taken[best] = 1;
                count[best]++;
            }
        }
        for (int64_t r = 0; r < ne; r++) {
            double seen = ((double)count[r] + 0.5) / (double)(T * k);
            rank_bias[r] += (float)(0.7 * log(target[r] / seen));
        }
        for (int64_t r = 1; r < ne; r++) /* keep rank 0 at 0: only differences matter */
            rank_bias[r] -= rank_bias[0];
        rank_bias[0] = 0;
    }
    free(noise);
    free(target);
    free(count);
    free(taken);
    return 0;
}

/* Per-layer biases: the calibrated rank biases over a seeded permutation. */
static void route_bias(const struct synth_params *p, int layer, const float *rank_bias,
                       float *bias) {
    int64_t ne = p->n_expert; /* <= 1024, checked by validate() */
    struct synth_rng r;
    synth_rng_seed(&r, p->seed, 0x5EEDu, (uint64_t)layer);
    int32_t order[1024];
    for (int64_t i = 0; i < ne; i++)
        order[i] = (int32_t)i;
    for (int64_t i = ne - 1; i > 0; i--) {
        int64_t j = (int64_t)(synth_rng_next(&r) % (uint64_t)(i + 1));
        int32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (int64_t rank = 0; rank < ne; rank++)
        bias[order[rank]] = rank_bias[rank];
}

int synth_write(const struct synth_params *p, const char *path, struct synth_report *rep,
                struct strata_error *err) {
    struct plan pl = {0};
    struct gguf_writer *w = NULL;
    float *u = NULL, *bias = NULL, *rank_bias = NULL;
    int rc = validate(p, err);
    if (rc)
        return rc;
    int64_t n_vocab = p->vocab_from ? synth_vocab_size(p->vocab_from, err) : p->n_vocab;
    if (n_vocab < 0)
        return (int)n_vocab;
    if (build_plan(p, n_vocab, &pl)) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "synth: out of memory");
        goto out;
    }
    struct synth_mix mix;
    if ((rc = synth_mix_init(&mix, p->recipe, p->n_layer, p->n_expert, err)))
        goto out;
    for (int64_t i = 0; i < pl.n; i++)
        synth_mix_count(&mix, pl.t[i].name);
    for (int64_t i = 0; i < pl.n; i++) {
        struct plan_tensor *t = &pl.t[i];
        /* what convert_hf_to_gguf leaves F32: 1-D tensors and the router */
        bool keep_f32 = t->n_dims == 1 || t->kind == GEN_ROUTER;
        uint32_t src = keep_f32 ? QUANT_F32 : mix.default_type;
        if (!keep_f32 && mix.default_type != QUANT_F32 && mix.default_type != QUANT_F16 &&
            mix.default_type != QUANT_BF16)
            src = QUANT_F16;
        t->type = synth_mix_type(&mix, t->name, t->n_dims, t->ne, src);
        const struct quant_traits *tr = quant_type_traits(t->type);
        if (!tr || !tr->can_quantize) {
            rc = strata_error_set(err, STRATA_E_UNSUPPORTED, "synth: %s: cannot quantize to %s",
                                  t->name, quant_type_name(t->type));
            goto out;
        }
    }
    w = gguf_writer_init(path, err);
    if (!w) {
        rc = err ? err->code : STRATA_E_IO;
        goto out;
    }
    if ((rc = write_kvs(w, p, n_vocab, mix.ftype, err)))
        goto out;
    int64_t n_vocab_written = 0;
    if ((rc = synth_vocab_write(w, p, &n_vocab_written, err)))
        goto out;
    for (int64_t i = 0; i < pl.n; i++)
        if ((rc = gguf_writer_add_tensor(w, pl.t[i].name, pl.t[i].type, pl.t[i].n_dims, pl.t[i].ne,
                                         err)))
            goto out;
    if ((rc = gguf_writer_begin(w, err)))
        goto out;
    if (p->route_skew > 0 && p->n_expert > 0) {
        u = malloc((size_t)p->n_embd * sizeof(float));
        bias = malloc((size_t)p->n_expert * sizeof(float));
        rank_bias = malloc((size_t)p->n_expert * sizeof(float));
        if (!u || !bias || !rank_bias || calibrate_rank_bias(p, rank_bias)) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "synth: out of memory");
            goto out;
        }
        struct synth_rng r;
        synth_rng_seed(&r, p->seed, 0xD1Cu, 0);
        const float inv = 1.0f / sqrtf((float)p->n_embd);
        for (int64_t i = 0; i < p->n_embd; i++)
            u[i] = (synth_rng_next(&r) >> 63) ? inv : -inv;
    }
    int64_t n_params = 0;
    for (int64_t i = 0; i < pl.n; i++) {
        const struct plan_tensor *t = &pl.t[i];
        struct gen_ctx c = {.p = p, .t = t, .index = i, .u = u};
        if (t->kind == GEN_ROUTER && bias) {
            route_bias(p, t->layer, rank_bias, bias);
            c.bias = bias;
            const float dil = (float)t->layer / (float)p->n_layer;
            c.bias_scale = sqrtf(2.0f + dil) / sqrtf((float)p->n_embd);
            c.noise_scale = sqrtf((2.0f + dil) / (1.0f + dil));
        }
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        n_params += rows * t->ne[0];
        rc = synth_stream_rows(w, rows, t->ne[0], quant_row_size(t->type, t->ne[0]), gen_row, &c,
                               p->n_threads, err);
        if (rc) {
            strata_error_prefix(err, "%s", t->name);
            goto out;
        }
    }
    if ((rc = gguf_writer_finish(w, err)))
        goto out;
    if (rep) {
        rep->n_bytes = gguf_writer_bytes(w);
        rep->n_tensors = pl.n;
        rep->n_params = n_params;
        rep->n_fallback = mix.n_fallback;
    }
out:
    gguf_writer_free(w);
    free(rank_bias);
    free(bias);
    free(u);
    free(pl.t);
    return rc;
}
