/* engine/sample/sampler.h: next-token sampling and stop-sequence matching for one
 * generation session.
 *
 *   struct sampler_params sp = sampler_params_default();
 *   sp.temperature = 0.7f; sp.top_p = 0.9f; sp.seed = 42; sp.n_top_logprobs = 3;
 *   struct sampler *s = sampler_init(&sp, n_vocab, &err);
 *   struct sampler_result r;
 *   sampler_sample(s, logits, &r, &err);      // logits: (n_vocab) f32, not modified
 *   sampler_accept(s, r.token);               // into the penalty window
 *   sampler_free(s);
 *
 *   struct stop_matcher *m = stop_matcher_init(stops, 2, &err);
 *   size_t n; const char *out = stop_matcher_feed(m, text, len, &n, &hit); // safe to emit
 *   out = stop_matcher_flush(m, &n);          // at the end (no stop): held-back text
 *   stop_matcher_free(m);
 *
 * Pipeline of sampler_sample (llama.cpp's order for the parts it has):
 *   logits -> logit_bias -> repetition/presence/frequency penalties
 *          -> [logprobs are taken here] -> temperature <= 0: argmax
 *          -> top_k -> softmax -> top_p -> min_p -> temperature -> draw.
 * Logprobs (OpenAI's logprobs/top_logprobs): log-softmax of the biased and
 * penalised logits at temperature 1, before truncation. Reason: this is the
 * model's own distribution for the text actually conditioned on (OpenAI
 * reports the same values whatever temperature a request uses, and greedy
 * requests still get finite alternatives); a token that top_k/top_p cut
 * still gets its true logprob.
 * Penalties (llama.cpp semantics): over the last penalty_last_n accepted
 * tokens (the generated ones; the caller decides what to accept), a token seen
 * c > 0 times gets logit/repeat_penalty (logit >= 0) or logit*repeat_penalty
 * (logit < 0), then -= c*frequency_penalty + presence_penalty.
 * Randomness: each sampler has its own xoshiro256** state seeded from
 * params.seed (splitmix64), so the same seed and logits give the same tokens;
 * no global state.
 *
 * Threading: a sampler and a stop_matcher belong to one thread at a time.
 */
#ifndef STRATA_SAMPLER_H
#define STRATA_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

#define SAMPLER_MAX_TOP_LOGPROBS 20
#define SAMPLER_MAX_STOPS 16
#define SAMPLER_MAX_STOP_LEN 1024 /* bytes of one stop sequence */

struct sampler_bias {
    int32_t token;
    float bias; /* added to the logit; -100 effectively bans, +100 forces */
};

struct sampler_params {
    float temperature;               /* <= 0: greedy (argmax). default 1 */
    int top_k;                       /* <= 0: off. default 0 */
    float top_p;                     /* >= 1: off. default 1 */
    float min_p;                     /* <= 0: off; keeps p >= min_p * p_max. default 0 */
    float repeat_penalty;            /* 1: off. default 1 */
    float presence_penalty;          /* default 0 */
    float frequency_penalty;         /* default 0 */
    int penalty_last_n;              /* window of accepted tokens the penalties see. default 64 */
    uint64_t seed;                   /* PRNG seed */
    int n_top_logprobs;              /* alternatives to report, 0..SAMPLER_MAX_TOP_LOGPROBS */
    bool want_logprob;               /* fill result.logprob (default true); false with
                                        n_top_logprobs 0 skips the log-sum-exp over the
                                        vocabulary (result.logprob is then NAN) */
    const struct sampler_bias *bias; /* borrowed for sampler_init only (copied); may be NULL */
    int n_bias;
};
struct sampler_params sampler_params_default(void);

struct sampler_logprob {
    int32_t token;
    float logprob;
};

struct sampler_result {
    int32_t token;                                        /* the pick */
    float logprob;                                        /* of the pick (see above) */
    int n_top;                                            /* entries in top[] */
    struct sampler_logprob top[SAMPLER_MAX_TOP_LOGPROBS]; /* best first */
};

struct sampler;

/* Copies params (bias entries with token outside [0, n_vocab) give
 * STRATA_E_RANGE). owned: free with sampler_free() */
struct sampler *sampler_init(const struct sampler_params *params, int n_vocab,
                             struct strata_error *err);
void sampler_free(struct sampler *s); /* NULL is a no-op */

/* Picks the next token from logits (n_vocab) f32 (borrowed, not modified).
 * Non-finite logits count as -inf; all -inf gives STRATA_E_INVALID. */
int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *out,
                   struct strata_error *err);
/* Records a token in the penalty window. */
void sampler_accept(struct sampler *s, int32_t token);
/* Forgets the window and reseeds (a new session with the same params). */
void sampler_reset(struct sampler *s, uint64_t seed);

/* Device sampling (engine/model/model.h model_forward_sample): 1 when this
 * sampler's next pick needs nothing but the logits (no logit bias, no
 * active penalty, no logprob or top_logprobs wanted) and greedy, or top_k in
 * 1..top_k_max; then *rule gets its temperature, top_k, top_p and min_p.
 * 0 otherwise: the host samples (and so for grammar / JSON-schema masks,
 * which the caller applies to the logits). */
struct sampler_rule {
    int top_k;
    float top_p, min_p, temperature;
};
int sampler_device_rule(const struct sampler *s, int top_k_max, struct sampler_rule *rule);
/* The uniform in [0, 1) sampler_sample would draw next (advancing the RNG
 * the same way), for a device draw at temperature > 0: the same seed gives
 * the same stream of draws on either path. */
double sampler_next_uniform(struct sampler *s);

/* ---- stop sequences --------------------------------------------------------
 * Matches stop strings on the generated text across token boundaries. Text
 * is released as soon as it can no longer be the start of a stop string; a
 * suffix that is a prefix of some stop string is held back. On a match the
 * text before the stop is released and the stop itself is not. Stop strings
 * are valid UTF-8 and input text is whole code points, so a held-back suffix
 * always starts on a code point boundary: released text never splits one. */
struct stop_matcher;

/* stops: borrowed for the call (copied); empty strings are ignored; more than
 * SAMPLER_MAX_STOPS or one longer than SAMPLER_MAX_STOP_LEN gives
 * STRATA_E_RANGE. owned: free with stop_matcher_free() */
struct stop_matcher *stop_matcher_init(const char *const *stops, int n_stops,
                                       struct strata_error *err);
void stop_matcher_free(struct stop_matcher *m); /* NULL is a no-op */
/* Appends text; returns the text now safe to emit (borrowed: valid until the
 * next call on m), its length in *out_len, and *hit = true when a stop string
 * completed (then the returned text ends right before it and the session
 * should finish). After a hit further feeds return nothing. NULL + *out_len 0
 * only on out of memory. */
const char *stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, size_t *out_len,
                              bool *hit);
/* No more text: returns everything held back (not after a hit). */
const char *stop_matcher_flush(struct stop_matcher *m, size_t *out_len);
/* Bytes currently held back. */
size_t stop_matcher_pending(const struct stop_matcher *m);

#endif
