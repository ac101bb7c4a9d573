/* tools/synth/synth-impl.h: internals shared by synth*.c (not a public API). */
#ifndef STRATA_SYNTH_IMPL_H
#define STRATA_SYNTH_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/rng.h"
#include "engine/gguf/gguf.h"
#include "tools/synth/synth.h"

/* engine/core/rng.h's generator (~1 ns per number, plenty for weights). */
struct synth_rng {
    struct strata_rng g;
};
void synth_rng_seed(struct synth_rng *r, uint64_t a, uint64_t b, uint64_t c);
static inline uint64_t synth_rng_next(struct synth_rng *r) {
    return strata_rng_next(&r->g);
}
/* Uniform in [-1, 1). */
static inline float synth_rng_sym(struct synth_rng *r) {
    return (float)((int64_t)synth_rng_next(r) >> 11) * (1.0f / 4503599627370496.0f);
}

/* Writes a uniform random row of a K-quant type (Q4_K, Q5_K, Q6_K) with
 * standard deviation std directly as codes (synth-direct.c). Returns 0, or
 * 1 when the type / length is not handled (use quant_quantize_row). */
int synth_direct_row(uint32_t type, float std, struct synth_rng *r, void *dst, int64_t n);

/* Writes the tokenizer.* KVs: copied from p->vocab_from when set, else the
 * built-in vocabulary of n_vocab tokens. *n_vocab_out is the token count. */
int synth_vocab_write(struct gguf_writer *w, const struct synth_params *p, int64_t *n_vocab_out,
                      struct strata_error *err);
/* Token count of a vocab file (tokenizer.ggml.tokens), or negative error. */
int64_t synth_vocab_size(const struct gguf_file *f, struct strata_error *err);

/* Fills one f32 row (ne0 elements) for row index `row` and converts it to
 * `type` into dst (row_bytes). Called from several threads at once. */
typedef int (*synth_row_fn)(void *ctx, int64_t row, float *f32, void *dst);

/* Streams n_rows rows of the current tensor into w: batches of rows are
 * produced by n_threads threads (each with an ne0-float scratch row), then
 * written in order. Threads are created per batch: a batch is >= 4 MiB of
 * output, so creation (~20 us) is noise next to the quantization. */
int synth_stream_rows(struct gguf_writer *w, int64_t n_rows, int64_t ne0, size_t row_bytes,
                      synth_row_fn fn, void *ctx, int n_threads, struct strata_error *err);

#endif
