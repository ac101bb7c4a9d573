/* tests/engine/model/test-model.c: golden greedy decodes on real small models, and
 * batch consistency (several sequences in one batch vs alone, chunked
 * prefill vs token by token, 1 vs 2 threads). */
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/progress.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-helper.h"
#include "engine/host/pool.h"
#include "tests/harness.h"

#define N_GOLDEN 60

/* Parses "greedy ids from BOS: [a, b, ...]" from a golden file. Returns count. */
static int read_golden(const char *rel, int32_t *ids, int cap) {
    char path[1024];
    char *txt = test_read_file(test_shared_path(path, sizeof path, rel), NULL);
    ck_assert_msg(txt != NULL, "missing %s", path);
    char *p = strstr(txt, "greedy ids from BOS: [");
    ck_assert_msg(p != NULL, "%s: no id list", path);
    p = strchr(p, '[') + 1;
    int n = 0;
    while (n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
        if (*p == ']')
            break;
    }
    free(txt);
    return n;
}

static struct pool *make_pool(int n_threads) {
    struct pool_params pp = pool_params_default();
    pp.n_threads = n_threads;
    struct strata_error err = {0};
    struct pool *p = pool_init(&pp, &err);
    ck_assert_msg(p != NULL, "pool_init: %s", err.message);
    return p;
}

static struct model *load(const char *rel, struct pool *pool) {
    char path[1024];
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.pool = pool;
    mp.n_ctx_max = 256;
    mp.n_batch_max = 64;
    struct model *m = test_model_load(test_shared_path(path, sizeof path, rel), &mp, &err);
    ck_assert_msg(m != NULL, "model_load %s: %s", path, err.message);
    return m;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void check_greedy(const char *model_rel, const char *golden_rel) {
    int32_t want[N_GOLDEN + 8];
    int n_want = read_golden(golden_rel, want, N_GOLDEN + 8);
    ck_assert_int_eq(n_want, N_GOLDEN);
    struct pool *pool = make_pool(2);
    struct model *m = load(model_rel, pool);
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    float *logits = malloc((size_t)model_n_vocab(m) * sizeof(float));
    int32_t tok = model_hparams(m)->bos_token_id;
    ck_assert_int_ge(tok, 0);
    for (int i = 0; i < N_GOLDEN; i++) {
        struct model_batch_entry e = {.seq_id = 0, .pos = i, .token = tok, .want_logits = true};
        struct model_batch b = {.entries = &e, .n_entries = 1};
        ck_assert_msg(model_forward(m, kv, &b, logits, &err) == 0, "%s", err.message);
        tok = argmax(logits, model_n_vocab(m));
        ck_assert_msg(tok == want[i], "%s: step %d: got %d want %d", model_rel, i, tok, want[i]);
    }
    ck_assert_int_eq(kv_seq_len(kv, 0), N_GOLDEN);
    free(logits);
    kv_free(kv);
    test_model_free(m);
    pool_free(pool);
}

START_TEST(test_golden_stories260k) {
    check_greedy("models/stories260K.gguf", "models/golden_stories260K_gguf_greedy.txt");
}
END_TEST

START_TEST(test_golden_llama2_tiny_random) {
    check_greedy("models/llama-2-tiny-random.gguf", "models/golden_llama2_tiny_random_greedy.txt");
}
END_TEST

START_TEST(test_hparams_stories) {
    struct model *m = load("models/stories260K.gguf", NULL);
    const struct model_hparams *hp = model_hparams(m);
    ck_assert_str_eq(model_arch_name(m), "llama");
    ck_assert_int_eq(hp->n_embd, 64);
    ck_assert_int_eq(hp->n_layer, 5);
    ck_assert_int_eq(hp->n_head, 8);
    ck_assert_int_eq(hp->n_head_kv, 4);
    ck_assert_int_eq(hp->n_vocab, 512);
    ck_assert_int_eq(hp->n_rot, 8);
    ck_assert_int_eq(hp->rope_type, MODEL_ROPE_NORMAL);
    ck_assert(!model_is_moe(m));
    ck_assert(model_gguf(m) != NULL);
    ck_assert_int_eq(model_n_ctx_max(m), 256);
    test_model_free(m);
}
END_TEST

/* Runs `prompt` through seq 0 of a fresh cache token by token; logits (n, n_vocab). */
static float *run_alone(struct model *m, const int32_t *prompt, int n) {
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    int V = model_n_vocab(m);
    float *out = malloc((size_t)n * V * sizeof(float));
    for (int i = 0; i < n; i++) {
        struct model_batch_entry e = {0, i, prompt[i], true};
        struct model_batch b = {&e, 1};
        ck_assert_msg(model_forward(m, kv, &b, out + (size_t)i * V, &err) == 0, "%s", err.message);
    }
    kv_free(kv);
    return out;
}

static const int32_t prompt16[16] = {1,   403, 407, 261, 378, 432, 383, 286,
                                     261, 376, 298, 315, 421, 395, 317, 426};

START_TEST(test_batch_of_sequences_matches_alone) {
    struct pool *pool = make_pool(2);
    struct model *m = load("models/stories260K.gguf", pool);
    const int n = 16, S = 4, V = model_n_vocab(m);
    float *alone = run_alone(m, prompt16, n);
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, S, 0, &err);
    float *got = malloc((size_t)S * V * sizeof(float));
    /* Sequences start at staggered steps so batches mix positions. */
    for (int step = 0; step < n + S; step++) {
        struct model_batch_entry e[4];
        int ne = 0, which[4];
        for (int s = 0; s < S; s++) {
            int p = step - s;
            if (p < 0 || p >= n)
                continue;
            e[ne] = (struct model_batch_entry){s, p, prompt16[p], true};
            which[ne++] = p;
        }
        if (!ne)
            continue;
        struct model_batch b = {e, ne};
        ck_assert_msg(model_forward(m, kv, &b, got, &err) == 0, "%s", err.message);
        for (int i = 0; i < ne; i++)
            ck_assert_msg(memcmp(got + (size_t)i * V, alone + (size_t)which[i] * V,
                                 (size_t)V * sizeof(float)) == 0,
                          "seq %d pos %d differs from alone", e[i].seq_id, which[i]);
    }
    free(got);
    free(alone);
    kv_free(kv);
    test_model_free(m);
    pool_free(pool);
}
END_TEST

