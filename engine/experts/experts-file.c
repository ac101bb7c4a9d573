/* engine/experts/experts-file.c: the file tier: routed-expert weights as
 * slices of the mapped 3-D tensors blk.<l>.ffn_{gate,up,down}_exps.weight,
 * ne = (n_cols, n_rows, n_expert): expert e's matrix starts
 * e * n_rows * row_bytes into the tensor. Nothing is copied, so get is O(1)
 * and release has nothing to do.
 *
 * Prefetch: a bounded ring of (layer, expert) a worker thread drains, asking
 * the kernel to read each expert's three slices ahead (MADV_WILLNEED; it
 * starts the reads and returns). Producers take the ring's lock with
 * trylock only: a busy or full ring drops the request, so a predictor thread
 * never waits. The thread is made at init and joined at free. */
#include "engine/experts/experts.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"

struct pf_item {
    int32_t layer, expert;
};

struct experts_file {
    const struct gguf_tensor_info **t; /* (n_layer, EXPERTS_WHICH_COUNT), NULL = no experts */
    int n_layer, n_expert;
    /* prefetch */
    struct pf_item *ring; /* (cap) */
    int cap, head, len;   /* under mu */
    bool stop;            /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool has_thread;
    _Atomic uint64_t queued, dropped; /* written by producers (predictor threads) */
    char pad[64];                     /* keeps done off their cache line */
    _Atomic uint64_t done;            /* written by the worker */
};

static const char *const which_name[EXPERTS_WHICH_COUNT] = {"ffn_gate_exps", "ffn_up_exps",
                                                            "ffn_down_exps"};

static const struct gguf_tensor_info *tensor(const struct experts_file *f, int layer, int which) {
    return f->t[(size_t)layer * EXPERTS_WHICH_COUNT + (size_t)which];
}

static int file_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                    struct experts_ref *out, struct strata_error *err) {
    struct experts_file *f = ctx;
    const struct gguf_tensor_info *t = tensor(f, layer, which);
    if (!t)
        return strata_error_set(err, STRATA_E_NOT_FOUND, "experts: layer %d has no %s", layer,
                                which_name[which]);
    const enum quant_type type = (enum quant_type)t->type;
    const size_t rb = quant_row_size(type, t->ne[0]);
    out->tier = EXPERTS_TIER_FILE;
    out->mat = (struct backend_mat){
        .w = NULL,
        .index = 0,
        .host = {(const uint8_t *)t->data + (size_t)expert * (size_t)t->ne[1] * rb, type, t->ne[1],
                 t->ne[0], rb, BACKEND_LAYOUT_ROWS},
    };
    return 0;
}

/* Reads an expert's three slices ahead (a hint; errors are ignored). */
static void will_need(const struct experts_file *f, int layer, int expert) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
        const struct gguf_tensor_info *t = tensor(f, layer, w);
        if (!t)
            continue;
        const size_t bytes = (size_t)t->ne[1] * quant_row_size((enum quant_type)t->type, t->ne[0]);
        const uintptr_t a = (uintptr_t)t->data + (size_t)expert * bytes;
        const uintptr_t lo = a & ~(page - 1);
        (void)madvise((void *)lo, a + bytes - lo, MADV_WILLNEED);
    }
}

static void *pf_main(void *arg) {
    struct experts_file *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && f->len == 0)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop)
            break;
        const struct pf_item it = f->ring[f->head];
        f->head = (f->head + 1) % f->cap;
        f->len--;
        pthread_mutex_unlock(&f->mu);
        will_need(f, it.layer, it.expert);
        atomic_fetch_add_explicit(&f->done, 1, memory_order_relaxed);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int file_prefetch(void *ctx, int layer, const int32_t *ids, int n, int32_t *miss) {
    struct experts_file *f = ctx;
    if (!f->has_thread || pthread_mutex_trylock(&f->mu) != 0) {
        atomic_fetch_add_explicit(&f->dropped, (uint64_t)n, memory_order_relaxed);
        return 0; /* the last tier: nothing passes on */
    }
    int taken = 0;
    for (int i = 0; i < n && f->len < f->cap; i++, taken++) {
        f->ring[(f->head + f->len) % f->cap] = (struct pf_item){layer, ids[i]};
        f->len++;
    }
    pthread_mutex_unlock(&f->mu);
    if (taken > 0)
        pthread_cond_signal(&f->cv);
    atomic_fetch_add_explicit(&f->queued, (uint64_t)taken, memory_order_relaxed);
    atomic_fetch_add_explicit(&f->dropped, (uint64_t)(n - taken), memory_order_relaxed);
    return 0;
}

