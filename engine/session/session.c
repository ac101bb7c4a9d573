/* engine/session/session.c: one generation: sampling and the per-token step
 * (see session.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "engine/session/session-impl.h"

struct session_params session_params_default(void) {
    return (struct session_params){.sampler = sampler_params_default()};
}

struct session *session_init(const struct session_base *b, const struct session_params *params,
                             struct strata_error *err) {
    if (!b || !params) {
        strata_error_set(err, STRATA_E_INVALID, "session: base and params required");
        return NULL;
    }
    struct session *s = calloc(1, sizeof *s);
    if (!s) {
        strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
        return NULL;
    }
    s->b = b;
    s->logprobs = params->logprobs;
    s->ignore_eos = params->ignore_eos;
    struct sampler_params sp = params->sampler;
    sp.want_logprob = params->logprobs;
    if (!params->logprobs)
        sp.n_top_logprobs = 0;
    /* Greedy without logprobs, bias or penalties needs only the argmax: on
     * llama-3.2-1b (128,256 entries) sampler_sample's log-sum-exp was 0.5 ms
     * a row, 2.7 ms of a ~75 ms step at 5 streams (bench/load.mjs CLIENTS=8
     * REQS=2, strata_sched_seconds_total{phase="sample"} per step, 2-vCPU
     * EPYC VM). */
    s->greedy_only = sp.temperature <= 0.0f && !params->logprobs && sp.n_bias == 0 &&
                     sp.repeat_penalty == 1.0f && sp.presence_penalty == 0.0f &&
                     sp.frequency_penalty == 0.0f;
    if (!(s->smp = sampler_init(&sp, b->n_vocab, err)))
        goto fail;
    if (!(s->stop = stop_matcher_init(params->stops, params->n_stops, err)))
        goto fail;
    struct tokenizer_decode_opts dopts = tokenizer_decode_opts_default();
    dopts.strip_leading_space = params->strip_leading_space;
    dopts.skip_special = !params->keep_special;
    if (!(s->detok = tokenizer_stream_init(b->tok, &dopts, err)))
        goto fail;
    if (params->grammar && session_grammar_init(s, params->grammar, err) < 0)
        goto fail;
    return s;
fail:
    session_free(s);
    return NULL;
}

void session_free(struct session *s) {
    if (!s)
        return;
    session_grammar_free(s);
    free(s->buf);
    tokenizer_stream_free(s->detok);
    stop_matcher_free(s->stop);
    sampler_free(s->smp);
    free(s);
}

int64_t session_n_gen(const struct session *s) {
    return s->n_gen;
}

/* The same pick as sampler_sample at temperature <= 0: non-finite logits
 * count as -inf, the lowest id wins ties, all -inf is an error. */
static int greedy_pick(const float *logits, int n, struct sampler_result *r,
                       struct strata_error *err) {
    int32_t best = -1;
    float max = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (logits[i] > max && isfinite(logits[i])) {
            max = logits[i];
            best = i;
        }
    }
    if (best < 0)
        return strata_error_set(err, STRATA_E_INVALID, "sampler: every logit is -inf or NaN");
    *r = (struct sampler_result){.token = best};
    return 0;
}

int session_sample(struct session *s, const float *logits, struct sampler_result *out,
                   struct strata_error *err) {
    if (s->gm)
        return session_grammar_sample(s, logits, out, err);
    return s->greedy_only ? greedy_pick(logits, s->b->n_vocab, out, err)
                          : sampler_sample(s->smp, logits, out, err);
}

int session_device_rule(const struct session *s, int top_k_max, struct sampler_rule *rule) {
    if (s->gm)
        return 0; /* the grammar's mask is applied to the logits on the host */
    return sampler_device_rule(s->smp, top_k_max, rule);
}

float session_next_uniform(struct session *s) {
    return (float)sampler_next_uniform(s->smp);
}

/* A token's bytes as the model spells them (special tokens included). */
static void piece_of(const struct tokenizer *tok, int32_t id, float logprob,
                     struct session_piece *p) {
    int n = tokenizer_token_to_piece(tok, id, true, p->bytes, sizeof p->bytes);
    p->token = id;
    p->logprob = logprob;
    p->n_bytes = (uint16_t)(n < 0 ? 0 : n > SESSION_PIECE_MAX ? SESSION_PIECE_MAX : n);
}

