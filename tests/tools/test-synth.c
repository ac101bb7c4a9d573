/* tests/tools/test-synth.c: the model synthesizer, the llama-quantize
 * recipe rules and requantization. Files are read back with the GGUF reader;
 * expected recipe layers come from llama.cpp's use_more_bits rule worked out
 * by hand for 32 layers (i < 4, i >= 28, (i - 4) % 3 == 2). That llama.cpp
 * loads and runs these files is tests/peers/synth-llamacpp.mjs's job. */
#include <math.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "tools/synth/synth.h"
#include "tests/harness.h"

static void tmp_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/strata-test-synth-%d-%s.gguf", (int)getpid(), tag);
}

static void tiny_params(struct synth_params *p, const char *arch, const char *recipe) {
    synth_params_default(p);
    snprintf(p->arch, sizeof(p->arch), "%s", arch);
    p->n_embd = 256;
    p->n_layer = 2;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->n_ff = 512;
    p->n_vocab = 300;
    snprintf(p->recipe, sizeof(p->recipe), "%s", recipe);
}

static struct gguf_file *synth_open(const struct synth_params *p, const char *tag, char *path,
                                    size_t cap) {
    struct strata_error err = {0};
    tmp_path(path, cap, tag);
    struct synth_report rep;
    ck_assert_msg(synth_write(p, path, &rep, &err) == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_uint_eq(rep.n_bytes, gguf_file_size(f));
    ck_assert_int_eq(rep.n_tensors, gguf_n_tensors(f));
    return f;
}

static const struct gguf_tensor_info *tensor(const struct gguf_file *f, const char *name) {
    const struct gguf_tensor_info *t = gguf_find_tensor(f, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    return t;
}

/* Mean and standard deviation of a tensor (dequantized). */
static void tensor_stats(const struct gguf_tensor_info *t, double *mean, double *std) {
    int64_t n0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t rb = quant_row_size(t->type, n0);
    float *x = malloc((size_t)n0 * sizeof(float));
    double s = 0, s2 = 0;
    for (int64_t r = 0; r < rows; r++) {
        ck_assert_int_eq(quant_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, x, n0),
                         0);
        for (int64_t i = 0; i < n0; i++) {
            ck_assert(isfinite(x[i]));
            s += x[i];
            s2 += (double)x[i] * x[i];
        }
    }
    double n = (double)(n0 * rows);
    *mean = s / n;
    *std = sqrt(s2 / n - *mean * *mean);
    free(x);
}

static uint64_t kv_uint(const struct gguf_file *f, const char *key) {
    uint64_t v = 0;
    struct strata_error err = {0};
    ck_assert_msg(gguf_get_uint(f, key, &v, &err) == 0, "%s: %s", key, err.message);
    return v;
}

START_TEST(llama_structure_and_scales) {
    struct synth_params p;
    tiny_params(&p, "llama", "f32");
    p.n_threads = 2;
    char path[256];
    struct gguf_file *f = synth_open(&p, "llama", path, sizeof(path));
    ck_assert_int_eq(gguf_n_tensors(f), 3 + 2 * 9);
    char arch[16];
    ck_assert_int_eq(gguf_get_str_buf(f, "general.architecture", arch, sizeof(arch), NULL), 0);
    ck_assert_str_eq(arch, "llama");
    ck_assert_uint_eq(kv_uint(f, "llama.block_count"), 2);
    ck_assert_uint_eq(kv_uint(f, "llama.embedding_length"), 256);
    ck_assert_uint_eq(kv_uint(f, "llama.attention.head_count_kv"), 2);
    ck_assert_uint_eq(kv_uint(f, "llama.rope.dimension_count"), 64);
    ck_assert_uint_eq(kv_uint(f, "general.file_type"), 0);
    struct gguf_value toks;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, NULL), 0);
    ck_assert_uint_eq(toks.arr.n, 300);
    ck_assert(gguf_str_eq(gguf_arr_str(f, &toks, 256), "<|endoftext|>"));
    ck_assert_uint_eq(kv_uint(f, "tokenizer.ggml.eos_token_id"), 256);
    const struct gguf_tensor_info *t = tensor(f, "blk.1.attn_k.weight");
    ck_assert_int_eq(t->ne[0], 256);
    ck_assert_int_eq(t->ne[1], 128);
    t = tensor(f, "token_embd.weight");
    ck_assert_int_eq(t->ne[1], 300);
    double mean, std;
    tensor_stats(t, &mean, &std);
    ck_assert_msg(fabs(std - 1.0) < 0.05, "embedding std %g", std);
    tensor_stats(tensor(f, "blk.0.ffn_up.weight"), &mean, &std);
    ck_assert_msg(fabs(std * sqrt(256.0) - 1.0) < 0.05, "ffn_up std %g", std);
    ck_assert(fabs(mean) < 0.01);
    /* output projections: 1/sqrt(fan_in * 2 * n_layer) */
    tensor_stats(tensor(f, "blk.0.ffn_down.weight"), &mean, &std);
    ck_assert_msg(fabs(std * sqrt(512.0 * 4) - 1.0) < 0.05, "ffn_down std %g", std);
    tensor_stats(tensor(f, "blk.1.ffn_norm.weight"), &mean, &std);
    ck_assert(fabs(mean - 1.0) < 0.01 && std < 0.05 && std > 0.01);
    gguf_close(f);
    unlink(path);
}
END_TEST

