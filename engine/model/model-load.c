/* engine/model/model-load.c: architecture table, hyper-parameters from GGUF
 * metadata, and tensor binding with shape/type checks (see model.h). The
 * per-architecture facts (rope type, which tensors exist, whether top-k
 * weights are renormalised) follow llama.cpp's llama-arch.cpp / llama-model.cpp. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/core/buf.h"
#include "engine/core/progress.h"
#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/model-impl.h"
#include "engine/host/numa-homes.h"
#include "engine/host/pool.h"
#include "engine/experts/profile.h"
#include "engine/quant/quant.h"

struct arch_info {
    const char *name;
    enum model_rope_type rope;
    bool moe;       /* expert tensors required */
    bool shexp;     /* shared expert (qwen2moe) */
    bool norm_topk; /* renormalise top-k weights (llama.cpp build_moe_ffn norm_w) */
};

/* llama: normal rope (LLAMA_ROPE_TYPE_NORM); mixtral-style experts optional.
 * qwen2/qwen3/qwen2moe/qwen3moe: neox rope. qwen2moe passes norm_w = false. */
static const struct arch_info archs[] = {
    {"llama", MODEL_ROPE_NORMAL, false, false, true},
    {"qwen2", MODEL_ROPE_NEOX, false, false, true},
    {"qwen3", MODEL_ROPE_NEOX, false, false, true},
    {"qwen2moe", MODEL_ROPE_NEOX, true, true, false},
    {"qwen3moe", MODEL_ROPE_NEOX, true, false, true},
};

struct model_params model_params_default(void) {
    return (struct model_params){.backend = NULL,
                                 .backend_cold = NULL,
                                 .pool = NULL,
                                 .n_ctx_max = 0,
                                 .n_batch_max = 512,
                                 .profile = NULL,
                                 .prefault = true,
                                 .repack = true};
}

/* Prefault: the tensor data span cut in PREFAULT_CHUNK pieces, mapped by the
 * pool's threads (the kernel maps page-cache pages at ~13 GB/s per thread
 * here: olmoe-1b-7b Q4_K_M, 4.2 GB in the page cache, `strata run ... -t 2
 * --json` load_ms: 318 ms on one thread, 193-198 ms on the pool of 2). */
#define PREFAULT_CHUNK ((uintptr_t)32 << 20)
/* chunks a round (512 MB) between progress reports */
#define PREFAULT_ROUND 16

struct prefault_job {
    uintptr_t lo, hi; /* page-aligned start, end of the span */
    uintptr_t first;  /* first byte of tensor data (>= lo) */
    long page;
};

static void prefault_rows(void *ctx, int64_t r0, int64_t r1, int worker);

/* One round of the prefault: rows [base + r0, base + r1) of the job. */
struct prefault_round {
    const struct prefault_job *j;
    int64_t base;
};
static void prefault_round_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct prefault_round *r = ctx;
    prefault_rows((void *)r->j, r->base + r0, r->base + r1, worker);
}

static void prefault_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct prefault_job *j = ctx;
    uintptr_t a = j->lo + (uintptr_t)r0 * PREFAULT_CHUNK;
    uintptr_t b = j->lo + (uintptr_t)r1 * PREFAULT_CHUNK;
    if (b > j->hi)
        b = j->hi;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)a, b - a, MADV_POPULATE_READ) == 0 || errno != EINVAL)
        return;
#endif
    /* Kernel before 5.14 (EINVAL): one read per page; fault-around maps its neighbours. */
    uint8_t acc = 0;
    for (uintptr_t p = a; p < b; p += (uintptr_t)j->page) /* a tensor byte of each page */
        acc ^= *(const volatile uint8_t *)(p < j->first ? j->first : p);
    __asm__ volatile("" : : "r"(acc));
}

/* Whether weights of this size can all stay resident: at most 3/4 of RAM. */
static bool weights_fit_ram(uint64_t bytes) {
    const long page = sysconf(_SC_PAGESIZE), n_phys = sysconf(_SC_PHYS_PAGES);
    return page <= 0 || n_phys <= 0 || bytes / 3 * 4 <= (uint64_t)n_phys * (uint64_t)page;
}

/* Maps the pages of every tensor's data now, so decode does not take page
 * faults on weights it touches for the first time (each MoE token reads
 * experts no earlier token used). A hint: failures are ignored. */
