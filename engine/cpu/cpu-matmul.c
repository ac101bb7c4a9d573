/* engine/cpu/cpu-matmul.c: the CPU backend's matmuls: the input is quantized
 * once per distinct activation format of the call's matrices (Q, K and V
 * share one Q8_K copy), then kernels_matmul runs on row ranges from the pool,
 * several matrices in one dispatch. */
#include "engine/cpu/cpu-impl.h"

#include <stdlib.h>

#include "engine/host/pool.h"
#include "engine/quant/quant.h"

/* Weight bytes x tokens below which a matmul dispatch runs inline: waking a
 * worker costs ~0.1-0.5 ms on the shared 2-core dev box, more than streaming
 * 256 KiB. Measured: stories260K decode, 2 threads, every 64x64 matmul
 * dispatched: 61-70 tok/s vs 1154 tok/s on 1 thread (bench-model, load ~9). */
#define CPU_INLINE_MATMUL_BYTES (256u * 1024u)

/* Rows per pool row: a packed matrix (kernels_pack) is split in whole
 * 16-row groups, so no group is computed by two threads. */
static int64_t matmul_unit(const struct kern_mat *w) {
    return w->packed ? KERNELS_PACK_ROWS : 1;
}

static void matmul_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct cpu_kjob *j = ctx;
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

static int64_t decode_max_grain(const struct cpu_kjob *j) {
    if (j->n_tok >= CPU_GEMM_TOK || j->w->row_bytes == 0)
        return 0;
    int64_t g = (int64_t)(CPU_CHUNK_BYTES / (j->w->row_bytes * (size_t)j->n_tok));
    return g < 32 ? 32 : g;
}

static void run_serial(struct cpu_ctx *c, struct pool_task *t, int n) {
    struct cpu_ctx serial = *c;
    serial.pool = NULL;
    cpu_run_tasks(&serial, t, n);
}

void cpu_kjobs_run(struct cpu_ctx *c, const struct cpu_kjob *jobs, int n_jobs) {
    struct pool_task stack[16];
    int64_t stack_b[16][3]; /* jobs given whole to one group: their group_bounds */
    struct pool_task *t =
        n_jobs <= 16 ? stack : malloc((size_t)n_jobs * (sizeof *t + sizeof(int64_t[3])));
    int64_t(*gb)[3] = stack_b;
    const int8_t *on = c->kjob_on;
    c->kjob_on = NULL;
    if (!t) { /* out of memory for the task list: run serially, same results */
        for (int i = 0; i < n_jobs; i++)
            matmul_rows((void *)&jobs[i], 0, jobs[i].w->n_rows / matmul_unit(jobs[i].w), 0);
    } else {
        uint64_t work = 0;
        if (t != stack)
            gb = (int64_t(*)[3])(t + n_jobs);
        for (int i = 0; i < n_jobs; i++) {
            const int64_t u = matmul_unit(jobs[i].w), mg = decode_max_grain(&jobs[i]);
            t[i] = (struct pool_task){.fn = matmul_rows,
                                      .ctx = (void *)&jobs[i],
                                      .n_rows = jobs[i].w->n_rows / u,
                                      .min_grain = u > 1 ? 2 : 0, /* 32 rows, the pool's floor */
                                      .max_grain = mg > 0 && mg / u < 1 ? 1 : mg / u};
            if (on && on[i]) { /* an expert computed whole by one node (cpu-moe-numa.h) */
                const int64_t r = t[i].n_rows;
                gb[i][0] = 0, gb[i][1] = on[i] == 1 ? r : 0, gb[i][2] = r;
                t[i].n_groups = 2, t[i].group_bounds = gb[i];
            }
            work += (uint64_t)jobs[i].w->n_rows * jobs[i].w->row_bytes * (uint64_t)jobs[i].n_tok;
        }
        if (work < CPU_INLINE_MATMUL_BYTES)
            run_serial(c, t, n_jobs);
        else
            cpu_run_tasks(c, t, n_jobs);
        if (t != stack)
            free(t);
    }
    if (c->params.on_matmul)
        for (int i = 0; i < n_jobs; i++)
            c->params.on_matmul(c->params.on_matmul_arg, jobs[i].w, jobs[i].xq, jobs[i].xq_stride,
                                jobs[i].n_tok, jobs[i].y, jobs[i].ldy);
}