START_TEST(deterministic_across_threads) {
    struct synth_params p;
    tiny_params(&p, "qwen2", "q8_0");
    char a[256], b[256], c[256];
    p.n_threads = 1;
    gguf_close(synth_open(&p, "det1", a, sizeof(a)));
    p.n_threads = 3;
    gguf_close(synth_open(&p, "det3", b, sizeof(b)));
    p.seed = 43;
    gguf_close(synth_open(&p, "det43", c, sizeof(c)));
    size_t na, nb, nc;
    char *da = test_read_file(a, &na), *db = test_read_file(b, &nb), *dc = test_read_file(c, &nc);
    ck_assert(da && db && dc);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(da, db, na) == 0);
    ck_assert(na == nc && memcmp(da, dc, na) != 0);
    free(da);
    free(db);
    free(dc);
    unlink(a);
    unlink(b);
    unlink(c);
}
END_TEST

START_TEST(qwen_archs) {
    struct synth_params p;
    tiny_params(&p, "qwen3moe", "q4_k_m");
    p.head_dim = 128; /* n_head * head_dim != n_embd, as in Qwen3 */
    p.n_expert = 8;
    p.n_expert_used = 2;
    p.n_ff_exp = 256;
    char path[256];
    struct gguf_file *f = synth_open(&p, "moe", path, sizeof(path));
    ck_assert_uint_eq(kv_uint(f, "qwen3moe.expert_count"), 8);
    ck_assert_uint_eq(kv_uint(f, "qwen3moe.expert_used_count"), 2);
    ck_assert_uint_eq(kv_uint(f, "qwen3moe.expert_feed_forward_length"), 256);
    ck_assert_uint_eq(kv_uint(f, "qwen3moe.attention.key_length"), 128);
    ck_assert_uint_eq(kv_uint(f, "general.file_type"), 15);
    const struct gguf_tensor_info *t = tensor(f, "blk.1.ffn_down_exps.weight");
    ck_assert_uint_eq(t->n_dims, 3);
    ck_assert_int_eq(t->ne[0], 256);
    ck_assert_int_eq(t->ne[1], 256);
    ck_assert_int_eq(t->ne[2], 8);
    ck_assert_uint_eq(t->type, QUANT_Q6_K); /* use_more_bits(1, 2) */
    t = tensor(f, "blk.0.attn_q.weight");
    ck_assert_int_eq(t->ne[1], 4 * 128);
    ck_assert_uint_eq(tensor(f, "blk.0.attn_q_norm.weight")->ne[0], 128);
    ck_assert_uint_eq(tensor(f, "blk.0.ffn_gate_inp.weight")->type, QUANT_F32);
    ck_assert_uint_eq(tensor(f, "blk.0.attn_v.weight")->type, QUANT_Q8_0); /* 8 experts */
    ck_assert_uint_eq(tensor(f, "blk.0.attn_output.weight")->type, QUANT_Q5_K);
    ck_assert_ptr_null(gguf_find_tensor(f, "blk.0.ffn_gate.weight"));
    /* direct K-quant codes keep the requested scale */
    double mean, std;
    tensor_stats(tensor(f, "blk.0.ffn_gate_exps.weight"), &mean, &std);
    ck_assert_msg(fabs(std * sqrt(256.0) - 1.0) < 0.1, "gate_exps std %g", std);
    gguf_close(f);
    unlink(path);

    tiny_params(&p, "qwen2", "f16");
    p.tied_output = true;
    f = synth_open(&p, "qwen2", path, sizeof(path));
    ck_assert_ptr_null(gguf_find_tensor(f, "output.weight"));
    t = tensor(f, "blk.0.attn_v.bias");
    ck_assert_uint_eq(t->type, QUANT_F32);
    ck_assert_int_eq(t->ne[0], 128);
    ck_assert_uint_eq(tensor(f, "blk.0.attn_q.weight")->type, QUANT_F16);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* Types a recipe gives a 32-layer model's tensors, in file order. */
static void mix_32(const char *recipe, int64_t n_expert, bool has_output, int64_t ne0,
                   uint32_t out[32][3], uint32_t *output_type, uint32_t *embd_type) {
    struct synth_mix m;
    ck_assert_int_eq(synth_mix_init(&m, recipe, 32, n_expert, NULL), 0);
    char name[64];
    synth_mix_count(&m, "token_embd.weight");
    if (has_output)
        synth_mix_count(&m, "output.weight");
    for (int l = 0; l < 32; l++) {
        snprintf(name, sizeof(name), "blk.%d.attn_v.weight", l);
        synth_mix_count(&m, name);
    }
    int64_t ne[4] = {ne0, 4096, 1, 1};
    *embd_type = synth_mix_type(&m, "token_embd.weight", 2, ne, QUANT_F16);
    *output_type = has_output ? synth_mix_type(&m, "output.weight", 2, ne, QUANT_F16) : 0;
    for (int l = 0; l < 32; l++) {
        const char *names[3] = {"attn_v", "ffn_down", "attn_k"};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof(name), "blk.%d.%s.weight", l, names[k]);
            out[l][k] = synth_mix_type(&m, name, 2, ne, QUANT_F16);
        }
    }
    int64_t ne1[4] = {ne0, 1, 1, 1};
    ck_assert_uint_eq(synth_mix_type(&m, "blk.0.attn_norm.weight", 1, ne1, QUANT_F32), QUANT_F32);
    ck_assert_uint_eq(synth_mix_type(&m, "blk.0.ffn_gate_inp.weight", 2, ne, QUANT_F32), QUANT_F32);
}