static void prefault_weights(struct model *m) {
    const long page = sysconf(_SC_PAGESIZE);
    const long n_phys = sysconf(_SC_PHYS_PAGES);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(m->gguf, i);
        if (!t || !t->n_bytes)
            continue;
        uintptr_t a = (uintptr_t)t->data, b = a + t->n_bytes;
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
    }
    if (page <= 0 || lo >= hi)
        return;
    if (n_phys > 0 && (uint64_t)(hi - lo) / 3 * 4 > (uint64_t)n_phys * (uint64_t)page)
        return; /* more than 3/4 of RAM: most pages would be evicted again */
    struct prefault_job j = {
        .lo = lo & ~(uintptr_t)(page - 1), .hi = hi, .first = lo, .page = page};
    const int64_t n_rows = (int64_t)((j.hi - j.lo + PREFAULT_CHUNK - 1) / PREFAULT_CHUNK);
    /* in rounds of PREFAULT_ROUND chunks, so a load from a slow disk says
     * how far it is between them */
    const uint64_t total = (uint64_t)(j.hi - j.lo);
    strata_progress_report(m->params.progress, "mapping weights", 0, total);
    for (int64_t r0 = 0; r0 < n_rows; r0 += PREFAULT_ROUND) {
        const int64_t r1 = r0 + PREFAULT_ROUND < n_rows ? r0 + PREFAULT_ROUND : n_rows;
        if (m->params.pool) {
            struct prefault_round round = {&j, r0};
            struct pool_task t = {
                .fn = prefault_round_rows, .ctx = &round, .n_rows = r1 - r0, .min_grain = 1};
            pool_run(m->params.pool, &t, 1);
        } else {
            prefault_rows(&j, r0, r1, 0);
        }
        const uint64_t done = (uint64_t)r1 * PREFAULT_CHUNK;
        strata_progress_report(m->params.progress, "mapping weights", done < total ? done : total,
                               total);
    }
}

/* ---- metadata helpers ------------------------------------------------------- */

static int key_uint(const struct model *m, const char *suffix, int def, int lo, int hi, int *out,
                    bool required, struct strata_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    uint64_t v;
    int rc = gguf_get_uint(m->gguf, key, &v, err);
    if (rc == STRATA_E_NOT_FOUND && !required) {
        strata_error_clear(err);
        *out = def;
        return 0;
    }
    if (rc)
        return rc == STRATA_E_NOT_FOUND
                   ? strata_error_set(err, STRATA_E_FORMAT, "model: missing key %s", key)
                   : rc;
    if (v < (uint64_t)lo || v > (uint64_t)hi)
        return strata_error_set(err, STRATA_E_FORMAT, "model: %s = %llu outside [%d, %d]", key,
                                (unsigned long long)v, lo, hi);
    *out = (int)v;
    return 0;
}

static int key_float(const struct model *m, const char *suffix, float def, float *out,
                     struct strata_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    double v;
    int rc = gguf_get_float(m->gguf, key, &v, err);
    if (rc == STRATA_E_NOT_FOUND) {
        strata_error_clear(err);
        *out = def;
        return 0;
    }
    if (rc)
        return rc;
    if (!isfinite(v))
        return strata_error_set(err, STRATA_E_FORMAT, "model: %s is not finite", key);
    *out = (float)v;
    return 0;
}

static int32_t key_token(const struct model *m, const char *key) {
    uint64_t v;
    if (gguf_get_uint(m->gguf, key, &v, NULL) == 0 && v < (uint64_t)m->hp.n_vocab)
        return (int32_t)v;
    return -1;
}

/* ---- tensor binding --------------------------------------------------------- */

static const struct gguf_tensor_info *find(const struct model *m, int layer, const char *name) {
    char full[128];
    if (layer >= 0)
        snprintf(full, sizeof full, "blk.%d.%s", layer, name);
    else
        snprintf(full, sizeof full, "%s", name);
    return gguf_find_tensor(m->gguf, full);
}

/* Queues a weight for the one weights_bind call of the load; *dst gets its
 * handle then. */
static int add_bind(struct model *m, const struct backend_weight_desc *d,
                    struct backend_weight **dst, struct strata_error *err) {
    struct model_binds *b = &m->binds;
    if (strata_grow((void **)&b->desc, &b->cap, b->n + 1, sizeof *b->desc) < 0 ||
        strata_grow((void **)&b->dst, &b->cap_dst, b->n + 1, sizeof *b->dst) < 0)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
    b->desc[b->n] = *d;
    b->dst[b->n++] = dst;
    return 0;
}

/* The tensor's bytes as a host matrix of n_rows rows of n_cols. */
static struct backend_host_mat host_mat(const struct gguf_tensor_info *t, int64_t n_rows,
                                        int64_t n_cols) {
    const enum quant_type type = (enum quant_type)t->type;
    return (struct backend_host_mat){
        t->data, type, n_rows, n_cols, quant_row_size(type, n_cols), BACKEND_LAYOUT_ROWS};
}

/* Binds a 2-D weight (n_rows, n_cols) the backend multiplies. A 1-D tensor
 * binds as one row when n_rows == 1. required = false: absent leaves *out
 * NULL and returns 0 (present but wrong is still an error). */
