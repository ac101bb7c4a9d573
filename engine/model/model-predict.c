/* engine/model/model-predict.c: the router lookahead on a side thread
 * (model-impl.h "predictor"; xstore_params.prefetch). At a MoE layer l
 * whose experts come from a tier that reads (the expert store), the
 * forward pass copies the layer's normalised input and posts it here; the
 * thread applies the routers of layers l + 1 .. l + depth to it (f32, on
 * the host: the router matrices' host bytes, the backend's own copy where
 * it keeps one), takes each token's top k and passes the union of each
 * layer's picks to experts_prefetch, which queues reads for the cold ones.
 * Posting never blocks: the job slot is taken with a trylock, and a job
 * not yet started is replaced by the newer one (counted as dropped). A
 * step of more than PRED_ROWS_MAX tokens (a prefill chunk: it picks most
 * experts anyway) posts nothing. The picks do not change what the model
 * computes, only which experts are read early, so the logits do not
 * depend on the thread's timing. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/experts/experts.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model-impl.h"
#include "engine/quant/quant.h"

#define PRED_ROWS_MAX 16

struct model_pred {
    struct experts_source *experts; /* borrowed */
    int n_layer, n_embd, n_expert, k, depth;
    const float **router; /* (n_layer): (n_expert, n_embd) f32 rows, NULL: not predicted */
    float **owned;        /* (n_layer): the f32 copies made here */
    pthread_t th;
    bool th_ok;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, has_job; /* under mu */
    int job_layer, job_n;
    float *job_x; /* (PRED_ROWS_MAX, n_embd) under mu */
    /* the thread's own */
    float *x, *logits;
    int32_t *ids;
    uint8_t *mark;
    _Atomic uint64_t posted, dropped, done;
};

typedef float v8f __attribute__((vector_size(32)));

/* The dot product of two f32 rows of n (8-wide partial sums: the compiler
 * emits SSE pairs, or AVX2 + FMA in the copy below). */
#define DOT_BODY                                                                                   \
    v8f s0 = {0}, s1 = {0};                                                                        \
    int i = 0;                                                                                     \
    for (; i + 16 <= n; i += 16) {                                                                 \
        v8f a0, a1, b0, b1;                                                                        \
        memcpy(&a0, a + i, sizeof a0);                                                             \
        memcpy(&a1, a + i + 8, sizeof a1);                                                         \
        memcpy(&b0, b + i, sizeof b0);                                                             \
        memcpy(&b1, b + i + 8, sizeof b1);                                                         \
        s0 += a0 * b0;                                                                             \
        s1 += a1 * b1;                                                                             \
    }                                                                                              \
    s0 += s1;                                                                                      \
    float s = 0.0f;                                                                                \
    for (int j = 0; j < 8; j++)                                                                    \
        s += s0[j];                                                                                \
    for (; i < n; i++)                                                                             \
        s += a[i] * b[i];                                                                          \
    return s;

static float dot_plain(const float *a, const float *b, int n) {
    DOT_BODY
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int n) {
    DOT_BODY
}
#endif

static float (*dot)(const float *, const float *, int) = dot_plain;

/* The routers of layers layer + 1 .. + depth over the job's rows. */
static void predict(struct model_pred *p, int layer, int n) {
    const int E = p->n_embd, NE = p->n_expert;
    for (int d = 1; d <= p->depth; d++) {
        const int j = layer + d;
        if (j >= p->n_layer || !p->router[j])
            continue;
        const float *w = p->router[j];
        int np = 0;
        memset(p->mark, 0, (size_t)NE);
        for (int t = 0; t < n; t++) {
            const float *x = p->x + (size_t)t * E;
            for (int e = 0; e < NE; e++)
                p->logits[e] = dot(w + (size_t)e * E, x, E);
            /* top k (softmax and sigmoid keep the order): k passes of the max */
            for (int r = 0; r < p->k; r++) {
                int best = -1;
                for (int e = 0; e < NE; e++)
                    if (p->logits[e] > -1e30f && (best < 0 || p->logits[e] > p->logits[best]))
                        best = e;
                if (best < 0)
                    break;
                p->logits[best] = -1e38f;
                if (!p->mark[best]) {
                    p->mark[best] = 1;
                    p->ids[np++] = best;
                }
            }
        }
        experts_prefetch(p->experts, j, p->ids, np);
    }
}