static void fill_logprob(struct session *s, const struct sampler_result *r) {
    struct session_logprob *lp = &s->lp;
    piece_of(s->b->tok, r->token, r->logprob, &lp->pick);
    lp->n_top = r->n_top < SAMPLER_MAX_TOP_LOGPROBS ? r->n_top : SAMPLER_MAX_TOP_LOGPROBS;
    for (int i = 0; i < lp->n_top; i++)
        piece_of(s->b->tok, r->top[i].token, r->top[i].logprob, &lp->top[i]);
    lp->text_offset = s->text_total;
}

/* The end of the text: what the detokenizer holds (an incomplete character
 * -> U+FFFD) through the stop matcher, then what the matcher holds back. */
static void flush_into(struct session *s, struct session_delta *d) {
    s->buf_len = 0;
    size_t n = 0, m = 0;
    const char *t = tokenizer_stream_flush(s->detok, &n);
    bool hit = false;
    if (n) {
        const char *o = stop_matcher_feed(s->stop, t, n, &m, &hit);
        if (o && m && strata_append(&s->buf, &s->buf_len, &s->buf_cap, o, m) < 0)
            s->buf_len = 0; /* out of memory: the text is lost, never the process */
    }
    if (!hit) {
        const char *o = stop_matcher_flush(s->stop, &m);
        if (o && m && strata_append(&s->buf, &s->buf_len, &s->buf_cap, o, m) < 0)
            s->buf_len = 0;
    }
    d->text = s->buf_len ? s->buf : "";
    d->len = s->buf_len;
    d->stop = hit ? SESSION_STOP_SEQUENCE : SESSION_STOP_NONE;
    s->stopped = true;
}

/* The grammar's sentence is complete and nothing may follow: an EOG stop
 * with this step's text and whatever the stop matcher still held back. */
static int grammar_end(struct session *s, struct session_delta *d, const char *text, size_t len) {
    char *t = len ? malloc(len) : NULL;
    if (len && !t)
        return STRATA_E_NOMEM;
    if (len)
        memcpy(t, text, len);
    flush_into(s, d); /* the text before any held-back rest */
    size_t rest = d->len;
    if (len && strata_append(&s->buf, &s->buf_len, &s->buf_cap, t, len) == 0) {
        /* order: this step's text, then the flushed rest */
        memmove(s->buf + len, s->buf, rest);
        memcpy(s->buf, t, len);
        d->text = s->buf;
        d->len = s->buf_len;
    }
    free(t);
    d->stop = SESSION_STOP_EOG;
    return 0;
}

int session_step(struct session *s, const struct sampler_result *r, struct session_delta *d,
                 struct strata_error *err) {
    *d = (struct session_delta){.text = "", .len = 0, .stop = SESSION_STOP_NONE, .logprob = NULL};
    if (s->stopped)
        return 0;
    /* a token the mask did not allow (a caller that did not use session_sample) */
    if (s->gm && grammar_matcher_accept(s->gm, r->token, err) < 0)
        return err && err->code ? err->code : STRATA_E_INVALID;
    bool gram_end = s->gm && grammar_matcher_must_end(s->gm);
    sampler_accept(s->smp, r->token);
    s->n_gen++;
    if ((!s->ignore_eos || s->gm) && tokenizer_is_eog(s->b->tok, r->token)) {
        flush_into(s, d);
        d->stop = SESSION_STOP_EOG;
        return 0;
    }
    /* NULL: a token the vocabulary does not spell (embedding rows past the
     * vocabulary): no text, as llama.cpp's token_to_piece gives none */
    size_t n = 0;
    const char *piece = tokenizer_stream_feed(s->detok, r->token, &n);
    if (s->logprobs) {
        fill_logprob(s, r);
        d->logprob = &s->lp;
    }
    s->text_total += n;
    if (!piece)
        return gram_end ? grammar_end(s, d, "", 0) : 0;
    bool hit = false;
    size_t m = 0;
    const char *out = stop_matcher_feed(s->stop, piece, n, &m, &hit);
    if (!out && !hit)
        return strata_error_set(err, STRATA_E_NOMEM, "session: out of memory for the text");
    d->text = out && m ? out : "";
    d->len = out ? m : 0;
    if (hit) {
        d->stop = SESSION_STOP_SEQUENCE;
        s->stopped = true;
    }
    if (gram_end && !hit)
        return grammar_end(s, d, d->text, d->len);
    return 0;
}

void session_flush(struct session *s, struct session_delta *d) {
    *d = (struct session_delta){.text = "", .len = 0, .stop = SESSION_STOP_NONE, .logprob = NULL};
    if (!s->stopped)
        flush_into(s, d);
}