static int bind_mat(struct model *m, int layer, const char *name, int64_t n_cols, int64_t n_rows,
                    bool required, struct backend_weight **out, struct strata_error *err) {
    *out = NULL;
    const struct gguf_tensor_info *t = find(m, layer, name);
    if (!t) {
        if (!required)
            return 0;
        return strata_error_set(err, STRATA_E_FORMAT, "model: missing tensor blk.%d.%s", layer,
                                name);
    }
    if (t->ne[0] != n_cols || t->ne[1] != n_rows || t->ne[2] != 1 || t->ne[3] != 1)
        return strata_error_set(
            err, STRATA_E_FORMAT,
            "model: tensor %.*s has shape [%lld, %lld, %lld], want [%lld, %lld]", (int)t->name.len,
            t->name.ptr, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
            (long long)n_cols, (long long)n_rows);
    const struct quant_traits *tr = quant_type_traits(t->type);
    size_t rb = tr ? quant_row_size((enum quant_type)t->type, n_cols) : 0;
    if (!rb ||
        !m->be->ops->supports(m->be->ctx, (enum quant_type)t->type, n_cols, BACKEND_USE_MATMUL))
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "model: tensor %.*s has unsupported type %s for matmul",
                                (int)t->name.len, t->name.ptr, quant_type_name(t->type));
    const struct backend_weight_desc d = {.name = name,
                                          .host = host_mat(t, n_rows, n_cols),
                                          .n_expert = 1,
                                          .use = BACKEND_USE_MATMUL,
                                          .in_layer = layer >= 0,
                                          .layer = layer};
    return add_bind(m, &d, out, err);
}

/* Binds a 1-D vector of n floats, converting to an owned f32 copy. */
static int bind_vec(struct model *m, int layer, const char *name, int64_t n, bool required,
                    struct backend_weight **out, struct strata_error *err) {
    *out = NULL;
    const struct gguf_tensor_info *t = find(m, layer, name);
    if (!t) {
        if (!required)
            return 0;
        return strata_error_set(err, STRATA_E_FORMAT, "model: missing tensor %s%s (layer %d)",
                                layer >= 0 ? "blk.N." : "", name, layer);
    }
    if (gguf_tensor_n_elements(t) != n)
        return strata_error_set(err, STRATA_E_FORMAT,
                                "model: tensor %.*s has %lld elements, want %lld", (int)t->name.len,
                                t->name.ptr, (long long)gguf_tensor_n_elements(t), (long long)n);
    if (strata_grow((void **)&m->owned_vecs, &m->cap_owned_vecs, (size_t)m->n_owned_vecs + 1,
                    sizeof *m->owned_vecs) < 0)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
    m->owned_vecs[m->n_owned_vecs++] = v;
    if (t->type == QUANT_F32)
        memcpy(v, t->data, (size_t)n * sizeof *v);
    else if (quant_row_size((enum quant_type)t->type, n) == 0 ||
             quant_dequantize_row((enum quant_type)t->type, t->data, v, n) != 0)
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "model: tensor %.*s: type %s",
                                (int)t->name.len, t->name.ptr, quant_type_name(t->type));
    const struct backend_weight_desc d = {
        .name = name,
        .host = {v, QUANT_F32, 1, n, (size_t)n * sizeof(float), BACKEND_LAYOUT_ROWS},
        .n_expert = 1,
        .use = BACKEND_USE_VEC,
        .in_layer = layer >= 0,
        .layer = layer};
    return add_bind(m, &d, out, err);
}

