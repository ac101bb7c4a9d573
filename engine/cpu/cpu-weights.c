/* engine/cpu/cpu-weights.c: the CPU backend's weight binding. With
 * bind params.copy, every matrix (attention, dense FFN, router, shared
 * expert, output, and each routed-expert stack) is copied into one anonymous
 * arena with huge pages, Q4_K / Q6_K / Q4_0 in the kernels' 16-row packed
 * layout where the active ISA has packed kernels (kernels.h: kernels_pack),
 * and with params.drop_source the file pages they came from are let go.
 * Routed experts are then served from the arena through the expert seam's
 * RAM tier (engine/experts: experts_ram_place over weight_host's views).
 * Without copy every matrix is computed from the host bytes in place.
 * Vectors (USE_VEC) and embedding rows (USE_ROWS) are never copied: the
 * vectors are the model's f32 copies, and embedding lookups read one row of
 * the file a token.
 *
 * Why: a batched decode step or a prefill chunk is compute-bound on the
 * K-quants, and the packed kernels do ~1.7x the multiply-adds per second of
 * the GGUF-layout ones (kernels-x86-pk.inc); the bytes are the same, so decode
 * of one sequence reads no more than before, and from anonymous huge pages
 * it streams faster than from the page cache's 4 KiB pages (measurements at
 * MADV_HUGEPAGE below and in bench/README.md).
 *
 * Memory: a source matrix's whole pages are dropped from this process's
 * mapping as soon as they are copied, 16 MB at a time (MADV_DONTNEED: the
 * page cache keeps them, RSS does not count them), so peak RSS is the file
 * plus a slice. The token embedding rows that lookups read fault back in
 * one page at a time.
 * Threading: called from the loading thread (the pool packs row groups). */
#include "engine/cpu/cpu-impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/host/numa-homes.h"
#include "engine/host/pool.h"
#include "engine/quant/quant.h"

#define PACK_ALIGN ((size_t)2 << 20) /* arena start: a huge-page boundary */
#define PACK_SLICE ((size_t)16 << 20)

int cpu_supports(void *ctx, enum quant_type type, int64_t n_cols, enum backend_use use) {
    const struct quant_traits *tr = quant_type_traits(type);
    if (!tr || n_cols < 1)
        return 0;
    switch (use) {
    case BACKEND_USE_MATMUL:
        return quant_row_size(type, n_cols) && kernels_act_row_size(type, n_cols) &&
               kernels_supports(type);
    case BACKEND_USE_ROWS:
        return tr->can_dequantize && quant_row_size(type, n_cols);
    case BACKEND_USE_VEC:
        return type == QUANT_F32;
    }
    return 0;
}

struct pack_job {
    const struct kern_mat *src;
    uint8_t *dst;
    int64_t g_base; /* first group of the slice being packed */
};

static void pack_slice(void *ctx, int64_t g0, int64_t g1, int worker) {
    const struct pack_job *j = ctx;
    (void)kernels_pack(j->src, j->dst, j->g_base + g0, j->g_base + g1);
}

/* One matrix to copy: src in the file's layout; where the copy goes. */
struct copy_item {
    struct kern_mat src; /* GGUF rows, contiguous (row_bytes = the row size) */
    bool pack;
    bool stack;       /* every expert of a MoE layer */
    int64_t rows_per; /* a stack's rows an expert */
    uint8_t *dst;
};

/* Plain copy of units [g0, g1) of a slice (first touch of the arena pages
 * by the thread that runs it). */
struct memcpy_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t unit_bytes;
};
static void memcpy_slice(void *ctx, int64_t u0, int64_t u1, int worker) {
    const struct memcpy_job *j = ctx;
    memcpy(j->dst + (size_t)u0 * j->unit_bytes, j->src + (size_t)u0 * j->unit_bytes,
           (size_t)(u1 - u0) * j->unit_bytes);
}

/* Copies (packing if it->pack) it->src to it->dst in slices; with drop,
 * drops each slice's whole source pages from the mapping once copied. */
/* Bytes copied so far of the arena's total, for the bind's progress. */
struct copy_progress {
    const struct strata_progress *p;
    uint64_t done, total;
};