START_TEST(recipe_rules) {
    static const int more_bits[32] = {1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1,
                                      0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1};
    uint32_t t[32][3], out, embd;
    mix_32("q4_k_m", 0, true, 4096, t, &out, &embd);
    ck_assert_uint_eq(out, QUANT_Q6_K);
    ck_assert_uint_eq(embd, QUANT_Q4_K);
    for (int l = 0; l < 32; l++) {
        uint32_t want = more_bits[l] ? QUANT_Q6_K : QUANT_Q4_K;
        ck_assert_msg(t[l][0] == want && t[l][1] == want && t[l][2] == QUANT_Q4_K,
                      "layer %d: %u %u %u", l, t[l][0], t[l][1], t[l][2]);
    }
    /* tied: token_embd takes output's rule */
    mix_32("q4_k_m", 0, false, 4096, t, &out, &embd);
    ck_assert_uint_eq(embd, QUANT_Q6_K);
    /* 8 experts (Mixtral): attn_v and attn_k Q8_0 */
    mix_32("q4_k_m", 8, true, 4096, t, &out, &embd);
    ck_assert_uint_eq(t[5][0], QUANT_Q8_0);
    ck_assert_uint_eq(t[5][2], QUANT_Q8_0);
    /* q4_0 output is Q6_K; q8_0 keeps Q8_0 */
    mix_32("q4_0", 0, true, 4096, t, &out, &embd);
    ck_assert_uint_eq(out, QUANT_Q6_K);
    ck_assert_uint_eq(t[0][0], QUANT_Q4_0);
    mix_32("q8_0", 0, true, 4096, t, &out, &embd);
    ck_assert_uint_eq(out, QUANT_Q8_0);
    /* fallbacks for rows not a multiple of 256: Q4_K -> Q5_0, Q6_K -> Q8_0;
     * output with ne0 % 256 != 0 is Q8_0 */
    mix_32("q4_k_m", 0, true, 96, t, &out, &embd);
    ck_assert_uint_eq(out, QUANT_Q8_0);
    ck_assert_uint_eq(t[0][0], QUANT_Q8_0);
    ck_assert_uint_eq(t[4][0], QUANT_Q5_0);
    /* ... and F16 when the fallback does not fit either */
    mix_32("q4_k_m", 0, true, 48, t, &out, &embd);
    ck_assert_uint_eq(t[4][0], QUANT_F16);
    /* mxfp4: output and 2-D Q8_0 */
    mix_32("mxfp4", 0, true, 4096, t, &out, &embd);
    ck_assert_uint_eq(out, QUANT_Q8_0);
    ck_assert_uint_eq(t[3][0], QUANT_Q8_0);
    struct synth_mix m;
    ck_assert_int_eq(synth_mix_init(&m, "mxfp4", 2, 4, NULL), 0);
    int64_t ne3[4] = {256, 512, 4, 1};
    ck_assert_uint_eq(synth_mix_type(&m, "blk.0.ffn_up_exps.weight", 3, ne3, QUANT_F16),
                      QUANT_MXFP4);
    ck_assert_int_eq(synth_mix_init(&m, "q3_xyz", 2, 0, NULL), STRATA_E_INVALID);
    ck_assert_int_eq(synth_mix_init(&m, "pure:iq2_xxs", 2, 0, NULL), STRATA_E_INVALID);
    /* pure: every quantizable tensor, output included, gets the type */
    ck_assert_int_eq(synth_mix_init(&m, "pure:q2_K", 2, 0, NULL), 0);
    ck_assert_int_eq(m.ftype, 10);
    synth_mix_count(&m, "output.weight");
    int64_t ne2[4] = {512, 512, 1, 1};
    ck_assert_uint_eq(synth_mix_type(&m, "output.weight", 2, ne2, QUANT_F16), QUANT_Q2_K);
    ck_assert_uint_eq(synth_mix_type(&m, "blk.0.attn_v.weight", 2, ne2, QUANT_F16), QUANT_Q2_K);
    ne2[0] = 96;
    ck_assert_uint_eq(synth_mix_type(&m, "blk.0.attn_k.weight", 2, ne2, QUANT_F16), QUANT_Q4_0);
    ck_assert_int_eq(synth_mix_init(&m, "iq4_xs", 2, 0, NULL), 0);
    ck_assert_uint_eq(synth_mix_type(&m, "blk.0.attn_k.weight", 2, ne2, QUANT_F16), QUANT_IQ4_NL);
}
END_TEST

