/* engine/cpu/backend-cpu.c: the CPU implementation of backend.h: matmuls through
 * kernels_matmul on row ranges from the pool (several matrices share one
 * dispatch), ops.h for the rest, parallel over rows / (token, head) pairs.
 * Small elementwise jobs run on the calling thread: a dispatch costs more
 * than normalising one 64-wide row. */
#include "engine/backend/backend.h"

#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv.h"
#include "engine/host/pool.h"
#include "engine/quant/quant.h"

/* Per-worker attention scratch. */
struct cpu_scratch {
    const uint16_t **k_rows; /* (cap) */
    const uint16_t **v_rows; /* (cap) */
    float *scores;           /* (OPS_ATTN_GROUP_MAX, cap) */
    int cap;
};

struct cpu_ctx {
    struct pool *pool; /* borrowed, may be NULL */
    int n_workers;
    struct cpu_scratch *scratch; /* (n_workers) */
};

/* Elements below which an elementwise op runs inline (one dispatch costs
 * about as much as ~16k multiply-adds on the 2-core dev box). */
#define CPU_INLINE_ELEMS 16384
/* Weight bytes x tokens below which a matmul dispatch runs inline: waking a
 * worker costs ~0.1-0.5 ms on the shared 2-core dev box, more than streaming
 * 256 KiB. Measured: stories260K decode, 2 threads, every 64x64 matmul
 * dispatched: 61-70 tok/s vs 1154 tok/s on 1 thread (bench-model, load ~9). */
#define CPU_INLINE_MATMUL_BYTES (256u * 1024u)

static void run_tasks(struct cpu_ctx *c, struct pool_task *t, int n) {
    if (c->pool) {
        pool_run(c->pool, t, n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (t[i].n_rows > 0)
            t[i].fn(t[i].ctx, 0, t[i].n_rows, 0);
}

/* ---- matmul ----------------------------------------------------------------- */

/* Rows per pool row: a packed matrix (kernels_pack) is split in whole
 * 16-row groups, so no group is computed by two threads. */
static int64_t matmul_unit(const struct kern_mat *w) {
    return w->packed ? KERNELS_PACK_ROWS : 1;
}

static void matmul_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct backend_matmul *j = ctx;
    const int64_t u = matmul_unit(j->w);
    kernels_matmul(j->w, j->xq, j->xq_stride, j->n_tok, j->y, j->ldy, r0 * u, r1 * u);
}

/* Decode matmuls (n_tok < CPU_GEMM_TOK) cap a chunk at CPU_CHUNK_BYTES of
 * weights, so that when one thread has finished the other is at most that
 * far from the end: 4 chunks a thread made 27 MB chunks of llama-3.2-1b's
 * 128k-row Q6_K output matrix (~1 ms of streaming each). Measured (dev box,
 * `strata run --ids 1 -n 65 -t 2`, alternated pairs under the bench lock with
 * no compiler running, gen_tok_s uncapped/capped): llama-3.2-1b Q4_K_M 61.1/61.7
 * 60.8/62.1; Q4_0 52.0/50.1 52.5/54.4 54.2/54.3; olmoe (-n 129) 49.6/47.4
 * 50.4/49.9 49.7/50.2: within noise, kept because it bounds the tail. A 256 KiB
 * cap was slower (pool.c). */
#define CPU_CHUNK_BYTES ((size_t)4 << 20)
#define CPU_GEMM_TOK 8

static int64_t decode_max_grain(const struct backend_matmul *j) {
    if (j->n_tok >= CPU_GEMM_TOK || j->w->row_bytes == 0)
        return 0;
    int64_t g = (int64_t)(CPU_CHUNK_BYTES / (j->w->row_bytes * (size_t)j->n_tok));
    return g < 32 ? 32 : g;
}

static void cpu_matmul(void *ctx, const struct backend_matmul *jobs, int n_jobs) {
    struct pool_task stack[16];
    struct pool_task *t = n_jobs <= 16 ? stack : malloc((size_t)n_jobs * sizeof *t);
    if (!t) { /* out of memory for the task list: run serially, same results */
        for (int i = 0; i < n_jobs; i++)
            matmul_rows((void *)&jobs[i], 0, jobs[i].w->n_rows / matmul_unit(jobs[i].w), 0);
        return;
    }
    uint64_t work = 0;
    for (int i = 0; i < n_jobs; i++) {
        const int64_t u = matmul_unit(jobs[i].w), mg = decode_max_grain(&jobs[i]);
        t[i] = (struct pool_task){.fn = matmul_rows,
                                  .ctx = (void *)&jobs[i],
                                  .n_rows = jobs[i].w->n_rows / u,
                                  .min_grain = u > 1 ? 2 : 0, /* 32 rows, the pool's floor */
                                  .max_grain = mg > 0 && mg / u < 1 ? 1 : mg / u};
        work += (uint64_t)jobs[i].w->n_rows * jobs[i].w->row_bytes * (uint64_t)jobs[i].n_tok;
    }
    if (work < CPU_INLINE_MATMUL_BYTES) {
        struct cpu_ctx serial = *(struct cpu_ctx *)ctx;
        serial.pool = NULL;
        run_tasks(&serial, t, n_jobs);
    } else {
        run_tasks(ctx, t, n_jobs);
    }
    if (t != stack)
        free(t);
}

/* ---- quantize_act ----------------------------------------------------------- */

/* Activation quantization cuts each row into `per_row` pieces of whole
 * blocks (blocks are quantized independently, so the bytes are the same as
 * one call per row) and hands the pieces to the pool. Decode quantizes one
 * 2048-wide row per matrix, and the Q8_K quantizer costs ~2.2 ns a value
 * (a tight loop over one 8192-value row, 1 thread, release, this box): one
 * row stays on the forward thread for ~4.5 us while the workers wait.
 * Pieces are at least QUANT_PIECE values; jobs under QUANT_INLINE values run
 * inline. Measured with the MoE change that quantizes a token's input once
 * (model-forward.c), `perf record` of olmoe-1b-7b Q4_K_M `strata run --ids 1
 * -n 257 -t 2`: quant_quantize_q8_K 2.4% of cycles, all on the forward
 * thread -> 1.5% shared by both threads; the worker's idle spin 4.1% -> 2.9%. */
#define QUANT_PIECE 1024
#define QUANT_INLINE 2048

struct quant_job {
    enum quant_type wtype;
    const float *x;
    int64_t n_cols;
    void *xq;
    size_t stride;
    int64_t per_row;    /* pieces per row */
    int64_t piece_cols; /* values per piece (whole blocks; the last piece may be shorter) */
    size_t piece_bytes; /* quantized bytes of a full piece */
};

static void quant_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct quant_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t row = r / j->per_row, piece = r % j->per_row;
        const int64_t c0 = piece * j->piece_cols;
        const int64_t nc = j->n_cols - c0 < j->piece_cols ? j->n_cols - c0 : j->piece_cols;
        kernels_quantize_act(j->wtype, j->x + row * j->n_cols + c0,
                             (uint8_t *)j->xq + row * j->stride + (size_t)piece * j->piece_bytes,
                             nc);
    }
}