static void copy_item(struct cpu_ctx *c, const struct copy_item *it, uintptr_t page, bool drop,
                      struct copy_progress *pr) {
    const struct kern_mat *w = &it->src;
    struct pack_job j = {w, it->dst, 0};
    const int64_t unit = it->pack ? KERNELS_PACK_ROWS : 1;
    const int64_t units = w->n_rows / unit;
    const size_t unit_bytes = (size_t)unit * w->row_bytes;
    const int64_t per = PACK_SLICE / unit_bytes > 0 ? (int64_t)(PACK_SLICE / unit_bytes) : 1;
    uintptr_t dropped = ((uintptr_t)w->data + page - 1) & ~(page - 1);
    /* NUMA split (pool groups): each group's threads copy, and so first-touch
     * onto their node, the rows the kernels will hand that group: the matmul
     * task of a matrix has `units` rows (a packed one 16-row units at
     * min_grain 2, else rows at the pool's floor) and pool_group_bound is
     * where the pool cuts it. An expert stack's matmuls run per expert
     * (cpu_mat: rows_per rows), so a stack is copied an expert at a time,
     * each expert whole by its home group's threads (host_numa_home_rule:
     * the MoE division computes it there, cpu-moe-numa.h). */
    const bool grouped = c->pool && pool_n_groups(c->pool) == 2;
    const int64_t period =
        grouped && it->stack && it->rows_per / unit > 0 ? it->rows_per / unit : units;
    const int64_t mg = it->pack ? 2 : 0;
    const int64_t step = grouped && it->stack ? period : per;
    int threads[2] = {0, 0}; /* per group */
    for (int i = 0; grouped && i < pool_n_threads(c->pool); i++)
        threads[pool_group_of(c->pool, i)]++;
    for (int64_t g0 = 0; g0 < units; g0 += step) {
        const int64_t g1 = g0 + step < units ? g0 + step : units;
        int64_t cut = grouped ? g0 / period * period + pool_group_bound(c->pool, period, mg) : g1;
        if (grouped && it->stack && period < units)
            cut = host_numa_home_rule((int)(g0 / period), threads) ? g0 : g1;
        int64_t bounds[3] = {0, cut - g0, g1 - g0};
        if (bounds[1] < 0)
            bounds[1] = 0;
        if (bounds[1] > bounds[2])
            bounds[1] = bounds[2];
        if (grouped && !it->pack) {
            struct memcpy_job mj = {it->dst + (size_t)g0 * unit_bytes,
                                    (const uint8_t *)w->data + (size_t)g0 * unit_bytes, unit_bytes};
            struct pool_task t = {.fn = memcpy_slice,
                                  .ctx = &mj,
                                  .n_rows = g1 - g0,
                                  .min_grain = 1,
                                  .n_groups = 2,
                                  .group_bounds = bounds};
            pool_run(c->pool, &t, 1);
        } else if (!it->pack) {
            memcpy(it->dst + (size_t)g0 * unit_bytes,
                   (const uint8_t *)w->data + (size_t)g0 * unit_bytes,
                   (size_t)(g1 - g0) * unit_bytes);
        } else if (c->pool) {
            struct pool_task t = {.fn = pack_slice,
                                  .ctx = &j,
                                  .n_rows = g1 - g0,
                                  .min_grain = 1,
                                  .n_groups = grouped ? 2 : 0,
                                  .group_bounds = grouped ? bounds : NULL};
            j.g_base = g0;
            pool_run(c->pool, &t, 1);
        } else {
            (void)kernels_pack(w, j.dst, g0, g1);
        }
        const uintptr_t end = ((uintptr_t)w->data + (size_t)g1 * unit_bytes) & ~(page - 1);
        if (drop && end > dropped) {
            (void)madvise((void *)dropped, end - dropped, MADV_DONTNEED);
            dropped = end;
        }
        pr->done += (uint64_t)(g1 - g0) * unit_bytes;
        strata_progress_report(pr->p, "copying weights", pr->done, pr->total);
    }
}

/* Whether the packed layout pays for w: the ISA active now has a packed
 * kernel for its type, per expert for a stack (whole 16-row groups each). */
static bool want_pack(const struct cpu_weight *w) {
    if (w->n_expert > 1)
        return w->rows_per % KERNELS_PACK_ROWS == 0 &&
               kernels_pack_wanted(w->m.type, w->rows_per, w->m.n_cols);
    return kernels_pack_wanted(w->m.type, w->m.n_rows, w->m.n_cols);
}

/* Copies every distinct MATMUL matrix into one arena and repoints the
 * weights; 0, or -1 when the arena cannot be mapped (nothing copied then:
 * the host bytes still work). */