START_TEST(vocab_from_copies_tokenizer) {
    char vpath[1024], path[256];
    struct strata_error err = {0};
    struct gguf_file *v = gguf_open(
        test_shared_path(vpath, sizeof(vpath), "fixtures/vocab/ggml-vocab-gpt-2.gguf"), &err);
    ck_assert_msg(v != NULL, "%s: %s", vpath, err.message);
    struct synth_params p;
    tiny_params(&p, "llama", "q8_0");
    p.vocab_from = v;
    struct gguf_file *f = synth_open(&p, "vocab", path, sizeof(path));
    struct gguf_value toks;
    ck_assert_int_eq(gguf_get_arr(v, "tokenizer.ggml.tokens", &toks, NULL), 0);
    ck_assert_int_eq(tensor(f, "token_embd.weight")->ne[1], (int64_t)toks.arr.n);
    ck_assert_int_eq(tensor(f, "output.weight")->ne[1], (int64_t)toks.arr.n);
    int n_tok_keys = 0;
    for (int64_t i = 0; i < gguf_n_kv(v); i++) {
        const struct gguf_kv *kv = gguf_kv_at(v, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10))
            continue;
        n_tok_keys++;
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        int64_t j = gguf_find_kv(f, key);
        ck_assert_msg(j >= 0, "%s not copied", key);
        const struct gguf_kv *kw = gguf_kv_at(f, j);
        ck_assert_int_eq(kw->value.type, kv->value.type);
        if (kv->value.type == GGUF_TYPE_ARRAY) {
            ck_assert_uint_eq(kw->value.arr.n, kv->value.arr.n);
            if (kv->value.arr.elem_type == GGUF_TYPE_STRING && kv->value.arr.n)
                for (uint64_t e = 0; e < kv->value.arr.n; e += 997) {
                    struct gguf_str a = gguf_arr_str(v, &kv->value, e);
                    struct gguf_str b = gguf_arr_str(f, &kw->value, e);
                    ck_assert(a.len == b.len && !memcmp(a.ptr, b.ptr, a.len));
                }
        }
    }
    ck_assert_int_ge(n_tok_keys, 4);
    gguf_close(f);
    gguf_close(v);
    unlink(path);
}
END_TEST