static void cpu_quantize_act(void *ctx, enum quant_type wtype, const float *x, int64_t n_rows,
                             int64_t n_cols, void *xq, size_t xq_stride) {
    struct cpu_ctx *c = ctx;
    struct quant_job j = {wtype, x, n_cols, xq, xq_stride, 1, n_cols, 0};
    const enum quant_type at = kernels_act_type(wtype);
    const struct quant_traits *tr = quant_type_traits(at);
    if (!c->pool || at == QUANT_F32 || !tr || n_rows * n_cols < QUANT_INLINE) {
        quant_rows(&j, 0, n_rows, 0);
        return;
    }
    /* Rows of whole blocks are cut into pieces of bp blocks (enough for
     * QUANT_PIECE values, at most the row); other rows stay one piece (j's
     * initial values). */
    const int64_t nb = n_cols / tr->block_size;
    if (nb > 0 && n_cols % tr->block_size == 0) {
        int64_t bp = (QUANT_PIECE + tr->block_size - 1) / tr->block_size;
        if (bp > nb)
            bp = nb;
        j.piece_cols = bp * tr->block_size;
        j.piece_bytes = (size_t)bp * tr->type_size;
        j.per_row = (nb + bp - 1) / bp;
    }
    struct pool_task t = {
        .fn = quant_rows, .ctx = &j, .n_rows = n_rows * j.per_row, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

/* ---- rmsnorm / swiglu / rope ------------------------------------------------ */

struct row_job {
    const float *x, *w, *u;
    float *y;
    int64_t n_cols;
    float eps;
    /* rope */
    int n_head, head_dim;
    const int32_t *pos;
    const struct ops_rope_cfg *cfg;
};

static void rmsnorm_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        ops_rmsnorm(j->x + r * j->n_cols, j->w, j->y + r * j->n_cols, j->n_cols, j->eps);
}

static void swiglu_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        ops_swiglu(j->x + r * j->n_cols, j->u + r * j->n_cols, j->y + r * j->n_cols, j->n_cols);
}

static void rope_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        ops_rope(j->y + r * (int64_t)j->n_head * j->head_dim, j->n_head, j->head_dim, j->pos[r],
                 j->cfg);
}