static float max_rel_diff(const float *a, const float *b, size_t n) {
    float mx = 0.0f, scale = 1e-6f;
    for (size_t i = 0; i < n; i++)
        scale = fmaxf(scale, fabsf(b[i]));
    for (size_t i = 0; i < n; i++)
        mx = fmaxf(mx, fabsf(a[i] - b[i]));
    return mx / scale;
}

START_TEST(test_chunked_prefill_matches_token_by_token) {
    struct pool *pool = make_pool(2);
    const char *models[2] = {"models/stories260K.gguf", "models/llama-2-tiny-random.gguf"};
    for (int mi = 0; mi < 2; mi++) {
        struct model *m = load(models[mi], pool);
        const int n = 16, V = model_n_vocab(m);
        float *alone = run_alone(m, prompt16, n);
        struct strata_error err = {0};
        struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
        float *got = malloc((size_t)n * V * sizeof(float));
        /* chunks of 5, 7, 4 with logits for every entry */
        int chunks[3] = {5, 7, 4}, p = 0;
        for (int c = 0; c < 3; c++) {
            struct model_batch_entry e[16];
            for (int i = 0; i < chunks[c]; i++)
                e[i] = (struct model_batch_entry){0, p + i, prompt16[p + i], true};
            struct model_batch b = {e, chunks[c]};
            ck_assert_msg(model_forward(m, kv, &b, got + (size_t)p * V, &err) == 0, "%s",
                          err.message);
            p += chunks[c];
        }
        float d = max_rel_diff(got, alone, (size_t)n * V);
        /* 1e-4 relative: the same dots may be summed in another order by a
         * tiled matmul; anything real (a wrong position) is > 1e-2. */
        ck_assert_msg(d < 1e-4f, "%s: chunked vs single max rel diff %g", models[mi], d);
        /* a prefill with logits only for the last entry gives that row */
        kv_seq_clear(kv, 0, NULL);
        struct model_batch_entry e[16];
        for (int i = 0; i < n; i++)
            e[i] = (struct model_batch_entry){0, i, prompt16[i], i == n - 1};
        struct model_batch b = {e, n};
        ck_assert_int_eq(model_batch_n_outputs(&b), 1);
        ck_assert_int_eq(model_forward(m, kv, &b, got, &err), 0);
        d = max_rel_diff(got, alone + (size_t)(n - 1) * V, V);
        ck_assert_msg(d < 1e-4f, "%s: last-only diff %g", models[mi], d);
        free(got);
        free(alone);
        kv_free(kv);
        test_model_free(m);
    }
    pool_free(pool);
}
END_TEST