static int bind_layer(struct model *m, int il, const struct arch_info *ai,
                      struct strata_error *err) {
    const struct model_hparams *hp = &m->hp;
    struct model_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t nk = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    const int64_t no = (int64_t)hp->n_head * hp->head_dim_v;
    int rc;
    if ((rc = bind_vec(m, il, "attn_norm.weight", E, true, &L->attn_norm, err)) ||
        (rc = bind_mat(m, il, "attn_q.weight", E, nq, true, &L->wq, err)) ||
        (rc = bind_mat(m, il, "attn_k.weight", E, nk, true, &L->wk, err)) ||
        (rc = bind_mat(m, il, "attn_v.weight", E, nv, true, &L->wv, err)) ||
        (rc = bind_mat(m, il, "attn_output.weight", no, E, true, &L->wo, err)) ||
        (rc = bind_vec(m, il, "attn_q.bias", nq, false, &L->bq, err)) ||
        (rc = bind_vec(m, il, "attn_k.bias", nk, false, &L->bk, err)) ||
        (rc = bind_vec(m, il, "attn_v.bias", nv, false, &L->bv, err)) ||
        (rc = bind_vec(m, il, "attn_output.bias", E, false, &L->bo, err)) ||
        (rc = bind_vec(m, il, "attn_q_norm.weight", hp->head_dim_k, false, &L->q_norm, err)) ||
        (rc = bind_vec(m, il, "attn_k_norm.weight", hp->head_dim_k, false, &L->k_norm, err)) ||
        (rc = bind_vec(m, il, "ffn_norm.weight", E, true, &L->ffn_norm, err)))
        return rc;
    if (!strcmp(hp->arch, "qwen3") || !strcmp(hp->arch, "qwen3moe"))
        if (!find(m, il, "attn_q_norm.weight") || !find(m, il, "attn_k_norm.weight"))
            return strata_error_set(err, STRATA_E_FORMAT, "model: %s layer %d lacks attn_q_norm",
                                    hp->arch, il);
    if (hp->n_expert > 0) {
        L->has_moe = true;
        if ((rc = bind_mat(m, il, "ffn_gate_inp.weight", E, hp->n_expert, true, &L->gate_inp, err)))
            return rc;
        /* The expert tensors themselves are reached through experts.h; check
         * that each one exists with the expected shape. */
        static const char *const exps[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                            "ffn_down_exps.weight"};
        for (int w = 0; w < 3; w++) {
            const struct gguf_tensor_info *t = find(m, il, exps[w]);
            int64_t c = w == 2 ? hp->n_ff_exp : E, r = w == 2 ? E : hp->n_ff_exp;
            if (!t || t->ne[0] != c || t->ne[1] != r || t->ne[2] != hp->n_expert)
                return strata_error_set(err, STRATA_E_FORMAT,
                                        "model: blk.%d.%s missing or not [%lld, %lld, %d]", il,
                                        exps[w], (long long)c, (long long)r, hp->n_expert);
            if (!quant_type_traits(t->type) || !quant_row_size((enum quant_type)t->type, c) ||
                !m->be->ops->supports(m->be->ctx, (enum quant_type)t->type, c, BACKEND_USE_MATMUL))
                return strata_error_set(err, STRATA_E_UNSUPPORTED, "model: blk.%d.%s: type %s", il,
                                        exps[w], quant_type_name(t->type));
        }
        if (ai->shexp) {
            L->has_shexp = true;
            const int64_t S = hp->n_ff_shexp;
            if ((rc = bind_mat(m, il, "ffn_gate_shexp.weight", E, S, true, &L->gate_sh, err)) ||
                (rc = bind_mat(m, il, "ffn_up_shexp.weight", E, S, true, &L->up_sh, err)) ||
                (rc = bind_mat(m, il, "ffn_down_shexp.weight", S, E, true, &L->down_sh, err)) ||
                (rc = bind_mat(m, il, "ffn_gate_inp_shexp.weight", E, 1, true, &L->gate_inp_sh,
                               err)))
                return rc;
        }
        for (int w = 0; w < 3 && !m->params.xstore; w++) { /* for the backend's copy (the RAM
                                                              tier); the store reads its own */
            const struct gguf_tensor_info *t = find(m, il, exps[w]);
            const struct backend_weight_desc d = {.name = exps[w],
                                                  .host =
                                                      host_mat(t, t->ne[1] * t->ne[2], t->ne[0]),
                                                  .n_expert = t->ne[2],
                                                  .use = BACKEND_USE_MATMUL,
                                                  .in_layer = true,
                                                  .layer = il};
            if ((rc = add_bind(m, &d, &L->exps[w], err)))
                return rc;
        }
    } else {
        L->has_ffn = true;
        if ((rc = bind_mat(m, il, "ffn_gate.weight", E, hp->n_ff, true, &L->ffn_gate, err)) ||
            (rc = bind_mat(m, il, "ffn_up.weight", E, hp->n_ff, true, &L->ffn_up, err)) ||
            (rc = bind_mat(m, il, "ffn_down.weight", hp->n_ff, E, true, &L->ffn_down, err)))
            return rc;
    }
    return 0;
}

/* ---- hyper-parameters ------------------------------------------------------- */

static int read_rope_scaling(struct model *m, struct strata_error *err) {
    struct model_hparams *hp = &m->hp;
    char key[128], type[32] = "";
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    if (gguf_find_kv(m->gguf, key) >= 0) {
        int rc = gguf_get_str_buf(m->gguf, key, type, sizeof type, err);
        if (rc)
            return rc;
    }
    float factor = 0.0f;
    int rc = key_float(m, "rope.scaling.factor", 0.0f, &factor, err);
    if (rc)
        return rc;
    if (factor == 0.0f) { /* older files: rope.scale_linear */
        if ((rc = key_float(m, "rope.scale_linear", 0.0f, &factor, err)))
            return rc;
        if (factor != 0.0f && !type[0])
            snprintf(type, sizeof type, "linear");
    }
    if (!type[0] || !strcmp(type, "none")) {
        hp->rope_scaling = MODEL_ROPE_SCALING_NONE;
        factor = 0.0f;
    } else if (!strcmp(type, "linear")) {
        hp->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    } else if (!strcmp(type, "yarn")) {
        hp->rope_scaling = MODEL_ROPE_SCALING_YARN;
    } else {
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "model: rope scaling '%s'", type);
    }
    if (factor < 0.0f || (factor > 0.0f && factor < 1e-3f))
        return strata_error_set(err, STRATA_E_FORMAT, "model: rope scaling factor %g", factor);
    hp->rope_freq_scale = factor > 0.0f ? 1.0f / factor : 1.0f;
    return key_uint(m, "rope.scaling.original_context_length", hp->n_ctx_train, 1, 1 << 24,
                    &hp->rope_n_ctx_orig, false, err);
}