START_TEST(requantize) {
    struct synth_params p;
    tiny_params(&p, "llama", "f32");
    char src[256], dst[256];
    struct gguf_file *a = synth_open(&p, "rq-src", src, sizeof(src));
    tmp_path(dst, sizeof(dst), "rq-dst");
    struct strata_error err = {0};
    struct synth_report rep;
    ck_assert_msg(synth_quantize_file(src, dst, "q8_0", 2, &rep, &err) == 0, "%s", err.message);
    struct gguf_file *b = gguf_open(dst, &err);
    ck_assert_msg(b != NULL, "%s", err.message);
    ck_assert_uint_eq(kv_uint(b, "general.file_type"), 7);
    ck_assert_int_eq(gguf_n_tensors(a), gguf_n_tensors(b));
    ck_assert_int_eq(gguf_n_kv(a), gguf_n_kv(b));
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const struct gguf_tensor_info *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        if (ta->n_dims == 1) {
            ck_assert_uint_eq(tb->type, QUANT_F32);
            ck_assert(!memcmp(ta->data, tb->data, ta->n_bytes));
            continue;
        }
        ck_assert_uint_eq(tb->type, QUANT_Q8_0);
        /* q8_0: half a step (absmax/127/2) plus the f16 rounding of the step (127 * 2^-11) */
        int64_t n0 = ta->ne[0];
        float *y = malloc((size_t)n0 * sizeof(float));
        for (int64_t r = 0; r < ta->ne[1]; r += 7) {
            const float *x = (const float *)ta->data + r * n0;
            quant_dequantize_row(
                QUANT_Q8_0, (const uint8_t *)tb->data + r * quant_row_size(QUANT_Q8_0, n0), y, n0);
            for (int64_t i0 = 0; i0 < n0; i0 += 32) {
                float amax = 0;
                for (int k = 0; k < 32; k++)
                    amax = fmaxf(amax, fabsf(x[i0 + k]));
                for (int k = 0; k < 32; k++)
                    ck_assert(fabsf(x[i0 + k] - y[i0 + k]) <= amax / 127.0f * 0.6f + 1e-6f);
            }
        }
        free(y);
    }
    gguf_close(b);
    gguf_close(a);
    ck_assert_int_eq(synth_quantize_file(src, dst, "nope", 1, NULL, &err), STRATA_E_INVALID);
    ck_assert_int_eq(synth_quantize_file("/nonexistent.gguf", dst, "q8_0", 1, NULL, &err) < 0, 1);
    unlink(src);
    unlink(dst);
}
END_TEST

/* Routes every token embedding through layer 0's router (the embedding
 * stands in for the layer input) and returns the ratio of the most popular
 * expert's top-2 count to the 9th most popular one's. */