static void file_stats(void *ctx, struct experts_stats *acc) {
    struct experts_file *f = ctx;
    acc->prefetch_queued += atomic_load_explicit(&f->queued, memory_order_relaxed);
    acc->prefetch_dropped += atomic_load_explicit(&f->dropped, memory_order_relaxed);
    acc->prefetch_done += atomic_load_explicit(&f->done, memory_order_relaxed);
}

static void file_free(void *ctx) {
    struct experts_file *f = ctx;
    if (!f)
        return;
    if (f->has_thread) {
        pthread_mutex_lock(&f->mu);
        f->stop = true;
        pthread_mutex_unlock(&f->mu);
        pthread_cond_signal(&f->cv);
        pthread_join(f->thread, NULL);
    }
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f->ring);
    free(f->t);
    free(f);
}

/* The file's pages are always there (the page cache may have to read them
 * again, but a ref never moves). */
static int file_resident(void *ctx, int layer) {
    return 1;
}

static const struct experts_ops file_ops = {
    .name = "file",
    .get = file_get,
    .release = NULL,
    .prefetch = file_prefetch,
    .resident = file_resident,
    .stats = file_stats,
    .free = file_free,
};

struct experts_file_params experts_file_params_default(void) {
    return (struct experts_file_params){.queue = 64};
}

/* Finds and checks every expert tensor: 0 or STRATA_E_FORMAT. */
static int find_tensors(struct experts_file *m, const struct gguf_file *f,
                        struct strata_error *err) {
    for (int l = 0; l < m->n_layer; l++) {
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, which_name[w]);
            const struct gguf_tensor_info *t = gguf_find_tensor(f, name);
            if (!t)
                continue;
            const struct quant_traits *tr = quant_type_traits(t->type);
            if (t->n_dims != 3 || !tr || quant_row_size((enum quant_type)t->type, t->ne[0]) == 0 ||
                (m->n_expert && t->ne[2] != m->n_expert) || t->ne[2] < 1 || t->ne[2] > 65536)
                return strata_error_set(err, STRATA_E_FORMAT, "experts: %s has a bad shape or type",
                                        name);
            m->n_expert = (int)t->ne[2];
            m->t[(size_t)l * EXPERTS_WHICH_COUNT + (size_t)w] = t;
        }
    }
    return 0;
}

struct experts_source *experts_file_init(const struct gguf_file *f, int n_layer,
                                         const struct experts_file_params *params,
                                         struct strata_error *err) {
    const struct experts_file_params p = params ? *params : experts_file_params_default();
    struct experts_file *m = calloc(1, sizeof *m);
    if (!m || n_layer < 1 || p.queue < 0) {
        free(m);
        strata_error_set(err, m ? STRATA_E_INVALID : STRATA_E_NOMEM, "experts: %d layers, queue %d",
                         n_layer, p.queue);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->n_layer = n_layer;
    m->cap = p.queue;
    m->t = calloc((size_t)n_layer * EXPERTS_WHICH_COUNT, sizeof *m->t);
    if (!m->t || (m->cap > 0 && !(m->ring = calloc((size_t)m->cap, sizeof *m->ring)))) {
        file_free(m);
        strata_error_set(err, STRATA_E_NOMEM, "experts: out of memory");
        return NULL;
    }
    if (find_tensors(m, f, err)) {
        file_free(m);
        return NULL;
    }
    if (m->cap > 0) {
        if (pthread_create(&m->thread, NULL, pf_main, m) != 0) {
            file_free(m);
            strata_error_set(err, STRATA_E_NOMEM, "experts: cannot start the prefetch thread");
            return NULL;
        }
        m->has_thread = true;
    }
    return experts_source_init(&file_ops, m, NULL, n_layer, m->n_expert, err);
}
