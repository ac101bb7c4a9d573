/* tests/engine/model/model-helper.h: model_load with a CPU backend the
 * helper makes over params->pool (the caller's pool, or one thread) and
 * frees with the model: the tests' one way to load a model.
 *
 *   struct model *m = test_model_load(path, &mp, &err);   // mp may be NULL
 *   ... model_forward ...
 *   test_model_free(m);                                    // model, then its backend
 *
 * Threading: the test's thread only (Check forks a process per test). */
#ifndef STRATA_TEST_MODEL_HELPER_H
#define STRATA_TEST_MODEL_HELPER_H

#include "engine/cpu/backend-cpu.h"
#include "engine/model/model.h"

#define TEST_MODELS_MAX 64

/* models loaded and not freed, with their backends */
static struct model *test_models[TEST_MODELS_MAX];
static struct backend *test_backends[TEST_MODELS_MAX];

/* cpu: the backend's parameters (NULL: the defaults); its pool is
 * params->pool either way. */
static inline struct model *test_model_load_cpu(const char *path, const struct model_params *params,
                                                const struct backend_cpu_params *cpu,
                                                struct strata_error *err) {
    struct model_params mp = params ? *params : model_params_default();
    struct backend_cpu_params cp = cpu ? *cpu : backend_cpu_params_default();
    cp.pool = mp.pool;
    struct backend *be = backend_cpu_init(&cp, err);
    if (!be)
        return NULL;
    mp.backend = be;
    struct model *m = model_load(path, &mp, err);
    int slot = 0;
    while (m && slot < TEST_MODELS_MAX && test_models[slot])
        slot++;
    if (!m || slot == TEST_MODELS_MAX) {
        model_free(m);
        backend_free(be);
        return NULL;
    }
    test_models[slot] = m;
    test_backends[slot] = be;
    return m;
}

static inline struct model *test_model_load(const char *path, const struct model_params *params,
                                            struct strata_error *err) {
    return test_model_load_cpu(path, params, NULL, err);
}

static inline void test_model_free(struct model *m) {
    if (!m)
        return;
    model_free(m);
    for (int i = 0; i < TEST_MODELS_MAX; i++)
        if (test_models[i] == m) {
            backend_free(test_backends[i]);
            test_models[i] = NULL;
            test_backends[i] = NULL;
        }
}

#endif