START_TEST(test_threads_bit_identical) {
    const int n = 16;
    struct pool *p1 = make_pool(1), *p2 = make_pool(2);
    struct model *m1 = load("models/stories260K.gguf", p1);
    struct model *m2 = load("models/stories260K.gguf", p2);
    const int V = model_n_vocab(m1);
    /* one 16-token chunk so matmuls have enough rows to split across threads */
    float *l[2];
    struct model *ms[2] = {m1, m2};
    for (int k = 0; k < 2; k++) {
        struct strata_error err = {0};
        struct kv_cache *kv = model_kv_init(ms[k], 1, 0, &err);
        struct model_batch_entry e[16];
        for (int i = 0; i < n; i++)
            e[i] = (struct model_batch_entry){0, i, prompt16[i], true};
        struct model_batch b = {e, n};
        l[k] = malloc((size_t)n * V * sizeof(float));
        ck_assert_int_eq(model_forward(ms[k], kv, &b, l[k], &err), 0);
        kv_free(kv);
    }
    ck_assert(memcmp(l[0], l[1], (size_t)n * V * sizeof(float)) == 0);
    free(l[0]);
    free(l[1]);
    test_model_free(m1);
    test_model_free(m2);
    pool_free(p1);
    pool_free(p2);
}
END_TEST

START_TEST(test_bad_batches) {
    struct model *m = load("models/stories260K.gguf", NULL);
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, 2, 8, &err);
    float *logits = malloc((size_t)4 * model_n_vocab(m) * sizeof(float));
    struct model_batch_entry e[2] = {{0, 0, 1, true}, {0, 1, 5, true}};
    struct model_batch b = {e, 2};
    ck_assert_int_eq(model_forward(m, kv, &b, logits, &err), 0);
    ck_assert_int_eq(kv_seq_len(kv, 0), 2);
    struct model_batch_entry bad[][1] = {
        {{0, 3, 1, true}},   /* gap: len is 2 */
        {{0, 2, 512, true}}, /* token out of range */
        {{0, 2, -1, true}},  /* negative token */
        {{2, 0, 1, true}},   /* seq out of range */
        {{1, -1, 1, true}},  /* negative pos */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct model_batch bb = {bad[i], 1};
        ck_assert_int_eq(model_forward(m, kv, &bb, logits, &err), STRATA_E_INVALID);
    }
    struct model_batch_entry dup[2] = {{1, 0, 1, true}, {1, 0, 1, true}}; /* not increasing */
    struct model_batch bd = {dup, 2};
    ck_assert_int_eq(model_forward(m, kv, &bd, logits, &err), STRATA_E_INVALID);
    ck_assert_int_eq(kv_seq_len(kv, 1), 0);
    struct model_batch_entry far = {1, 8, 1, true}; /* n_ctx 8 */
    struct model_batch bf = {&far, 1};
    ck_assert_int_eq(model_forward(m, kv, &bf, logits, &err), STRATA_E_CONTEXT_LENGTH);
    struct model_batch empty = {e, 0};
    ck_assert_int_eq(model_forward(m, kv, &empty, logits, &err), STRATA_E_RANGE);
    ck_assert_int_eq(model_forward(m, kv, &b, NULL, &err), STRATA_E_INVALID);
    /* rewind: writing pos 1 again truncates to 2 */
    struct model_batch_entry rw = {0, 1, 7, false};
    struct model_batch br = {&rw, 1};
    ck_assert_int_eq(model_forward(m, kv, &br, NULL, &err), 0);
    ck_assert_int_eq(kv_seq_len(kv, 0), 2);
    /* a kv cache of another shape is refused */
    struct kv_params kp = {
        .n_layer = 1, .n_seq_max = 1, .n_ctx = 4, .n_embd_k = 32, .n_embd_v = 32};
    struct kv_cache *kv2 = kv_init(&kp, &err);
    ck_assert_int_eq(model_forward(m, kv2, &b, logits, &err), STRATA_E_INVALID);
    kv_free(kv2);
    free(logits);
    kv_free(kv);
    test_model_free(m);
}
END_TEST

