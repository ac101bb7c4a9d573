/* engine/session/session-grammar.c: the grammar hook of a session (see
 * session.h, session_params.grammar): the base's grammar vocabulary (built
 * once, on the first constrained session, under the base's lock: the base is
 * otherwise immutable, so this is the one write after init), the matcher per
 * session, and sampling through the mask. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session/session-impl.h"

static struct grammar_vocab *build_vocab(const struct session_base *b, struct strata_error *err) {
    int nv = b->n_vocab, nt = tokenizer_n_vocab(b->tok);
    char **pieces = calloc((size_t)nv, sizeof *pieces);
    uint32_t *lens = calloc((size_t)nv, sizeof *lens);
    enum grammar_token_kind *kinds = calloc((size_t)nv, sizeof *kinds);
    struct grammar_vocab *v = NULL;
    char buf[GRAMMAR_PIECE_MAX];
    if (!pieces || !lens || !kinds) {
        strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
        goto out;
    }
    for (int i = 0; i < nv; i++) {
        kinds[i] = GRAMMAR_TOKEN_NEVER; /* rows past the vocabulary spell nothing */
        if (i >= nt)
            continue;
        if (tokenizer_is_eog(b->tok, i)) {
            kinds[i] = GRAMMAR_TOKEN_EOG;
            continue;
        }
        if (tokenizer_is_special(b->tok, i) || tokenizer_is_control(b->tok, i))
            continue;
        int n = tokenizer_token_to_piece(b->tok, i, false, buf, sizeof buf);
        if (n <= 0 || n > (int)sizeof buf)
            continue;
        if (!(pieces[i] = malloc((size_t)n))) {
            strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
            goto out;
        }
        memcpy(pieces[i], buf, (size_t)n);
        lens[i] = (uint32_t)n;
        kinds[i] = GRAMMAR_TOKEN_TEXT;
    }
    struct grammar_vocab_params vp = {
        .n_vocab = nv, .pieces = (const char *const *)pieces, .lens = lens, .kinds = kinds};
    v = grammar_vocab_init(&vp, err);
out:
    if (pieces)
        for (int i = 0; i < nv; i++)
            free(pieces[i]);
    free(pieces);
    free(lens);
    free(kinds);
    return v;
}

const struct grammar_vocab *session_base_grammar_vocab(struct session_base *b,
                                                       struct strata_error *err) {
    pthread_mutex_lock(&b->gv_lock);
    if (!b->gvocab)
        b->gvocab = build_vocab(b, err);
    const struct grammar_vocab *v = b->gvocab;
    pthread_mutex_unlock(&b->gv_lock);
    return v;
}

int session_grammar_init(struct session *s, const struct grammar *g, struct strata_error *err) {
    /* the one mutation of a base after init, under its lock (see the top) */
    const struct grammar_vocab *v = session_base_grammar_vocab((struct session_base *)s->b, err);
    if (!v)
        return err && err->code ? err->code : STRATA_E_NOMEM;
    size_t n = (size_t)s->b->n_vocab;
    s->gmask = malloc(sizeof *s->gmask * ((n + 31) / 32));
    s->glogits = malloc(sizeof *s->glogits * n);
    if (!s->gmask || !s->glogits)
        return strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
    if (!(s->gm = grammar_matcher_init(g, v, err)))
        return err && err->code ? err->code : STRATA_E_NOMEM;
    return 0;
}

void session_grammar_free(struct session *s) {
    grammar_matcher_free(s->gm);
    free(s->gmask);
    free(s->glogits);
}

int session_grammar_sample(struct session *s, const float *logits, struct sampler_result *out,
                           struct strata_error *err) {
    int n = s->b->n_vocab;
    int allowed = grammar_matcher_mask(s->gm, s->gmask, err);
    if (allowed < 0)
        return allowed;
    if (allowed == 0)
        return strata_error_set(err, STRATA_E_INVALID,
                                "grammar: no token of the vocabulary can continue the output");
    const uint32_t *m = s->gmask;
    if (s->greedy_only) { /* the argmax over the allowed tokens, lowest id on ties */
        int32_t best = -1;
        float max = -INFINITY;
        for (int i = 0; i < n; i++)
            if ((m[i >> 5] >> (i & 31)) & 1u && isfinite(logits[i]) &&
                (best < 0 || logits[i] > max)) {
                max = logits[i];
                best = i;
            }
        if (best < 0) /* every allowed logit is -inf or NaN: take the first allowed */
            for (int i = 0; i < n && best < 0; i++)
                if ((m[i >> 5] >> (i & 31)) & 1u)
                    best = i;
        *out = (struct sampler_result){.token = best};
        return 0;
    }
    float *x = s->glogits;
    for (int i = 0; i < n; i++)
        x[i] = (m[i >> 5] >> (i & 31)) & 1u ? logits[i] : -INFINITY;
    return sampler_sample(s->smp, x, out, err);
}