static int copy_all(struct cpu_ctx *c, struct cpu_weights *s, bool drop,
                    const struct strata_progress *progress, struct backend_bind_info *info) {
    struct copy_item *it = calloc((size_t)s->n, sizeof *it);
    int *item_of = malloc((size_t)s->n * sizeof *item_of); /* weight -> its copy, -1 none */
    int n = 0;
    if (!it || !item_of) {
        free(it);
        free(item_of);
        return -1;
    }
    size_t total = 0;
    for (int i = 0; i < s->n; i++) {
        const struct cpu_weight *w = &s->w[i];
        item_of[i] = -1;
        if (w->use != BACKEND_USE_MATMUL || !w->m.data || w->m.n_rows <= 0 ||
            w->m.row_bytes != quant_row_size(w->m.type, w->m.n_cols))
            continue;
        for (int k = 0; k < n && item_of[i] < 0; k++)
            if (it[k].src.data == w->m.data)
                item_of[i] = k; /* bound twice (a tied output): one copy */
        if (item_of[i] >= 0)
            continue;
        item_of[i] = n;
        it[n++] = (struct copy_item){
            .src = w->m, .pack = want_pack(w), .stack = w->n_expert > 1, .rows_per = w->rows_per};
        total += ((size_t)w->m.n_rows * w->m.row_bytes + 63) & ~(size_t)63;
    }
    if (total == 0) {
        free(it);
        free(item_of);
        return 0;
    }
    uint8_t *raw =
        mmap(NULL, total + PACK_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        free(it);
        free(item_of);
        return -1;
    }
    uint8_t *arena = (uint8_t *)(((uintptr_t)raw + PACK_ALIGN - 1) & ~(uintptr_t)(PACK_ALIGN - 1));
#ifdef MADV_HUGEPAGE
    /* A hint. Measured (llama-3.2-1b Q4_K_M, 2 threads, 3 interleaved rounds
     * under the bench lock, this 2-vCPU EPYC VM with THP in madvise mode,
     * without -> with): 8 sequences a step 26.7-27.9 -> 25.0-25.6 ms
     * (`bench-model MODEL 2 16 16 8`), one-sequence decode 93.7-99.4% ->
     * 97.8-99.2% of the interleaved roofline, load 269-272 -> 162-392 ms. */
    (void)madvise(arena, total, MADV_HUGEPAGE);
#endif
    s->raw = raw;
    s->raw_bytes = total + PACK_ALIGN;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct copy_progress pr = {progress, 0, 0};
    for (int k = 0; k < n; k++)
        pr.total += (uint64_t)it[k].src.n_rows * it[k].src.row_bytes;
    strata_progress_report(progress, "copying weights", 0, pr.total);
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        const size_t bytes = (size_t)it[k].src.n_rows * it[k].src.row_bytes;
        it[k].dst = arena + off;
        off += (bytes + 63) & ~(size_t)63;
        copy_item(c, &it[k], page, drop, &pr);
        info->copied_bytes += bytes;
        if (it[k].pack)
            info->packed_bytes += bytes;
    }
    (void)mprotect(arena, total, PROT_READ);
    for (int i = 0; i < s->n; i++)
        if (item_of[i] >= 0) {
            s->w[i].m.data = it[item_of[i]].dst;
            s->w[i].m.packed = it[item_of[i]].pack;
        }
    free(it);
    free(item_of);
    return 0;
}

void cpu_weights_free(void *ctx, struct backend_weights *set) {
    struct cpu_weights *s = (struct cpu_weights *)set;
    if (!s)
        return;
    if (s->raw)
        munmap(s->raw, s->raw_bytes);
    free(s->w);
    free(s);
}

struct backend_weights *cpu_weights_bind(void *ctx, const struct backend_weight_desc *desc, int n,
                                         const struct backend_bind_params *params,
                                         struct backend_weight **out,
                                         struct backend_bind_info *info, struct strata_error *err) {
    struct cpu_ctx *c = ctx;
    struct backend_bind_info local = {0, 0};
    if (!info)
        info = &local;
    *info = local;
    struct cpu_weights *s = calloc(1, sizeof *s);
    if (!s || n < 0 || !(s->w = calloc(n > 0 ? (size_t)n : 1, sizeof *s->w))) {
        free(s);
        strata_error_set(err, STRATA_E_NOMEM, "backend cpu: out of memory for %d weights", n);
        return NULL;
    }
    s->n = n;
    for (int i = 0; i < n; i++) {
        const struct backend_weight_desc *d = &desc[i];
        const struct backend_host_mat *h = &d->host;
        const int64_t ne = d->n_expert > 1 ? d->n_expert : 1;
        if (!h->data || h->n_rows < 1 || h->n_rows % ne || h->layout != BACKEND_LAYOUT_ROWS ||
            !cpu_supports(c, h->type, h->n_cols, d->use) ||
            h->row_bytes < quant_row_size(h->type, h->n_cols)) {
            cpu_weights_free(c, (struct backend_weights *)s);
            strata_error_set(err, STRATA_E_UNSUPPORTED,
                             "backend cpu: %s: type %s, %lld x %lld, not computable here",
                             d->name ? d->name : "weight", quant_type_name(h->type),
                             (long long)h->n_rows, (long long)h->n_cols);
            return NULL;
        }
        s->w[i] = (struct cpu_weight){
            .m = {h->data, h->type, h->n_rows, h->n_cols, h->row_bytes, 0},
            .n_expert = ne,
            .rows_per = h->n_rows / ne,
            .use = d->use,
        };
    }
    if (params && params->copy)
        (void)copy_all(c, s, params->drop_source, params->progress,
                       info); /* no arena: the host bytes work */
    for (int i = 0; i < n; i++)
        out[i] = (struct backend_weight *)&s->w[i];
    return (struct backend_weights *)s;
}

int cpu_weight_host(void *ctx, const struct backend_weight *bw, int64_t index,
                    struct backend_host_mat *out) {
    const struct cpu_weight *w = cpu_w(bw);
    if (index < -1 || index >= w->n_expert)
        return STRATA_E_INVALID;
    const struct kern_mat k =
        index < 0 ? w->m : cpu_mat(&(struct backend_mat){.w = bw, .index = index});
    *out = (struct backend_host_mat){
        k.data,   k.type,      k.n_rows,
        k.n_cols, k.row_bytes, k.packed ? BACKEND_LAYOUT_PACK16 : BACKEND_LAYOUT_ROWS};
    return 0;
}
