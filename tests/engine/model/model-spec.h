/* tests/engine/model/model-spec.h: tiny GGUF models written from a spec
 * (every architecture the model module binds, any matrix type, optional
 * biases, q/k norms, YaRN, rope factors, shared experts, identical experts),
 * for the model, backend and expert tests. Values are seeded per tensor name,
 * so two files of one spec are byte-identical.
 *
 *   struct spec s = spec_of("qwen2moe");
 *   char path[256];
 *   tmp_path(path, sizeof path, "tag");
 *   write_model(path, &s);
 *
 * Threading: the test's thread (Check forks per test). */
#ifndef STRATA_TEST_MODEL_SPEC_H
#define STRATA_TEST_MODEL_SPEC_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "tests/harness.h"

struct spec {
    const char *arch;
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_layer;
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    bool tied, biases, qk_norm, same_experts, yarn, rope_freqs;
    uint32_t mat_type; /* QUANT_F32, QUANT_F16 or QUANT_Q8_0 */
};

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Uniform in [-a, a] from a seeded xorshift stream. */
static void fill(const char *seed_name, float *x, int64_t n, float a) {
    uint64_t s = hash_name(seed_name) | 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = a * ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
    }
}

struct tw {
    struct gguf_writer *w;
    struct strata_error err;
};

static void add(struct tw *t, const char *name, uint32_t type, int nd, int64_t a, int64_t b,
                int64_t c) {
    int64_t ne[3] = {a, b, c};
    ck_assert_msg(gguf_writer_add_tensor(t->w, name, type, (uint32_t)nd, ne, &t->err) == 0, "%s",
                  t->err.message);
}

/* Writes n f32 values as type (rows of ne0). */
static void put(struct tw *t, uint32_t type, const float *x, int64_t n, int64_t ne0) {
    size_t rb = quant_row_size((enum quant_type)type, ne0);
    uint8_t *buf = malloc(rb);
    for (int64_t r = 0; r < n / ne0; r++) {
        if (type == QUANT_F32)
            memcpy(buf, x + r * ne0, rb);
        else if (quant_quantize_row((enum quant_type)type, x + r * ne0, buf, ne0) != 0)
            memset(buf, 0, rb); /* a type without a quantizer: zeros (refusal tests) */
        ck_assert(gguf_writer_write(t->w, buf, rb, &t->err) == 0);
    }
    free(buf);
}

struct tdesc {
    char name[64];
    char seed[64]; /* values come from this name's stream */
    uint32_t type;
    int nd;
    int64_t ne[3];
    float amp;
};