static int read_hparams(struct model *m, const struct arch_info *ai, struct strata_error *err) {
    struct model_hparams *hp = &m->hp;
    int rc;
    const struct gguf_tensor_info *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return strata_error_set(err, STRATA_E_FORMAT, "model: token_embd.weight missing or bad");
    hp->n_vocab = (int)te->ne[1];
    if ((rc = key_uint(m, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train, false, err)) ||
        (rc = key_uint(m, "embedding_length", 0, 1, 1 << 16, &hp->n_embd, true, err)) ||
        (rc = key_uint(m, "block_count", 0, 1, 4096, &hp->n_layer, true, err)) ||
        (rc = key_uint(m, "attention.head_count", 0, 1, 4096, &hp->n_head, true, err)) ||
        (rc = key_uint(m, "attention.head_count_kv", hp->n_head, 1, hp->n_head, &hp->n_head_kv,
                       false, err)) ||
        (rc = key_uint(m, "attention.key_length", hp->n_embd / hp->n_head, 1, MODEL_MAX_HEAD_DIM,
                       &hp->head_dim_k, false, err)) ||
        (rc = key_uint(m, "attention.value_length", hp->head_dim_k, 1, MODEL_MAX_HEAD_DIM,
                       &hp->head_dim_v, false, err)) ||
        (rc = key_uint(m, "rope.dimension_count", hp->head_dim_k, 0, hp->head_dim_k, &hp->n_rot,
                       false, err)) ||
        (rc = key_uint(m, "expert_count", 0, 0, 65536, &hp->n_expert, false, err)) ||
        (rc = key_uint(m, "expert_used_count", 0, 0, MODEL_MAX_EXPERT_USED, &hp->n_expert_used,
                       false, err)) ||
        (rc = key_uint(m, "feed_forward_length", 0, 0, 1 << 20, &hp->n_ff, false, err)) ||
        (rc = key_float(m, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->norm_eps, err)) ||
        (rc = key_float(m, "rope.freq_base", 10000.0f, &hp->rope_freq_base, err)))
        return rc;
    if (hp->n_head % hp->n_head_kv)
        return strata_error_set(err, STRATA_E_FORMAT,
                                "model: %d heads not a multiple of %d KV heads", hp->n_head,
                                hp->n_head_kv);
    if (hp->n_rot % 2 || hp->n_rot == 0)
        return strata_error_set(err, STRATA_E_FORMAT, "model: rope dimension %d", hp->n_rot);
    if (hp->rope_freq_base <= 0.0f || hp->norm_eps < 0.0f)
        return strata_error_set(err, STRATA_E_FORMAT, "model: bad rope base or norm eps");
    if (ai->moe && hp->n_expert == 0)
        return strata_error_set(err, STRATA_E_FORMAT, "model: %s without expert_count", hp->arch);
    if (hp->n_expert > 0) {
        if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
            return strata_error_set(err, STRATA_E_FORMAT, "model: expert_used_count %d of %d",
                                    hp->n_expert_used, hp->n_expert);
        /* Width from the tensor (authoritative; the key is optional for mixtral). */
        const struct gguf_tensor_info *t = gguf_find_tensor(m->gguf, "blk.0.ffn_gate_exps.weight");
        if (!t || t->ne[1] < 1 || t->ne[1] > (1 << 20))
            return strata_error_set(err, STRATA_E_FORMAT, "model: blk.0.ffn_gate_exps missing");
        hp->n_ff_exp = (int)t->ne[1];
        if (ai->shexp) { /* width from the tensor; the key is optional in llama.cpp */
            const struct gguf_tensor_info *ts =
                gguf_find_tensor(m->gguf, "blk.0.ffn_gate_shexp.weight");
            if (!ts || ts->ne[1] < 1 || ts->ne[1] > (1 << 20))
                return strata_error_set(err, STRATA_E_FORMAT,
                                        "model: blk.0.ffn_gate_shexp.weight missing");
            hp->n_ff_shexp = (int)ts->ne[1];
        }
        /* Renormalisation is fixed per architecture in llama.cpp (build_moe_ffn
         * norm_w); expert_weights_scale multiplies the weights when not 0 or 1. */
        hp->norm_topk_prob = ai->norm_topk;
        if ((rc = key_float(m, "expert_weights_scale", 0.0f, &hp->expert_weights_scale, err)))
            return rc;
    } else if (hp->n_ff < 1) {
        return strata_error_set(err, STRATA_E_FORMAT, "model: feed_forward_length missing");
    }
    hp->rope_type = ai->rope;
    if ((rc = read_rope_scaling(m, err)))
        return rc;
    hp->bos_token_id = key_token(m, "tokenizer.ggml.bos_token_id");
    hp->eos_token_id = key_token(m, "tokenizer.ggml.eos_token_id");
    /* llama.cpp's enum llama_pooling_type: 0 none .. 4 rank; absent = -1 */
    return key_uint(m, "pooling_type", -1, 0, 4, &hp->pooling_type, false, err);
}