/* Writes a minimal GGUF v3 with one string key and no tensors. */
static void write_arch_only(const char *path, const char *arch) {
    FILE *fp = fopen(path, "wb");
    ck_assert(fp != NULL);
    uint32_t u32;
    uint64_t u64;
    fwrite("GGUF", 1, 4, fp);
    u32 = 3, fwrite(&u32, 4, 1, fp);
    u64 = 0, fwrite(&u64, 8, 1, fp);
    u64 = 1, fwrite(&u64, 8, 1, fp);
    const char *key = "general.architecture";
    u64 = strlen(key), fwrite(&u64, 8, 1, fp), fwrite(key, 1, strlen(key), fp);
    u32 = 8, fwrite(&u32, 4, 1, fp);
    u64 = strlen(arch), fwrite(&u64, 8, 1, fp), fwrite(arch, 1, strlen(arch), fp);
    fclose(fp);
}

/* model_probe: the header's hparams as model_load reads them, the tensor
 * table's element and byte counts; the same errors for bad files. */
START_TEST(test_probe) {
    struct strata_error err = {0};
    char path[1024];
    test_shared_path(path, sizeof path, "models/stories260K.gguf");
    struct model_probe pr;
    ck_assert_msg(model_probe(path, &pr, &err) == 0, "%s", err.message);
    struct model_params mp = model_params_default();
    struct model *m = test_model_load(path, &mp, &err);
    ck_assert_ptr_nonnull(m);
    const struct model_hparams *hp = model_hparams(m);
    ck_assert_str_eq(pr.hp.arch, hp->arch);
    ck_assert_int_eq(pr.hp.n_ctx_train, hp->n_ctx_train);
    ck_assert_int_eq(pr.hp.n_layer, hp->n_layer);
    ck_assert_int_eq(pr.hp.n_head_kv, hp->n_head_kv);
    ck_assert_int_eq(pr.hp.head_dim_k, hp->head_dim_k);
    ck_assert_int_eq(pr.hp.head_dim_v, hp->head_dim_v);
    ck_assert_int_eq(pr.hp.n_vocab, hp->n_vocab);
    ck_assert_int_eq(model_n_ctx_max(m), pr.hp.n_ctx_train); /* n_ctx_max 0: the trained one */
    /* stories260K by its shapes: embeddings and output (untied), the final
     * norm, per layer two norms, q and o (E x E), k and v (E x kv), three
     * FFN matrices (E x n_ff = 172): 292,800; all F32 */
    const int64_t E = hp->n_embd, KV = (int64_t)hp->n_head_kv * hp->head_dim_k;
    ck_assert(!hp->tied_output);
    ck_assert_int_eq(hp->n_ff, 172);
    ck_assert_int_eq(pr.n_params,
                     2 * hp->n_vocab * E + E +
                         hp->n_layer * (2 * E + 2 * E * E + 2 * E * KV + 3 * E * hp->n_ff));
    ck_assert_int_eq(pr.n_params, 292800);
    ck_assert_uint_eq(pr.n_bytes, (uint64_t)pr.n_params * 4);
    test_model_free(m);
    char tmp[] = "/tmp/strata-test-probe-XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_arch_only(tmp, "gpt2");
    ck_assert_int_eq(model_probe(tmp, &pr, &err), STRATA_E_UNSUPPORTED);
    write_arch_only(tmp, "llama");
    ck_assert_int_eq(model_probe(tmp, &pr, &err), STRATA_E_FORMAT);
    unlink(tmp);
    ck_assert_int_ne(model_probe("/nonexistent/model.gguf", &pr, &err), 0);
}
END_TEST

