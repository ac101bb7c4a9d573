/* engine/model-pack.c: at load, copies the Q4_K / Q6_K matrices the forward
 * pass multiplies (attention, dense FFN, shared expert, output) into the
 * kernels' 16-row packed layout (kernels.h: kernels_pack) in one anonymous
 * arena, and lets go of the file pages they came from.
 *
 * Why: a batched decode step or a prefill chunk is compute-bound on these
 * types, and the packed kernels do ~1.7x the multiply-adds per second of the
 * GGUF-layout ones (kernels-x86-pk.h); the bytes are the same, so decode of
 * one sequence reads no more than before. Routed experts keep the file
 * layout (they are reached through experts.h, the expert store's seam).
 *
 * Memory: the arena holds the packed bytes; a source tensor's whole pages
 * are dropped from this process's mapping as soon as they are packed, 16 MB
 * at a time (MADV_DONTNEED: the page cache keeps them, RSS does not count
 * them), so peak RSS is the file plus a slice. The token embedding rows that
 * token_embd lookups read fault back in one page at a time.
 * Threading: called once from model_load (the pool packs row groups). */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/model-impl.h"
#include "engine/pool.h"

#define PACK_ALIGN ((size_t)2 << 20) /* arena start: a huge-page boundary */

#define PACK_SLICE ((size_t)16 << 20)

struct pack_job {
    const struct kern_mat *src;
    uint8_t *dst;
    int64_t g_base; /* first group of the slice being packed */
};

static void pack_slice(void *ctx, int64_t g0, int64_t g1, int worker) {
    (void)worker;
    const struct pack_job *j = ctx;
    (void)kernels_pack(j->src, j->dst, j->g_base + g0, j->g_base + g1);
}

static bool pack_wanted(const struct kern_mat *w) {
    return w->data && !w->packed && kernels_pack_wanted(w->type, w->n_rows, w->n_cols) &&
           w->row_bytes == quant_row_size(w->type, w->n_cols);
}

/* Every matrix the forward pass multiplies through a kern_mat of its own. */
static int list_mats(struct model *m, struct kern_mat **out) {
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct model_layer *l = &m->layers[il];
        struct kern_mat *cand[] = {&l->wq,     &l->wk,       &l->wv,      &l->wo,    &l->ffn_gate,
                                   &l->ffn_up, &l->ffn_down, &l->gate_sh, &l->up_sh, &l->down_sh};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
            if (pack_wanted(cand[i]))
                out[n++] = cand[i];
    }
    if (pack_wanted(&m->output))
        out[n++] = &m->output;
    return n;
}

int model_pack_weights(struct model *m, struct strata_error *err) {
    struct kern_mat **mats = malloc(((size_t)m->hp.n_layer * 10 + 1) * sizeof *mats);
    if (!mats)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
    const int n = list_mats(m, mats);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += ((size_t)mats[i]->n_rows * mats[i]->row_bytes + 63) & ~(size_t)63;
    if (total == 0) {
        free(mats);
        return 0;
    }
    uint8_t *raw =
        mmap(NULL, total + PACK_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        free(mats);
        return strata_error_set(err, STRATA_E_NOMEM,
                                "model: cannot map %zu bytes for packed weights", total);
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
    m->pack_raw = raw;
    m->pack_raw_bytes = total + PACK_ALIGN;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        struct kern_mat *w = mats[i];
        const size_t bytes = (size_t)w->n_rows * w->row_bytes;
        struct pack_job j = {w, arena + off, 0};
        /* slices of PACK_SLICE bytes: each slice's source pages are dropped
         * before the next is packed, so RSS grows by a slice, not a tensor */
        const int64_t groups = w->n_rows / KERNELS_PACK_ROWS;
        const size_t group_bytes = (size_t)KERNELS_PACK_ROWS * w->row_bytes;
        const int64_t per = PACK_SLICE / group_bytes > 0 ? (int64_t)(PACK_SLICE / group_bytes) : 1;
        uintptr_t dropped = ((uintptr_t)w->data + page - 1) & ~(page - 1);
        for (int64_t g0 = 0; g0 < groups; g0 += per) {
            const int64_t g1 = g0 + per < groups ? g0 + per : groups;
            if (m->params.pool) {
                struct pool_task t = {
                    .fn = pack_slice, .ctx = &j, .n_rows = g1 - g0, .min_grain = 1};
                j.g_base = g0;
                pool_run(m->params.pool, &t, 1);
            } else {
                (void)kernels_pack(w, j.dst, g0, g1);
            }
            const uintptr_t end = ((uintptr_t)w->data + (size_t)g1 * group_bytes) & ~(page - 1);
            if (end > dropped) {
                (void)madvise((void *)dropped, end - dropped, MADV_DONTNEED);
                dropped = end;
            }
        }
        w->data = arena + off;
        w->packed = 1;
        m->pack_bytes += bytes;
        off += (bytes + 63) & ~(size_t)63;
    }
    (void)mprotect(arena, total, PROT_READ);
    free(mats);
    return 0;
}