/* ---- binding ------------------------------------------------------------------ */

/* Hands every queued weight to the backend in one call (one arena: the
 * backend copies when `copy`), then puts a RAM tier over the backend's copy
 * of the routed experts in front of the file tier, and the caller's front
 * tier (params.experts_front) before both. */
static int model_bind_weights(struct model *m, bool copy, struct strata_error *err) {
    struct model_binds *b = &m->binds;
    const struct backend_ops *be = m->be->ops;
    struct backend_weight **h = calloc(b->n ? b->n : 1, sizeof *h);
    if (!h)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
    const struct backend_bind_params bp = {
        .copy = copy, .drop_source = true, .progress = m->params.progress};
    m->wset = be->weights_bind(m->be->ctx, b->desc, (int)b->n, &bp, h, &m->bound, err);
    if (!m->wset) {
        free(h);
        return err ? err->code : STRATA_E_INVALID;
    }
    for (size_t i = 0; i < b->n; i++)
        *b->dst[i] = h[i];
    free(h);
    free(b->desc), free(b->dst);
    *b = (struct model_binds){0};
    for (int il = 0; m->experts && be->weight_host && il < m->hp.n_layer; il++) {
        static const char *const exps[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                            "ffn_down_exps.weight"};
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            struct backend_host_mat v;
            const struct model_layer *L = &m->layers[il];
            if (!L->exps[w] || be->weight_host(m->be->ctx, L->exps[w], -1, &v) ||
                v.data == find(m, il, exps[w])->data)
                continue; /* not copied: the file tier serves it */
            if (experts_ram_place(m->experts, il, w, &v) == 0)
                continue; /* the head is the RAM tier already */
            if (!(m->experts = experts_ram_init(m->experts, err))) /* the first copy */
                return err ? err->code : STRATA_E_NOMEM;
            if (experts_ram_place(m->experts, il, w, &v))
                return strata_error_set(err, STRATA_E_INTERNAL, "model: blk.%d.%s: no RAM tier", il,
                                        exps[w]);
        }
    }
    /* a backend that keeps the stacks where no host view reaches them (a GPU):
     * a device tier in front serves them as bound weights */
    for (int il = 0; m->experts && !be->weight_host && il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            if (!L->exps[w])
                continue;
            if (experts_device_place(m->experts, il, w, L->exps[w]) == 0)
                continue; /* the head is the device tier already */
            if (!(m->experts = experts_device_init(m->experts, err)))
                return err ? err->code : STRATA_E_NOMEM;
            if (experts_device_place(m->experts, il, w, L->exps[w]))
                return strata_error_set(err, STRATA_E_INTERNAL, "model: blk.%d: no device tier",
                                        il);
        }
    }
    if (m->experts && m->params.experts_front) {
        m->experts = m->params.experts_front(m->params.experts_front_arg, m->experts, err);
        if (!m->experts)
            return err && err->code ? err->code : STRATA_E_INVALID;
    }
    return 0;
}

/* ---- load ------------------------------------------------------------------- */

/* Opens the file into m->gguf and reads m->hp: the architecture's entry,
 * or NULL with err. */
static const struct arch_info *open_header(struct model *m, const char *path,
                                           struct strata_error *err) {
    m->gguf = gguf_open(path, err);
    if (!m->gguf)
        return NULL;
    if (gguf_get_str_buf(m->gguf, "general.architecture", m->hp.arch, sizeof m->hp.arch, err)) {
        strata_error_prefix(err, "model");
        return NULL;
    }
    const struct arch_info *ai = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, m->hp.arch))
            ai = &archs[i];
    if (!ai) {
        strata_error_set(err, STRATA_E_UNSUPPORTED, "model: unsupported architecture '%s'",
                         m->hp.arch);
        return NULL;
    }
    return read_hparams(m, ai, err) ? NULL : ai;
}

int model_probe(const char *path, struct model_probe *out, struct strata_error *err) {
    if (!path || !out)
        return strata_error_set(err, STRATA_E_INVALID, "model_probe: bad arguments");
    struct model m = {0};
    const struct arch_info *ai = open_header(&m, path, err);
    if (ai) {
        *out = (struct model_probe){.hp = m.hp};
        for (int64_t i = 0; i < gguf_n_tensors(m.gguf); i++) {
            const struct gguf_tensor_info *t = gguf_tensor_at(m.gguf, i);
            if (!t)
                continue;
            int64_t n = 1;
            for (uint32_t d = 0; d < t->n_dims; d++)
                n *= (int64_t)t->ne[d];
            out->n_params += n;
            out->n_bytes += t->n_bytes;
        }
    }
    gguf_close(m.gguf);
    return ai ? 0 : (err && err->code ? err->code : STRATA_E_FORMAT);
}