/* ---- activation quantization -------------------------------------------------- */

/* Activation quantization cuts each row into `per_row` pieces of whole
 * blocks (blocks are quantized independently, so the bytes are the same as
 * one call per row) and hands the pieces to the pool. Decode quantizes one
 * 2048-wide row per matrix, and the Q8_K quantizer costs ~2.2 ns a value
 * (a tight loop over one 8192-value row, 1 thread, release, this box): one
 * row stays on the forward thread for ~4.5 us while the workers wait.
 * Pieces are at least QUANT_PIECE values; jobs under QUANT_INLINE values run
 * inline. Measured with the MoE change that quantizes a token's input once
 * (cpu-moe.c), `perf record` of olmoe-1b-7b Q4_K_M `strata run --ids 1
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

void cpu_quantize(struct cpu_ctx *c, enum quant_type wtype, const float *x, int64_t n_rows,
                  int64_t n_cols, void *xq, size_t xq_stride) {
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

/* ---- the matmul op -------------------------------------------------------------- */

void cpu_matmul_record(struct cpu_ctx *c, const struct backend_tensor *x, int64_t n_rows,
                       const struct backend_mm *jobs, int n_jobs) {
    STRATA_ASSERT(n_jobs >= 1 && n_jobs <= BACKEND_MM_MAX);
    struct cpu_cmd *cmd = cpu_record(c, CPU_MATMUL);
    if (!cmd)
        return;
    struct cpu_mm *mm = &cmd->a.mm;
    mm->x = cpu_t(x);
    mm->n_rows = n_rows;
    mm->n_jobs = n_jobs;
    for (int i = 0; i < n_jobs; i++) {
        const struct kern_mat w = cpu_mat(&jobs[i].w);
        STRATA_ASSERT(x->n_rows * x->n_cols >= n_rows * w.n_cols &&
                      jobs[i].y->n_rows * jobs[i].y->n_cols >= n_rows * w.n_rows);
        mm->jobs[i] = (struct cpu_mm_job){w, i, cpu_t(jobs[i].y)};
        mm->quantize[i] = 1;
        /* the input is quantized once per activation format and width */
        for (int j = 0; j < i; j++)
            if (kernels_act_type(mm->jobs[j].w.type) == kernels_act_type(w.type) &&
                mm->jobs[j].w.n_cols == w.n_cols) {
                mm->jobs[i].slot = mm->jobs[j].slot;
                mm->quantize[i] = 0;
                break;
            }
        if (mm->quantize[i])
            (void)cpu_buf_reserve(c, &c->xq[i],
                                  (size_t)n_rows * kernels_act_row_size(w.type, w.n_cols));
    }
}

void cpu_matmul_run(struct cpu_ctx *c, const struct cpu_cmd *cmd) {
    const struct cpu_mm *mm = &cmd->a.mm;
    struct cpu_kjob kj[BACKEND_MM_MAX];
    for (int i = 0; i < mm->n_jobs; i++) {
        const struct cpu_mm_job *j = &mm->jobs[i];
        const size_t stride = kernels_act_row_size(j->w.type, j->w.n_cols);
        if (mm->quantize[i])
            cpu_quantize(c, j->w.type, mm->x->data, mm->n_rows, j->w.n_cols, c->xq[i].p, stride);
        kj[i] =
            (struct cpu_kjob){&j->w, c->xq[j->slot].p, stride, mm->n_rows, j->y->data, j->w.n_rows};
    }
    cpu_kjobs_run(c, kj, mm->n_jobs);
}
