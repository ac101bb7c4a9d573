/* engine/model/model-pack.c: at load, copies every matrix the forward pass
 * multiplies (attention, dense FFN, router, shared expert, output, and each
 * routed-expert tensor) into one anonymous arena with huge pages, Q4_K / Q6_K
 * in the kernels' 16-row packed layout (kernels.h: kernels_pack), and lets go
 * of the file pages they came from. Routed experts are then served from the
 * arena through experts.h (experts_mmap_place): a RAM tier that holds every
 * expert, taken only when the weights fit in RAM.
 *
 * Why: a batched decode step or a prefill chunk is compute-bound on the
 * K-quants, and the packed kernels do ~1.7x the multiply-adds per second of
 * the GGUF-layout ones (kernels-x86-pk.inc); the bytes are the same, so decode
 * of one sequence reads no more than before, and from anonymous huge pages
 * it streams faster than from the page cache's 4 KiB pages (measurements at
 * MADV_HUGEPAGE below and in bench/README.md).
 *
 * Memory: a source tensor's whole pages are dropped from this process's
 * mapping as soon as they are copied, 16 MB at a time (MADV_DONTNEED: the
 * page cache keeps them, RSS does not count them), so peak RSS is the file
 * plus a slice. The token embedding rows that token_embd lookups read fault
 * back in one page at a time.
 * Threading: called once from model_load (the pool packs row groups). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/model/model-impl.h"
#include "engine/host/pool.h"

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

/* One matrix to copy: src in the file's layout; where the copy goes. */
struct copy_item {
    struct kern_mat src; /* GGUF rows, contiguous (row_bytes = the row size) */
    int layer, which;    /* experts: what to place; layer -1: a dense matrix */
    bool pack;
    uint8_t *dst;
};

static void add_dense(struct copy_item *it, int *n, struct kern_mat *w) {
    if (!w->data || w->packed || w->n_rows <= 0 ||
        w->row_bytes != quant_row_size(w->type, w->n_cols))
        return;
    for (int i = 0; i < *n; i++)
        if (it[i].src.data == w->data)
            return; /* one tensor bound twice: one copy, every binding repointed */
    it[(*n)++] = (struct copy_item){
        .src = *w, .layer = -1, .pack = kernels_pack_wanted(w->type, w->n_rows, w->n_cols)};
}

#define LAYER_MATS 12 /* dense matrix bindings of a layer (layer_mats) */

/* The dense matrix bindings of layer il (unbound ones have no data). */
static void layer_mats(struct model_layer *l, struct kern_mat *out[LAYER_MATS]) {
    struct kern_mat *m[LAYER_MATS] = {&l->wq,       &l->wk,     &l->wv,       &l->wo,
                                      &l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->gate_inp,
                                      &l->gate_sh,  &l->up_sh,  &l->down_sh,  &l->gate_inp_sh};
    memcpy(out, m, sizeof m);
}

/* Every matrix of the forward pass: the dense ones (kern_mats) and, for MoE
 * models, each expert tensor as one (n_expert * rows, cols) matrix. */
static int list_items(struct model *m, struct copy_item *it) {
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct kern_mat *cand[LAYER_MATS];
        layer_mats(&m->layers[il], cand);
        for (int i = 0; i < LAYER_MATS; i++)
            add_dense(it, &n, cand[i]);
        for (int w = 0; m->experts && w < EXPERTS_WHICH_COUNT; w++) {
            const struct gguf_tensor_info *t = experts_mmap_tensor(m->experts, il, w);
            if (!t)
                continue;
            const enum quant_type type = (enum quant_type)t->type;
            const int64_t rows = t->ne[1] * t->ne[2];
            it[n++] = (struct copy_item){
                .src = {t->data, type, rows, t->ne[0], quant_row_size(type, t->ne[0]), 0},
                .layer = il,
                .which = w,
                .pack = t->ne[1] % KERNELS_PACK_ROWS == 0 &&
                        kernels_pack_wanted(type, t->ne[1], t->ne[0])};
        }
    }
    add_dense(it, &n, &m->output);
    return n;
}