struct model *model_load(const char *path, const struct model_params *params,
                         struct strata_error *err) {
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
        return NULL;
    }
    m->params = params ? *params : model_params_default();
    if (m->params.n_batch_max <= 0)
        m->params.n_batch_max = 512;
    if (m->params.n_batch_max > 65536 || m->params.n_ctx_max < 0) {
        strata_error_set(err, STRATA_E_RANGE, "model: n_batch_max or n_ctx_max out of range");
        goto fail;
    }
    m->be = m->params.backend;
    if (!m->be || !m->be->ops) {
        strata_error_set(err, STRATA_E_INVALID,
                         "model: model_params.backend is NULL (make one, e.g. backend_cpu_init)");
        goto fail;
    }
    const struct arch_info *ai = open_header(m, path, err);
    if (!ai)
        goto fail;
    struct model_hparams *hp = &m->hp;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(m, il, ai, err))
            goto fail;
    const struct gguf_tensor_info *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (te->ne[0] != hp->n_embd || !quant_type_traits(te->type)->can_dequantize ||
        !m->be->ops->supports(m->be->ctx, (enum quant_type)te->type, hp->n_embd,
                              BACKEND_USE_ROWS)) {
        strata_error_set(err, STRATA_E_UNSUPPORTED, "model: token_embd.weight shape or type %s",
                         quant_type_name(te->type));
        goto fail;
    }
    const struct backend_weight_desc ed = {.name = "token_embd.weight",
                                           .host = host_mat(te, hp->n_vocab, hp->n_embd),
                                           .n_expert = 1,
                                           .use = BACKEND_USE_ROWS};
    if (add_bind(m, &ed, &m->tok_embd, err) ||
        bind_vec(m, -1, "output_norm.weight", hp->n_embd, true, &m->output_norm, err) ||
        bind_mat(m, -1, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output, err))
        goto fail;
    if (!gguf_find_tensor(m->gguf, "output.weight")) {
        hp->tied_output = true;
        if (bind_mat(m, -1, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->output, err))
            goto fail;
    }
    if (gguf_find_tensor(m->gguf, "rope_freqs.weight")) {
        if (bind_vec(m, -1, "rope_freqs.weight", hp->n_rot / 2, true, &m->rope_freqs, err))
            goto fail;
        hp->has_rope_freqs = true;
    }
    if (hp->n_expert > 0) {
        m->experts = experts_file_init(m->gguf, hp->n_layer, NULL, err);
        struct xstore_params xp = m->params.xstore ? *m->params.xstore : xstore_params_default();
        xp.pool = xp.pool ? xp.pool : m->params.pool; /* --numa split: slots per node */
        if (m->experts && m->params.xstore) /* the store in front, the file for its overflow */
            m->experts = xstore_init(m->gguf, hp->n_layer, hp->n_expert_used, m->experts, &xp, err);
        if (!m->experts)
            goto fail;
    }
    if (m->params.profile && hp->n_expert > 0 &&
        (profile_n_layer(m->params.profile) != hp->n_layer ||
         profile_n_expert(m->params.profile) != hp->n_expert)) {
        strata_error_set(err, STRATA_E_INVALID, "model: profile shape does not match %d x %d",
                         hp->n_layer, hp->n_expert);
        goto fail;
    }
    uint64_t skeleton = 0; /* what the backend binds: all but the store's experts */
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(m->gguf, i);
        m->weight_bytes += t->n_bytes;
        static const char tail[] = "_exps.weight"; /* a routed expert stack */
        const uint64_t n = sizeof tail - 1;
        if (!m->params.xstore || t->name.len < n ||
            memcmp(t->name.ptr + t->name.len - n, tail, n) != 0)
            skeleton += t->n_bytes;
    }
    if (m->params.prefault && !m->params.xstore) /* the store keeps experts out of RSS */
        prefault_weights(m);
    /* The backend may copy the weights (the CPU's arena) when they fit: at
     * most 3/4 of RAM and half the memory budget (the KV pool may take the
     * other half, server/sched.c); otherwise the file's pages stay the only
     * copy (the expert store's case). */
    const bool copy = m->params.repack && weights_fit_ram(skeleton) &&
                      (m->params.mem_budget <= 0 || skeleton <= (uint64_t)m->params.mem_budget / 2);
    if (model_bind_weights(m, copy, err))
        goto fail;
    if (m->params.n_ctx_max == 0)
        m->params.n_ctx_max = hp->n_ctx_train < (1 << 20) ? hp->n_ctx_train : (1 << 20);
    m->rope = (struct backend_rope){
        .n_rot = hp->n_rot,
        .mode = hp->rope_type,
        .freq_base = hp->rope_freq_base,
        .freq_scale = hp->rope_freq_scale,
        .ext_factor = hp->rope_scaling == MODEL_ROPE_SCALING_YARN ? 1.0f : 0.0f,
        .attn_factor = 1.0f,
        .n_ctx_orig = hp->rope_n_ctx_orig,
        .freq_factors = m->rope_freqs,
    };
    m->fwd = model_fwd_init(m, err);
    if (!m->fwd)
        goto fail;
    return m;
