/* tests/engine/test-model-bench.c: decode and prefill throughput of the
 * forward pass (not a test suite; built as bench-model).
 *
 *   bench-model MODEL [n_threads=2] [n_decode=64] [n_prefill=64] [n_seq=1]
 *
 * Prints prefill tok/s (one chunk of n_prefill tokens), then decode tok/s:
 * n_decode greedy steps, n_seq sequences per step batched into one call
 * (tok/s counts every sequence's token). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/kv.h"
#include "engine/model.h"
#include "engine/pool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench-model MODEL [threads] [n_decode] [n_prefill] [n_seq]\n");
        return 2;
    }
    int n_threads = argc > 2 ? atoi(argv[2]) : 2;
    int n_decode = argc > 3 ? atoi(argv[3]) : 64;
    int n_prefill = argc > 4 ? atoi(argv[4]) : 64;
    int n_seq = argc > 5 ? atoi(argv[5]) : 1;
    if (n_threads < 1 || n_decode < 1 || n_prefill < 1 || n_seq < 1 || n_seq > 64) {
        fprintf(stderr, "bench-model: bad arguments\n");
        return 2;
    }
    struct strata_error err = {0};
    struct pool_params pp = pool_params_default();
    pp.n_threads = n_threads;
    struct pool *pool = pool_init(&pp, &err);
    struct model_params mp = model_params_default();
    mp.pool = pool;
    mp.n_ctx_max = n_prefill + n_decode + 8;
    mp.n_batch_max = n_prefill > n_seq ? n_prefill : n_seq;
    struct model *m = pool ? model_load(argv[1], &mp, &err) : NULL;
    struct kv_cache *kv = m ? model_kv_init(m, n_seq, 0, &err) : NULL;
    if (!kv) {
        fprintf(stderr, "bench-model: %s\n", err.message);
        model_free(m);
        pool_free(pool);
        return 1;
    }
    const int V = model_n_vocab(m);
    float *logits = malloc((size_t)n_seq * V * sizeof(float));
    struct model_batch_entry *e = malloc((size_t)mp.n_batch_max * sizeof *e);
    int32_t bos = model_hparams(m)->bos_token_id >= 0 ? model_hparams(m)->bos_token_id : 0;
    int rc = 0;
    /* prefill: seq 0, one chunk */
    for (int i = 0; i < n_prefill; i++)
        e[i] = (struct model_batch_entry){0, i, (bos + i * 7) % V, i == n_prefill - 1};
    double t0 = now_s();
    rc |= model_forward(m, kv, &(struct model_batch){e, n_prefill}, logits, &err);
    double t_pre = now_s() - t0;
    /* decode: every sequence continues from its own prefix */
    int32_t tok[64];
    for (int s = 0; s < n_seq; s++) {
        if (s > 0)
            rc |= kv_seq_copy(kv, s, 0, n_prefill, &err);
        tok[s] = argmax(logits, V);
    }
    t0 = now_s();
    for (int step = 0; step < n_decode && rc == 0; step++) {
        for (int s = 0; s < n_seq; s++)
            e[s] = (struct model_batch_entry){s, n_prefill + step, tok[s], true};
        rc |= model_forward(m, kv, &(struct model_batch){e, n_seq}, logits, &err);
        for (int s = 0; s < n_seq; s++)
            tok[s] = argmax(logits + (size_t)s * V, V);
    }
    double t_dec = now_s() - t0;
    if (rc)
        fprintf(stderr, "bench-model: %s\n", err.message);
    else
        printf("%s arch=%s threads=%d prefill %d tok: %.1f tok/s; decode %d steps x %d seq: %.2f "
               "tok/s (%.2f ms/step)\n",
               argv[1], model_arch_name(m), n_threads, n_prefill, n_prefill / t_pre, n_decode,
               n_seq, (double)n_decode * n_seq / t_dec, t_dec * 1e3 / n_decode);
    free(e);
    free(logits);
    kv_free(kv);
    model_free(m);
    pool_free(pool);
    return rc ? 1 : 0;
}
