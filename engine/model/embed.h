/* engine/model/embed.h: pooling a sequence's final hidden states into one
 * embedding, as llama.cpp does for a model with <arch>.pooling_type
 * (model_hparams.pooling_type), then L2-normalised as llama-server's
 * OpenAI /v1/embeddings does by default.
 *
 *   enum embed_pooling p = embed_pooling_of(model_hparams(m)->pooling_type);
 *   double *acc = calloc(n_embd, sizeof *acc);          // (n_embd) running sum / pick
 *   for each position pos of an n-token input:
 *       if (embed_wants(p, pos, n)) mark the entry want_hidden, and after the step:
 *           embed_add(p, acc, hidden_row, n_embd);      // row: (n_embd) f32
 *   embed_finish(p, acc, n, n_embd, out, &err);         // out: (n_embd) f32, unit length
 *
 * Pooling (llama.cpp's values): MEAN averages every position, CLS takes
 * position 0, LAST the last position (Qwen3-Embedding). NONE (per-token
 * vectors) and RANK (a classifier head) are not implemented:
 * embed_pooling_check says so.
 *
 * Ownership: the caller owns every buffer. Threading: pure functions.
 */
#ifndef STRATA_EMBED_H
#define STRATA_EMBED_H

#include <stdbool.h>

#include "engine/core/error.h"

enum embed_pooling {
    EMBED_POOLING_NONE = 0,
    EMBED_POOLING_MEAN = 1,
    EMBED_POOLING_CLS = 2,
    EMBED_POOLING_LAST = 3,
    EMBED_POOLING_RANK = 4,
};

/* "none", "mean", "cls", "last", "rank"; "unset" for -1, "?" otherwise. Static. */
const char *embed_pooling_name(int pooling);
/* 0 when pooling is MEAN, CLS or LAST; else STRATA_E_UNSUPPORTED with a
 * message naming it (-1: the file has no pooling type). */
int embed_pooling_check(int pooling, struct strata_error *err);
/* Whether the hidden state of position pos of an n-token input is pooled. */
bool embed_wants(enum embed_pooling p, int pos, int n);
/* Takes one wanted row into acc (n_embd): MEAN adds it, CLS and LAST keep it. */
void embed_add(enum embed_pooling p, double *acc, const float *row, int n_embd);
/* out (n_embd) = the pooled vector over n tokens, divided by its L2 norm
 * (a zero vector stays zero). STRATA_E_INVALID for n < 1. */
int embed_finish(enum embed_pooling p, const double *acc, int n, int n_embd, float *out,
                 struct strata_error *err);
/* out (n_embd) = in scaled to unit L2 norm (in-place allowed; zero stays zero). */
void embed_normalize(const float *in, int n_embd, float *out);

#endif