static int describe(const struct spec *s, struct tdesc *d) {
    int n = 0;
    const int64_t E = s->n_embd, nq = (int64_t)s->n_head * s->head_dim;
    const int64_t nk = (int64_t)s->n_head_kv * s->head_dim;
    const uint32_t mt = s->mat_type;
#define T(nm, sd, ty, dims, a, b, c, am)                                                           \
    do {                                                                                           \
        snprintf(d[n].name, 64, "%s", nm);                                                         \
        snprintf(d[n].seed, 64, "%s", sd);                                                         \
        d[n].type = ty, d[n].nd = dims, d[n].ne[0] = a, d[n].ne[1] = b, d[n].ne[2] = c;            \
        d[n].amp = am;                                                                             \
        n++;                                                                                       \
    } while (0)
    T("token_embd.weight", "token_embd.weight", mt, 2, E, s->n_vocab, 1, 1.0f);
    T("output_norm.weight", "output_norm.weight", QUANT_F32, 1, E, 1, 1, 0.0f);
    if (!s->tied)
        T("output.weight", "output.weight", mt, 2, E, s->n_vocab, 1, 0.5f);
    if (s->rope_freqs)
        T("rope_freqs.weight", "rope_freqs.weight", QUANT_F32, 1, s->head_dim / 2, 1, 1, -1.0f);
    for (int l = 0; l < s->n_layer; l++) {
        char nm[64], sd[64];
        float wa = 1.0f / sqrtf((float)E);
#define L(suffix, seed_suffix, ty, dims, a, b, c, am)                                              \
    do {                                                                                           \
        snprintf(nm, 64, "blk.%d.%s", l, suffix);                                                  \
        snprintf(sd, 64, "blk.%d.%s", l, seed_suffix);                                             \
        T(nm, sd, ty, dims, a, b, c, am);                                                          \
    } while (0)
        L("attn_norm.weight", "attn_norm.weight", QUANT_F32, 1, E, 1, 1, 0.0f);
        L("attn_q.weight", "attn_q.weight", mt, 2, E, nq, 1, wa);
        L("attn_k.weight", "attn_k.weight", mt, 2, E, nk, 1, wa);
        L("attn_v.weight", "attn_v.weight", mt, 2, E, nk, 1, wa);
        L("attn_output.weight", "attn_output.weight", mt, 2, nq, E, 1, wa);
        if (s->biases) {
            L("attn_q.bias", "attn_q.bias", QUANT_F32, 1, nq, 1, 1, 0.05f);
            L("attn_k.bias", "attn_k.bias", QUANT_F32, 1, nk, 1, 1, 0.05f);
            L("attn_v.bias", "attn_v.bias", QUANT_F32, 1, nk, 1, 1, 0.05f);
        }
        if (s->qk_norm) {
            L("attn_q_norm.weight", "attn_q_norm.weight", QUANT_F32, 1, s->head_dim, 1, 1, 0.0f);
            L("attn_k_norm.weight", "attn_k_norm.weight", QUANT_F32, 1, s->head_dim, 1, 1, 0.0f);
        }
        L("ffn_norm.weight", "ffn_norm.weight", QUANT_F32, 1, E, 1, 1, 0.0f);
        if (s->n_expert == 0) {
            L("ffn_gate.weight", "ffn_gate.weight", mt, 2, E, s->n_ff, 1, wa);
            L("ffn_up.weight", "ffn_up.weight", mt, 2, E, s->n_ff, 1, wa);
            L("ffn_down.weight", "ffn_down.weight", mt, 2, s->n_ff, E, 1, 1.0f / sqrtf(s->n_ff));
        } else {
            const int FE = s->n_ff_exp, NE = s->n_expert;
            L("ffn_gate_inp.weight", "ffn_gate_inp.weight", QUANT_F32, 2, E, NE, 1, 1.0f);
            /* same_experts: every expert is a copy of the dense FFN of the same seed */
            L("ffn_gate_exps.weight", s->same_experts ? "ffn_gate.weight" : "ffn_gate_exps.weight",
              mt, 3, E, FE, NE, wa);
            L("ffn_up_exps.weight", s->same_experts ? "ffn_up.weight" : "ffn_up_exps.weight", mt, 3,
              E, FE, NE, wa);
            L("ffn_down_exps.weight", s->same_experts ? "ffn_down.weight" : "ffn_down_exps.weight",
              mt, 3, FE, E, NE, 1.0f / sqrtf(FE));
            if (s->n_ff_shexp) {
                const int S = s->n_ff_shexp;
                L("ffn_gate_shexp.weight", "ffn_gate_shexp.weight", mt, 2, E, S, 1, wa);
                L("ffn_up_shexp.weight", "ffn_up_shexp.weight", mt, 2, E, S, 1, wa);
                L("ffn_down_shexp.weight", "ffn_down_shexp.weight", mt, 2, S, E, 1,
                  1.0f / sqrtf(S));
                L("ffn_gate_inp_shexp.weight", "ffn_gate_inp_shexp.weight", QUANT_F32, 1, E, 1, 1,
                  wa);
            }
        }
#undef L
    }
#undef T
    return n;
}