fail:
    model_free(m);
    return NULL;
}

void model_free(struct model *m) {
    if (!m)
        return;
    model_fwd_free(m, m->fwd);
    experts_free(m->experts); /* its RAM tier points into the backend's copy */
    if (m->wset)
        m->be->ops->weights_free(m->be->ctx, m->wset);
    free(m->binds.desc);
    free(m->binds.dst);
    for (int i = 0; i < m->n_owned_vecs; i++)
        free(m->owned_vecs[i]);
    free(m->owned_vecs);
    free(m->layers);
    /* file-mapped experts placed on a node (model-numa.c) */
    if (m->gguf)
        host_numa_homes_remove_within(gguf_file_base(m->gguf), gguf_file_size(m->gguf));
    gguf_close(m->gguf);
    free(m);
}

const struct model_hparams *model_hparams(const struct model *m) {
    return &m->hp;
}

uint64_t model_packed_bytes(const struct model *m) {
    return m->bound.packed_bytes;
}
uint64_t model_copied_bytes(const struct model *m) {
    return m->bound.copied_bytes;
}
const char *model_weights_layout(const struct model *m) {
    return m->bound.packed_bytes ? "arena+packed" : m->bound.copied_bytes ? "arena" : "file";
}
struct experts_source *model_experts(const struct model *m) {
    return m->experts;
}
const char *model_arch_name(const struct model *m) {
    return m->hp.arch;
}
int model_n_vocab(const struct model *m) {
    return m->hp.n_vocab;
}
int model_n_ctx_train(const struct model *m) {
    return m->hp.n_ctx_train;
}
int model_n_ctx_max(const struct model *m) {
    return m->params.n_ctx_max;
}
int model_n_batch_max(const struct model *m) {
    return m->params.n_batch_max;
}
bool model_is_moe(const struct model *m) {
    return m->hp.n_expert > 0;
}
const struct gguf_file *model_gguf(const struct model *m) {
    return m->gguf;
}
uint64_t model_weight_bytes(const struct model *m) {
    return m->weight_bytes;
}

int model_weight_types(const struct model *m, struct model_weight_type *out, int cap) {
    /* the distinct types of one file are few (a handful): a linear table */
    struct model_weight_type seen[64];
    int n = 0;
    const int64_t n_tensors = gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n_tensors; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(m->gguf, i);
        if (!t)
            continue;
        int k = 0;
        while (k < n && seen[k].type != t->type)
            k++;
        if (k == n) {
            if (n == (int)(sizeof(seen) / sizeof(seen[0])))
                continue; /* not reached: QUANT_TYPE_COUNT is 40 */
            seen[n++] = (struct model_weight_type){t->type, 0, 0, quant_type_name(t->type)};
        }
        seen[k].n_tensors++;
        seen[k].n_bytes += t->n_bytes;
    }
    for (int a = 1; a < n; a++) /* insertion sort: most bytes first */
        for (int b = a; b > 0; b--) {
            struct model_weight_type *x = &seen[b - 1], *y = &seen[b];
            if (x->n_bytes > y->n_bytes || (x->n_bytes == y->n_bytes && x->type < y->type))
                break;
            struct model_weight_type tmp = *x;
            *x = *y;
            *y = tmp;
        }
    for (int k = 0; k < n && k < cap && out; k++)
        out[k] = seen[k];
    return n;
}

struct kv_cache *model_kv_init(const struct model *m, int n_seq_max, int n_ctx,
                               struct strata_error *err) {
    if (n_ctx <= 0)
        n_ctx = m->params.n_ctx_max;
    struct kv_params kp = {
        .n_layer = m->hp.n_layer,
        .n_seq_max = n_seq_max,
        .n_ctx = n_ctx,
        .n_embd_k = m->hp.n_head_kv * m->hp.head_dim_k,
        .n_embd_v = m->hp.n_head_kv * m->hp.head_dim_v,
        .n_head_kv = m->hp.n_head_kv,
    };
    return model_kv_init_params(m, &kp, err);
}

struct kv_cache *model_kv_init_params(const struct model *m, const struct kv_params *params,
                                      struct strata_error *err) {
    struct kv_store *store = m->be->ops->kv_store_init(m->be->ctx, err);
    return store ? kv_init_store(params, store, err) : NULL;
}

int model_set_profile(struct model *m, struct profile *p, struct strata_error *err) {
    if (p && (m->hp.n_expert <= 0 || profile_n_layer(p) != m->hp.n_layer ||
              profile_n_expert(p) != m->hp.n_expert))
        return strata_error_set(
            err, STRATA_E_INVALID, "model: profile %d x %d does not match %d layers x %d experts",
            profile_n_layer(p), profile_n_expert(p), m->hp.n_layer, m->hp.n_expert);
    m->params.profile = p;
    return 0;
}