/* Copies (packing if it->pack) it->src to it->dst in slices, dropping each
 * slice's whole source pages from the mapping once it is copied. */
static void copy_item(struct model *m, const struct copy_item *it, uintptr_t page) {
    const struct kern_mat *w = &it->src;
    struct pack_job j = {w, it->dst, 0};
    const int64_t unit = it->pack ? KERNELS_PACK_ROWS : 1;
    const int64_t units = w->n_rows / unit;
    const size_t unit_bytes = (size_t)unit * w->row_bytes;
    const int64_t per = PACK_SLICE / unit_bytes > 0 ? (int64_t)(PACK_SLICE / unit_bytes) : 1;
    uintptr_t dropped = ((uintptr_t)w->data + page - 1) & ~(page - 1);
    for (int64_t g0 = 0; g0 < units; g0 += per) {
        const int64_t g1 = g0 + per < units ? g0 + per : units;
        if (!it->pack) {
            memcpy(it->dst + (size_t)g0 * unit_bytes,
                   (const uint8_t *)w->data + (size_t)g0 * unit_bytes,
                   (size_t)(g1 - g0) * unit_bytes);
        } else if (m->params.pool) {
            struct pool_task t = {.fn = pack_slice, .ctx = &j, .n_rows = g1 - g0, .min_grain = 1};
            j.g_base = g0;
            pool_run(m->params.pool, &t, 1);
        } else {
            (void)kernels_pack(w, j.dst, g0, g1);
        }
        const uintptr_t end = ((uintptr_t)w->data + (size_t)g1 * unit_bytes) & ~(page - 1);
        if (end > dropped) {
            (void)madvise((void *)dropped, end - dropped, MADV_DONTNEED);
            dropped = end;
        }
    }
}

int model_copy_weights(struct model *m, struct strata_error *err) {
    const size_t cap = (size_t)m->hp.n_layer * (LAYER_MATS + EXPERTS_WHICH_COUNT) + 1;
    struct copy_item *it = calloc(cap, sizeof *it);
    if (!it)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory");
    const int n = list_items(m, it);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += ((size_t)it[i].src.n_rows * it[i].src.row_bytes + 63) & ~(size_t)63;
    if (total == 0) {
        free(it);
        return 0;
    }
    uint8_t *raw =
        mmap(NULL, total + PACK_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        free(it);
        return strata_error_set(err, STRATA_E_NOMEM, "model: cannot map %zu bytes for the weights",
                                total);
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
        const size_t bytes = (size_t)it[i].src.n_rows * it[i].src.row_bytes;
        it[i].dst = arena + off;
        off += (bytes + 63) & ~(size_t)63;
        copy_item(m, &it[i], page);
        m->copy_bytes += bytes;
        if (it[i].pack)
            m->pack_bytes += bytes;
    }
    (void)mprotect(arena, total, PROT_READ);
    /* repoint: dense matrices (every binding of a shared tensor), experts */
    for (int i = 0; i < n; i++) {
        const struct copy_item *c = &it[i];
        if (c->layer >= 0) {
            (void)experts_mmap_place(m->experts, c->layer, (enum experts_which)c->which, c->dst,
                                     c->pack);
            continue;
        }
        for (int il = -1; il < m->hp.n_layer; il++) {
            struct kern_mat *cand[LAYER_MATS] = {&m->output}; /* il -1: the output alone */
            if (il >= 0)
                layer_mats(&m->layers[il], cand);
            for (int k = 0; k < LAYER_MATS; k++)
                if (cand[k] && cand[k]->data == c->src.data && !cand[k]->packed &&
                    cand[k]->data != c->dst) {
                    cand[k]->data = c->dst;
                    cand[k]->packed = c->pack;
                }
        }
    }
    free(it);
    return 0;
}