static void write_model(const char *path, const struct spec *s) {
    struct tw t = {0};
    t.w = gguf_writer_init(path, &t.err);
    ck_assert_msg(t.w != NULL, "%s", t.err.message);
    char k[96];
    const char *a = s->arch;
#define U32(key, v)                                                                                \
    (snprintf(k, sizeof k, "%s.%s", a, key), ck_assert(gguf_writer_set_u32(t.w, k, v, &t.err) == 0))
    ck_assert(gguf_writer_set_str(t.w, "general.architecture", a, &t.err) == 0);
    U32("context_length", 128);
    U32("embedding_length", (uint32_t)s->n_embd);
    U32("block_count", (uint32_t)s->n_layer);
    U32("attention.head_count", (uint32_t)s->n_head);
    U32("attention.head_count_kv", (uint32_t)s->n_head_kv);
    U32("attention.key_length", (uint32_t)s->head_dim);
    U32("attention.value_length", (uint32_t)s->head_dim);
    U32("rope.dimension_count", (uint32_t)s->head_dim);
    U32("feed_forward_length", (uint32_t)(s->n_expert ? s->n_ff_exp : s->n_ff));
    if (s->n_expert) {
        U32("expert_count", (uint32_t)s->n_expert);
        U32("expert_used_count", (uint32_t)s->n_expert_used);
        U32("expert_feed_forward_length", (uint32_t)s->n_ff_exp);
        if (s->n_ff_shexp)
            U32("expert_shared_feed_forward_length", (uint32_t)s->n_ff_shexp);
    }
    snprintf(k, sizeof k, "%s.rope.freq_base", a);
    ck_assert(gguf_writer_set_f32(t.w, k, 10000.0f, &t.err) == 0);
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", a);
    ck_assert(gguf_writer_set_f32(t.w, k, 1e-6f, &t.err) == 0);
    if (s->yarn) {
        snprintf(k, sizeof k, "%s.rope.scaling.type", a);
        ck_assert(gguf_writer_set_str(t.w, k, "yarn", &t.err) == 0);
        snprintf(k, sizeof k, "%s.rope.scaling.factor", a);
        ck_assert(gguf_writer_set_f32(t.w, k, 4.0f, &t.err) == 0);
        U32("rope.scaling.original_context_length", 32);
    }
    ck_assert(gguf_writer_set_u32(t.w, "tokenizer.ggml.bos_token_id", 1, &t.err) == 0);
#undef U32
    struct tdesc *d = calloc(512, sizeof *d);
    int n = describe(s, d);
    for (int i = 0; i < n; i++)
        add(&t, d[i].name, d[i].type, d[i].nd, d[i].ne[0], d[i].ne[1], d[i].ne[2]);
    ck_assert(gguf_writer_begin(t.w, &t.err) == 0);
    for (int i = 0; i < n; i++) {
        int64_t ne = d[i].ne[0] * d[i].ne[1] * d[i].ne[2];
        int64_t per = d[i].ne[0] * d[i].ne[1]; /* one expert (or the whole matrix) */
        float *x = malloc((size_t)ne * sizeof *x);
        for (int64_t e = 0; e < ne / per; e++) {
            if (d[i].amp == 0.0f) { /* norm gains 1 +- 0.1 */
                fill(d[i].seed, x + e * per, per, 0.1f);
                for (int64_t j = 0; j < per; j++)
                    x[e * per + j] += 1.0f;
            } else if (d[i].amp < 0.0f) { /* rope freq factors in [1, 3] */
                fill(d[i].seed, x + e * per, per, 1.0f);
                for (int64_t j = 0; j < per; j++)
                    x[e * per + j] += 2.0f;
            } else {
                char sd[80];
                /* distinct experts get distinct streams unless copies were asked for */
                snprintf(sd, sizeof sd, "%s%s", d[i].seed,
                         d[i].nd == 3 && !s->same_experts ? (char[]){(char)('a' + e % 26), 0} : "");
                fill(sd, x + e * per, per, d[i].amp);
            }
        }
        uint32_t ty = d[i].type;
        put(&t, ty, x, ne, d[i].ne[0]);
        free(x);
    }
    ck_assert_msg(gguf_writer_finish(t.w, &t.err) == 0, "%s", t.err.message);
    gguf_writer_free(t.w);
    free(d);
}

static const struct spec base = {.arch = "llama",
                                 .n_embd = 64,
                                 .n_head = 4,
                                 .n_head_kv = 2,
                                 .head_dim = 16,
                                 .n_ff = 96,
                                 .n_vocab = 96,
                                 .n_layer = 2,
                                 .n_expert_used = 2,
                                 .n_ff_exp = 32,
                                 .mat_type = QUANT_F32};

static struct spec spec_of(const char *which) {
    struct spec s = base;
    if (!strcmp(which, "llama-q8")) {
        s.mat_type = QUANT_Q8_0, s.tied = true;
    } else if (!strcmp(which, "llama-yarn")) {
        s.yarn = true, s.rope_freqs = true, s.mat_type = QUANT_F16;
    } else if (!strcmp(which, "mixtral")) {
        s.n_expert = 4;
    } else if (!strcmp(which, "qwen2")) {
        s.arch = "qwen2", s.biases = true, s.tied = true;
    } else if (!strcmp(which, "qwen3")) {
        s.arch = "qwen3", s.qk_norm = true, s.head_dim = 32; /* head_dim != n_embd / n_head */
    } else if (!strcmp(which, "qwen2moe")) {
        s.arch = "qwen2moe", s.biases = true, s.n_expert = 6, s.n_ff_shexp = 64;
    } else if (!strcmp(which, "qwen3moe")) {
        s.arch = "qwen3moe", s.qk_norm = true, s.n_expert = 8, s.n_expert_used = 3,
        s.mat_type = QUANT_Q8_0;
    }
    return s;
}

static void tmp_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/strata-test-synth-%d-%s.gguf", (int)getpid(), tag);
}

#endif