/* The load's progress: "mapping weights" (prefault) then "copying weights"
 * (the arena), each from 0 up to its total, never back, ending at it. */
struct progress_log {
    char phase[4][32];
    uint64_t first[4], last[4], total[4];
    int n_phases, n_calls;
    bool backwards;
};
static void on_progress(void *arg, const char *phase, uint64_t done, uint64_t total) {
    struct progress_log *l = arg;
    l->n_calls++;
    int k = l->n_phases - 1;
    if (k < 0 || strcmp(l->phase[k], phase)) {
        ck_assert_int_lt(l->n_phases, 4);
        k = l->n_phases++;
        snprintf(l->phase[k], sizeof l->phase[k], "%s", phase);
        l->first[k] = done;
        l->total[k] = total;
    } else if (done < l->last[k] || total != l->total[k]) {
        l->backwards = true;
    }
    l->last[k] = done;
}

START_TEST(test_load_progress) {
    struct strata_error err = {0};
    char path[1024];
    test_shared_path(path, sizeof path, "models/llama-2-tiny-random.gguf");
    struct progress_log log = {0};
    const struct strata_progress pr = {on_progress, &log};
    struct model_params mp = model_params_default();
    mp.prefault = true;
    mp.repack = true;
    mp.progress = &pr;
    struct model *m = test_model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_int_eq(log.n_phases, 2);
    ck_assert_str_eq(log.phase[0], "mapping weights");
    ck_assert_str_eq(log.phase[1], "copying weights");
    ck_assert(!log.backwards);
    for (int k = 0; k < 2; k++) {
        ck_assert_uint_eq(log.first[k], 0);
        ck_assert_uint_gt(log.total[k], 0);
        ck_assert_uint_eq(log.last[k], log.total[k]);
    }
    /* what was copied is what the load reports */
    ck_assert_uint_eq(log.total[1], model_copied_bytes(m));
    test_model_free(m);
    /* no prefault, no copy: nothing to report */
    struct progress_log none = {0};
    const struct strata_progress pr2 = {on_progress, &none};
    mp.prefault = mp.repack = false;
    mp.progress = &pr2;
    m = test_model_load(path, &mp, &err);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(none.n_calls, 0);
    test_model_free(m);
}
END_TEST

START_TEST(test_refuses_bad_files) {
    struct strata_error err = {0};
    char path[] = "/tmp/strata-test-model-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_arch_only(path, "gpt2");
    ck_assert(test_model_load(path, NULL, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "gpt2") != NULL, "%s", err.message);
    write_arch_only(path, "llama"); /* no tensors, no hparams */
    ck_assert(test_model_load(path, NULL, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    unlink(path);
    ck_assert(test_model_load("/nonexistent/model.gguf", NULL, &err) == NULL);
    ck_assert_int_ne(err.code, 0);
    test_model_free(NULL);
}
END_TEST

static Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_hparams_stories);
    tcase_add_test(tc, test_golden_stories260k);
    tcase_add_test(tc, test_golden_llama2_tiny_random);
    tcase_add_test(tc, test_batch_of_sequences_matches_alone);
    tcase_add_test(tc, test_chunked_prefill_matches_token_by_token);
    tcase_add_test(tc, test_threads_bit_identical);
    tcase_add_test(tc, test_bad_batches);
    tcase_add_test(tc, test_refuses_bad_files);
    tcase_add_test(tc, test_probe);
    tcase_add_test(tc, test_load_progress);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("model", model_suite)