static void *pred_main(void *arg) {
    struct model_pred *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && !p->has_job)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        const int layer = p->job_layer, n = p->job_n;
        memcpy(p->x, p->job_x, (size_t)n * p->n_embd * sizeof(float));
        p->has_job = false;
        pthread_mutex_unlock(&p->mu);
        predict(p, layer, n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_relaxed);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void model_pred_post(struct model_pred *p, int layer, const float *x, int n) {
    if (!p || n < 1 || n > PRED_ROWS_MAX)
        return;
    if (pthread_mutex_trylock(&p->mu) != 0) { /* the thread is taking a job: this one goes */
        atomic_fetch_add_explicit(&p->dropped, 1, memory_order_relaxed);
        return;
    }
    if (p->has_job) /* the last one not started: the newer input replaces it */
        atomic_fetch_add_explicit(&p->dropped, 1, memory_order_relaxed);
    memcpy(p->job_x, x, (size_t)n * p->n_embd * sizeof(float));
    p->job_layer = layer;
    p->job_n = n;
    p->has_job = true;
    atomic_fetch_add_explicit(&p->posted, 1, memory_order_relaxed);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

bool model_pred_rows_ok(int n) {
    return n >= 1 && n <= PRED_ROWS_MAX;
}

void model_pred_free(struct model_pred *p) {
    if (!p)
        return;
    if (p->th_ok) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
    }
    for (int l = 0; p->owned && l < p->n_layer; l++)
        free(p->owned[l]);
    free(p->owned);
    free((void *)p->router);
    free(p->job_x), free(p->x), free(p->logits), free(p->ids), free(p->mark);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Layer l's router as f32 rows: the backend's host copy where it is f32
 * rows, else an f32 copy of the file's bytes (dequantized). */
static int router_of(struct model_pred *p, const struct model *m, int l, struct strata_error *err) {
    const struct backend_ops *be = m->be->ops;
    struct backend_host_mat h;
    if (be->weight_host && be->weight_host(m->be->ctx, m->layers[l].gate_inp, -1, &h) == 0 &&
        h.type == QUANT_F32 && h.layout == BACKEND_LAYOUT_ROWS && h.n_rows == p->n_expert &&
        h.n_cols == p->n_embd && h.row_bytes == (size_t)p->n_embd * sizeof(float)) {
        p->router[l] = h.data;
        return 0;
    }
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    const struct gguf_tensor_info *t = gguf_find_tensor(m->gguf, name);
    if (!t || t->ne[0] != p->n_embd || t->ne[1] != p->n_expert)
        return strata_error_set(err, STRATA_E_FORMAT, "model: %s for the lookahead: bad shape",
                                name);
    const size_t rb = quant_row_size((enum quant_type)t->type, p->n_embd);
    float *w = malloc((size_t)p->n_expert * p->n_embd * sizeof(float));
    if (!w)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for the lookahead");
    for (int e = 0; e < p->n_expert; e++)
        if (quant_dequantize_row((enum quant_type)t->type, (const uint8_t *)t->data + e * rb,
                                 w + (size_t)e * p->n_embd, p->n_embd)) {
            free(w);
            return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                    "model: %s: no f32 form for the lookahead", name);
        }
    p->owned[l] = w;
    p->router[l] = w;
    return 0;
}

struct model_pred *model_pred_init(const struct model *m, int depth, const bool *want,
                                   struct strata_error *err) {
    struct model_pred *p = calloc(1, sizeof *p);
    if (!p) {
        strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for the lookahead");
        return NULL;
    }
    const struct model_hparams *hp = &m->hp;
    p->experts = m->experts;
    p->n_layer = hp->n_layer;
    p->n_embd = hp->n_embd;
    p->n_expert = hp->n_expert;
    p->k = hp->n_expert_used;
    p->depth = depth;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        dot = dot_avx2;
#endif
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    const size_t rows = (size_t)PRED_ROWS_MAX * hp->n_embd;
    if (!(p->router = calloc((size_t)hp->n_layer, sizeof *p->router)) ||
        !(p->owned = calloc((size_t)hp->n_layer, sizeof *p->owned)) ||
        !(p->job_x = malloc(rows * sizeof(float))) || !(p->x = malloc(rows * sizeof(float))) ||
        !(p->logits = malloc((size_t)hp->n_expert * sizeof(float))) ||
        !(p->ids = malloc((size_t)hp->n_expert * sizeof(int32_t))) ||
        !(p->mark = malloc((size_t)hp->n_expert))) {
        model_pred_free(p);
        strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for the lookahead");
        return NULL;
    }
    for (int l = 0; l < hp->n_layer; l++)
        if (want[l] && m->layers[l].gate_inp && router_of(p, m, l, err)) {
            model_pred_free(p);
            return NULL;
        }
    if (pthread_create(&p->th, NULL, pred_main, p) != 0) {
        model_pred_free(p);
        strata_error_set(err, STRATA_E_NOMEM, "model: cannot start the lookahead thread");
        return NULL;
    }
    p->th_ok = true;
    return p;
}