static double route_skew_ratio(double skew) {
    struct synth_params p;
    tiny_params(&p, "qwen3moe", "f32");
    p.n_vocab = 2048;
    p.n_expert = 16;
    p.n_expert_used = 2;
    p.n_ff_exp = 32;
    p.route_skew = skew;
    char path[256];
    struct gguf_file *f = synth_open(&p, "skew", path, sizeof(path));
    const struct gguf_tensor_info *e = tensor(f, "token_embd.weight");
    const struct gguf_tensor_info *g = tensor(f, "blk.0.ffn_gate_inp.weight");
    const float *E = e->data, *G = g->data;
    int count[16] = {0};
    for (int64_t t = 0; t < 2048; t++) {
        const float *x = E + t * 256;
        double ss = 0;
        for (int i = 0; i < 256; i++)
            ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / 256);
        double logit[16];
        for (int k = 0; k < 16; k++) {
            double s = 0;
            for (int i = 0; i < 256; i++)
                s += G[k * 256 + i] * x[i] * inv;
            logit[k] = s;
        }
        for (int pick = 0; pick < 2; pick++) {
            int best = 0;
            for (int k = 1; k < 16; k++)
                if (logit[k] > logit[best])
                    best = k;
            count[best]++;
            logit[best] = -1e30;
        }
    }
    gguf_close(f);
    unlink(path);
    /* sort descending */
    for (int i = 0; i < 16; i++)
        for (int j = i + 1; j < 16; j++)
            if (count[j] > count[i]) {
                int tmp = count[i];
                count[i] = count[j];
                count[j] = tmp;
            }
    return (double)count[0] / (double)(count[8] > 0 ? count[8] : 1);
}

START_TEST(route_skew_biases_experts) {
    /* sorted counts: rank 1 vs rank 9 should be ~9^S (Zipf) */
    double flat = route_skew_ratio(0.0), s1 = route_skew_ratio(1.0), s2 = route_skew_ratio(1.5);
    printf("route skew, layer-0 top-2 count rank1/rank9: S=0 %.2f (Zipf 1), S=1 %.2f (Zipf 9), "
           "S=1.5 %.2f (Zipf 27)\n",
           flat, s1, s2);
    ck_assert_msg(flat < 2.0, "no skew: %g", flat);
    ck_assert_msg(s1 > 9.0 / 2 && s1 < 9.0 * 2, "zipf:1: %g", s1);
    ck_assert_msg(s2 > 27.0 / 2 && s2 < 27.0 * 2, "zipf:1.5: %g", s2);
}
END_TEST

START_TEST(bad_params_are_errors) {
    struct synth_params p;
    struct strata_error err = {0};
    char path[256];
    tmp_path(path, sizeof(path), "bad");
    tiny_params(&p, "llama", "f16");
    p.n_head_kv = 3;
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_INVALID);
    p.n_head_kv = 5;
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_RANGE);
    tiny_params(&p, "llama", "f16");
    p.n_head = 3;
    p.n_head_kv = 3;
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_INVALID);
    tiny_params(&p, "gpt9", "f16");
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_UNSUPPORTED);
    tiny_params(&p, "qwen3moe", "f16");
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_INVALID);
    tiny_params(&p, "llama", "q9_9");
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_INVALID);
    tiny_params(&p, "llama", "f16");
    p.n_vocab = 100;
    ck_assert_int_eq(synth_write(&p, path, NULL, &err), STRATA_E_RANGE);
    ck_assert_int_eq(access(path, F_OK), -1);
    ck_assert_int_eq(synth_preset(&p, "gpt-5", &err), STRATA_E_NOT_FOUND);
    for (int i = 0; synth_preset_names[i]; i++)
        ck_assert_int_eq(synth_preset(&p, synth_preset_names[i], &err), 0);
}
END_TEST

static Suite *synth_suite(void) {
    Suite *s = suite_create("synth");
    TCase *tc = tcase_create("synth");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, llama_structure_and_scales);
    tcase_add_test(tc, deterministic_across_threads);
    tcase_add_test(tc, qwen_archs);
    tcase_add_test(tc, recipe_rules);
    tcase_add_test(tc, vocab_from_copies_tokenizer);
    tcase_add_test(tc, requantize);
    tcase_add_test(tc, route_skew_biases_experts);
    tcase_add_test(tc, bad_params_are_errors);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("synth", synth_suite)