static void run_rows(struct cpu_ctx *c, pool_rows_fn fn, struct row_job *j, int64_t n_rows,
                     int64_t elems) {
    if (elems < CPU_INLINE_ELEMS || !c->pool) {
        fn(j, 0, n_rows, 0);
        return;
    }
    struct pool_task t = {.fn = fn, .ctx = j, .n_rows = n_rows, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

static void cpu_rmsnorm(void *ctx, const float *x, const float *w, float *y, int64_t n_rows,
                        int64_t n_cols, float eps) {
    struct row_job j = {.x = x, .w = w, .y = y, .n_cols = n_cols, .eps = eps};
    run_rows(ctx, rmsnorm_rows, &j, n_rows, n_rows * n_cols);
}

/* SwiGLU pieces: SWIGLU_PIECE columns of one row (a multiple of 8, so each
 * piece's vector/tail split is the whole row's and the bits do not change);
 * jobs of SWIGLU_INLINE values or more go to the pool. The exp costs ~1 ns a
 * value: olmoe's 8 x 1024 expert rows or a dense 8192-wide decode row kept the
 * workers waiting ~4-8 us a layer when run inline. */
#define SWIGLU_PIECE 2048
#define SWIGLU_INLINE 4096

static void swiglu_pieces(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct row_job *j = ctx;
    const int64_t per_row = (j->n_cols + SWIGLU_PIECE - 1) / SWIGLU_PIECE;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t c0 = (r % per_row) * SWIGLU_PIECE;
        const int64_t nc = j->n_cols - c0 < SWIGLU_PIECE ? j->n_cols - c0 : SWIGLU_PIECE;
        const int64_t o = (r / per_row) * j->n_cols + c0;
        ops_swiglu(j->x + o, j->u + o, j->y + o, nc);
    }
}

static void cpu_swiglu(void *ctx, const float *g, const float *u, float *y, int64_t n_rows,
                       int64_t n_cols) {
    struct cpu_ctx *c = ctx;
    struct row_job j = {.x = g, .u = u, .y = y, .n_cols = n_cols};
    if (!c->pool || n_rows * n_cols < SWIGLU_INLINE || n_cols < 1) {
        swiglu_rows(&j, 0, n_rows, 0);
        return;
    }
    const int64_t per_row = (n_cols + SWIGLU_PIECE - 1) / SWIGLU_PIECE;
    struct pool_task t = {
        .fn = swiglu_pieces, .ctx = &j, .n_rows = n_rows * per_row, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

static void cpu_rope(void *ctx, float *x, int64_t n_tok, int n_head, int head_dim,
                     const int32_t *pos, const struct ops_rope_cfg *cfg) {
    struct row_job j = {.y = x, .n_head = n_head, .head_dim = head_dim, .pos = pos, .cfg = cfg};
    run_rows(ctx, rope_rows, &j, n_tok, n_tok * n_head * head_dim * 8);
}

/* ---- attention -------------------------------------------------------------- */

struct attn_job {
    const struct backend_attn *a;
    struct cpu_ctx *c;
};

/* Row r is (kv head hk = r / n_tok, token t = r % n_tok): the query heads of
 * one KV head go through ops_attn_group together, so each K/V row is read
 * and converted once per group instead of once per query head (4x fewer for
 * llama-3.2-1b's 32/8 heads), and a worker's consecutive rows share one KV
 * head's rows of a sequence, which stay in L2 across the tokens of a
 * prefill chunk (a cheap form of query x key tiling).
 * Measured on the 2-core dev box (AVX-512), release, 2 threads, llama-3.2-1b,
 * the same matmul kernels in both binaries (the old ops.c/backend-cpu.c of
 * commit 9a48289 vs this), alternated, best of 3 (other jobs kept the load at
 * ~3, single runs swing 2x):
 *   bench-model q4_0 MODEL 2 16 512 8: decode 8 seq at ~512 pos 213 -> 84.7 ms/step
 *     (37.5 -> 94.5 tok/s); 1 seq 40.2 -> 22.6 ms/step; prefill 512: 83.7 -> 240 tok/s
 *   strata run -m MODEL --ids <512 ids> -n 1 --temp 0 -t 2 --json, prompt_tok_s:
 *     q4_0 67.4 -> 234; q4_k_m 59.3 -> 74.4 (best of 2)
 * perf after (bench-model q4_0 2 48 512 8): attention 5.3% of cycles, matmuls 90%. */
static void attn_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct attn_job *j = ctx;
    const struct backend_attn *a = j->a;
    struct cpu_scratch *s = &j->c->scratch[worker];
    const int group = a->n_head / a->n_head_kv;
    /* the paged KV cache keeps a block's rows contiguous (kv.h): one lookup a block */
    const struct kv_params *kp = kv_get_params(a->kv);
    const int nb = kp->n_block;
    const size_t sk = kv_k_stride(a->kv), sv = kv_v_stride(a->kv);
    for (int64_t r = r0; r < r1; r++) {
        const int hk = (int)(r / a->n_tok), t = (int)(r % a->n_tok);
        const int n_kv = a->pos[t] + 1;
        for (int p = 0; p < n_kv;) {
            const uint16_t *k0 = kv_k_head(a->kv, a->layer, a->seq_id[t], p, hk, a->head_dim_k);
            const uint16_t *v0 = kv_v_head(a->kv, a->layer, a->seq_id[t], p, hk, a->head_dim_v);
            int run = nb - p % nb;
            if (run > n_kv - p)
                run = n_kv - p;
            for (int i = 0; i < run; i++) {
                s->k_rows[p + i] = k0 + (size_t)i * sk;
                s->v_rows[p + i] = v0 + (size_t)i * sv;
            }
            p += run;
        }
        for (int g0 = 0; g0 < group; g0 += OPS_ATTN_GROUP_MAX) {
            const int h = hk * group + g0;
            const int ng = group - g0 < OPS_ATTN_GROUP_MAX ? group - g0 : OPS_ATTN_GROUP_MAX;
            ops_attn_group(a->q + ((size_t)t * a->n_head + h) * a->head_dim_k, ng, s->k_rows,
                           s->v_rows, n_kv, a->head_dim_k, a->head_dim_v, a->scale, s->scores,
                           a->out + ((size_t)t * a->n_head + h) * a->head_dim_v);
        }
    }
}

static int scratch_reserve(struct cpu_ctx *c, int n) {
    for (int w = 0; w < c->n_workers; w++) {
        struct cpu_scratch *s = &c->scratch[w];
        if (s->cap >= n)
            continue;
        int cap = n < 256 ? 256 : n;
        const uint16_t **k = realloc(s->k_rows, (size_t)cap * sizeof *k);
        if (k)
            s->k_rows = k;
        const uint16_t **v = realloc(s->v_rows, (size_t)cap * sizeof *v);
        if (v)
            s->v_rows = v;
        float *sc = realloc(s->scores, (size_t)cap * OPS_ATTN_GROUP_MAX * sizeof *sc);
        if (sc)
            s->scores = sc;
        if (!k || !v || !sc)
            return STRATA_E_NOMEM;
        s->cap = cap;
    }
    return 0;
}

static int cpu_reserve(void *ctx, int n_kv, struct strata_error *err) {
    if (scratch_reserve(ctx, n_kv))
        return strata_error_set(err, STRATA_E_NOMEM, "backend cpu: no memory for attention over %d",
                                n_kv);
    return 0;
}

static void cpu_attention(void *ctx, const struct backend_attn *a) {
    struct cpu_ctx *c = ctx;
    int max_kv = 0;
    for (int t = 0; t < a->n_tok; t++)
        max_kv = a->pos[t] + 1 > max_kv ? a->pos[t] + 1 : max_kv;
    for (int w = 0; w < c->n_workers; w++) /* a caller bug: reserve first */
        STRATA_ASSERT(c->scratch[w].cap >= max_kv);
    struct attn_job j = {a, c};
    const int64_t rows = (int64_t)a->n_tok * a->n_head_kv;
    if (rows * (a->n_head / a->n_head_kv) * max_kv * (a->head_dim_k + a->head_dim_v) <
            CPU_INLINE_ELEMS * 4 ||
        !c->pool) {
        attn_rows(&j, 0, rows, 0);
        return;
    }
    struct pool_task t = {.fn = attn_rows, .ctx = &j, .n_rows = rows, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

/* ---- lifetime --------------------------------------------------------------- */

static void cpu_free(void *ctx) {
    struct cpu_ctx *c = ctx;
    if (!c)
        return;
    if (c->scratch)
        for (int w = 0; w < c->n_workers; w++) {
            free(c->scratch[w].k_rows);
            free(c->scratch[w].v_rows);
            free(c->scratch[w].scores);
        }
    free(c->scratch);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .matmul = cpu_matmul,
    .quantize_act = cpu_quantize_act,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .reserve = cpu_reserve,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .free = cpu_free,
};

struct backend *backend_cpu_init(struct pool *pool, struct strata_error *err) {
    kernels_init();
    struct backend *be = calloc(1, sizeof *be);
    struct cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c)
        goto fail;
    c->pool = pool;
    c->n_workers = pool ? pool_n_threads(pool) : 1;
    c->scratch = calloc((size_t)c->n_workers, sizeof *c->scratch);
    if (!c->scratch || scratch_reserve(c, 256))
        goto fail;
    be->ops = &cpu_ops;
    be->ctx = c;
    return be;
fail:
    cpu_free(c);
    free(be);
    strata_error_set(err, STRATA_E_NOMEM, "backend_cpu_init: out of memory");
    return NULL;
}

void backend_free(struct backend *be) {
    if (!be)
        return;
    if (be->ops && be->ops->free)
        be->ops->free(be->ctx);
    free(be);
}
