/* engine/model/embed.c: pooling and normalisation of embeddings (see embed.h). */
#include "engine/model/embed.h"

#include <math.h>

const char *embed_pooling_name(int pooling) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    if (pooling == -1)
        return "unset";
    return pooling >= 0 && pooling <= EMBED_POOLING_RANK ? names[pooling] : "?";
}

int embed_pooling_check(int pooling, struct strata_error *err) {
    if (pooling == EMBED_POOLING_MEAN || pooling == EMBED_POOLING_CLS ||
        pooling == EMBED_POOLING_LAST)
        return 0;
    if (pooling == -1)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "this model has no pooling type (<arch>.pooling_type): it is not "
                                "an embedding model");
    return strata_error_set(err, STRATA_E_UNSUPPORTED,
                            "pooling type %d (%s) is not supported: mean, cls and last are",
                            pooling, embed_pooling_name(pooling));
}

bool embed_wants(enum embed_pooling p, int pos, int n) {
    switch (p) {
    case EMBED_POOLING_MEAN:
        return pos >= 0 && pos < n;
    case EMBED_POOLING_CLS:
        return pos == 0;
    case EMBED_POOLING_LAST:
        return pos == n - 1;
    default:
        return false;
    }
}

void embed_add(enum embed_pooling p, double *acc, const float *row, int n_embd) {
    for (int i = 0; i < n_embd; i++)
        acc[i] = p == EMBED_POOLING_MEAN ? acc[i] + row[i] : row[i];
}

void embed_normalize(const float *in, int n_embd, float *out) {
    double ss = 0; /* double: llama.cpp's common_embd_normalize sums in double too */
    for (int i = 0; i < n_embd; i++)
        ss += (double)in[i] * in[i];
    const double scale = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (int i = 0; i < n_embd; i++)
        out[i] = (float)(in[i] * scale);
}

int embed_finish(enum embed_pooling p, const double *acc, int n, int n_embd, float *out,
                 struct strata_error *err) {
    if (n < 1)
        return strata_error_set(err, STRATA_E_INVALID, "embedding of an empty input");
    const double div = p == EMBED_POOLING_MEAN ? (double)n : 1.0;
    for (int i = 0; i < n_embd; i++)
        out[i] = (float)(acc[i] / div);
    embed_normalize(out, n_embd, out);
    return 0;
}
