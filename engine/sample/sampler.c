/* engine/sample/sampler.c: token sampling (see sampler.h for the pipeline and the
 * logprob definition). */
#include "engine/sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"

struct sampler_cand {
    int32_t id;
    float logit; /* after bias and penalties; later divided by temperature */
    float p;     /* probability after softmax over the kept candidates */
};

struct sampler {
    struct sampler_params p; /* bias points into bias[] below */
    int n_vocab;
    struct sampler_bias *bias;  /* (n_bias) copy */
    float *work;                /* (n_vocab) logits after bias and penalties */
    struct sampler_cand *cands; /* (n_vocab) candidates */
    int32_t *window;            /* (penalty_last_n) ring of accepted tokens */
    int n_window;               /* tokens in the ring, <= penalty_last_n */
    int window_head;            /* next slot to write */
    uint16_t *counts;           /* (n_vocab) occurrences in the window (scratch) */
    struct strata_rng rng;      /* engine/core/rng.h */
};

struct sampler_params sampler_params_default(void) {
    return (struct sampler_params){
        .temperature = 1.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repeat_penalty = 1.0f,
        .penalty_last_n = 64,
        .seed = 0x5eed,
        .want_logprob = true,
    };
}

void sampler_reset(struct sampler *s, uint64_t seed) {
    if (!s)
        return;
    strata_rng_seed(&s->rng, seed);
    s->n_window = 0;
    s->window_head = 0;
}

struct sampler *sampler_init(const struct sampler_params *params, int n_vocab,
                             struct strata_error *err) {
    if (!params || n_vocab < 1) {
        strata_error_set(err, STRATA_E_INVALID, "sampler: no params or n_vocab < 1");
        return NULL;
    }
    if (params->n_top_logprobs < 0 || params->n_top_logprobs > SAMPLER_MAX_TOP_LOGPROBS) {
        strata_error_set(err, STRATA_E_RANGE, "sampler: n_top_logprobs %d outside 0..%d",
                         params->n_top_logprobs, SAMPLER_MAX_TOP_LOGPROBS);
        return NULL;
    }
    if (params->n_bias < 0 || (params->n_bias > 0 && !params->bias) || params->penalty_last_n < 0 ||
        params->penalty_last_n > (1 << 20)) {
        strata_error_set(err, STRATA_E_INVALID, "sampler: bad bias list or penalty window");
        return NULL;
    }
    for (int i = 0; i < params->n_bias; i++) {
        if (params->bias[i].token < 0 || params->bias[i].token >= n_vocab) {
            strata_error_set(err, STRATA_E_RANGE, "logit_bias token %d outside 0..%d",
                             (int)params->bias[i].token, n_vocab - 1);
            return NULL;
        }
    }
    struct sampler *s = calloc(1, sizeof(*s));
    if (!s)
        goto fail;
    s->p = *params;
    s->n_vocab = n_vocab;
    s->work = malloc((size_t)n_vocab * sizeof(float));
    s->cands = malloc((size_t)n_vocab * sizeof(struct sampler_cand));
    s->counts = calloc((size_t)n_vocab, sizeof(uint16_t));
    s->window = malloc((size_t)(params->penalty_last_n + 1) * sizeof(int32_t));
    s->bias = malloc((size_t)(params->n_bias + 1) * sizeof(struct sampler_bias));
    if (!s->work || !s->cands || !s->counts || !s->window || !s->bias)
        goto fail;
    if (params->n_bias > 0)
        memcpy(s->bias, params->bias, (size_t)params->n_bias * sizeof(struct sampler_bias));
    s->p.bias = s->bias;
    sampler_reset(s, params->seed);
    return s;
fail:
    sampler_free(s);
    strata_error_set(err, STRATA_E_NOMEM, "sampler: out of memory (n_vocab %d)", n_vocab);
    return NULL;
}

void sampler_free(struct sampler *s) {
    if (!s)
        return;
    free(s->bias);
    free(s->window);
    free(s->counts);
    free(s->cands);
    free(s->work);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t token) {
    if (!s || s->p.penalty_last_n == 0 || token < 0 || token >= s->n_vocab)
        return;
    s->window[s->window_head] = token;
    s->window_head = (s->window_head + 1) % s->p.penalty_last_n;
    if (s->n_window < s->p.penalty_last_n)
        s->n_window++;
}

static bool penalties_active(const struct sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static void apply_penalties(struct sampler *s) {
    if (s->n_window == 0 || !penalties_active(&s->p))
        return;
    for (int i = 0; i < s->n_window; i++)
        if (s->counts[s->window[i]] < UINT16_MAX)
            s->counts[s->window[i]]++;
    for (int i = 0; i < s->n_window; i++) {
        int32_t t = s->window[i];
        int c = s->counts[t];
        if (c == 0)
            continue; /* already penalised (duplicate in the window) */
        float *l = &s->work[t];
        if (s->p.repeat_penalty != 1.0f && s->p.repeat_penalty > 0.0f)
            *l = *l >= 0.0f ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
        *l -= (float)c * s->p.frequency_penalty + s->p.presence_penalty;
        s->counts[t] = 0;
    }
}

static int cand_cmp_desc(const void *a, const void *b) {
    float x = ((const struct sampler_cand *)a)->logit;
    float y = ((const struct sampler_cand *)b)->logit;
    if (x != y)
        return x > y ? -1 : 1;
    /* ties: lower id first, so the order (and argmax) is deterministic */
    return ((const struct sampler_cand *)a)->id - ((const struct sampler_cand *)b)->id;
}

/* Fills out->top with the n best tokens of work[] and their logprobs
 * (lse = log-sum-exp of work[]). n is small (<= 20): repeated selection over
 * a short sorted list. */
static void top_logprobs(const struct sampler *s, double lse, struct sampler_result *out) {
    int n = s->p.n_top_logprobs;
    out->n_top = 0;
    for (int32_t i = 0; i < s->n_vocab && n > 0; i++) {
        float l = s->work[i];
        if (!(l > -INFINITY))
            continue;
        int k = out->n_top;
        if (k == n && !(l > out->top[k - 1].logprob))
            continue;
        if (k < n)
            out->n_top++;
        else
            k = n - 1;
        while (k > 0 && out->top[k - 1].logprob < l) {
            out->top[k] = out->top[k - 1];
            k--;
        }
        out->top[k] = (struct sampler_logprob){i, l};
    }
    for (int k = 0; k < out->n_top; k++)
        out->top[k].logprob = (float)(out->top[k].logprob - lse);
}

int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *out,
                   struct strata_error *err) {
    if (!s || !logits || !out)
        return strata_error_set(err, STRATA_E_INVALID, "sampler_sample: NULL argument");
    int n = s->n_vocab;
    for (int i = 0; i < n; i++)
        s->work[i] = isfinite(logits[i]) ? logits[i] : -INFINITY;
    for (int i = 0; i < s->p.n_bias; i++)
        s->work[s->bias[i].token] += s->bias[i].bias;
    apply_penalties(s);

    /* argmax (lowest id on ties) and the log-sum-exp of the distribution */
    int32_t best = -1;
    float max = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (s->work[i] > max) {
            max = s->work[i];
            best = i;
        }
    }
    if (best < 0)
        return strata_error_set(err, STRATA_E_INVALID, "sampler: every logit is -inf or NaN");
    /* The log-sum-exp costs ~0.6 ms per token over a 128k vocabulary in
     * double exp (3-4% of a 1B decode step on this 2-vCPU EPYC VM, perf on
     * `strata run --temp 0`); skip it when nobody reads a logprob. */
    const bool lp = s->p.want_logprob || s->p.n_top_logprobs > 0;
    double lse = NAN;
    out->n_top = 0;
    if (lp) {
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += exp((double)s->work[i] - max);
        lse = (double)max + log(sum);
        top_logprobs(s, lse, out);
    }

    int32_t pick = best;
    if (s->p.temperature > 0.0f) {
        /* candidates: finite logits only */
        int nc = 0;
        for (int i = 0; i < n; i++)
            if (s->work[i] > -INFINITY)
                s->cands[nc++] = (struct sampler_cand){i, s->work[i], 0.0f};
        bool sorted = false;
        if (s->p.top_k > 0 && s->p.top_k < nc) {
            qsort(s->cands, (size_t)nc, sizeof(*s->cands), cand_cmp_desc);
            sorted = true;
            nc = s->p.top_k;
        }
        if (s->p.top_p < 1.0f && !sorted) {
            qsort(s->cands, (size_t)nc, sizeof(*s->cands), cand_cmp_desc);
            sorted = true;
        }
        /* softmax at temperature 1 over the kept candidates */
        double z = 0.0;
        for (int i = 0; i < nc; i++)
            z += exp((double)s->cands[i].logit - max);
        for (int i = 0; i < nc; i++)
            s->cands[i].p = (float)(exp((double)s->cands[i].logit - max) / z);
        if (s->p.top_p < 1.0f) {
            /* smallest prefix whose mass reaches top_p (at least one token) */
            double cum = 0.0;
            int keep = nc;
            for (int i = 0; i < nc; i++) {
                cum += s->cands[i].p;
                if (cum >= s->p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            nc = keep;
        }
        if (s->p.min_p > 0.0f) {
            /* the max logit is always a candidate here (top_k/top_p keep the best) */
            float p_max = (float)(1.0 / z);
            int keep = 0;
            for (int i = 0; i < nc; i++)
                if (s->cands[i].p >= s->p.min_p * p_max)
                    s->cands[keep++] = s->cands[i];
            nc = keep;
        }
        /* temperature, then draw from the renormalised kept set */
        double t = s->p.temperature;
        double zt = 0.0;
        for (int i = 0; i < nc; i++)
            zt += exp(((double)s->cands[i].logit - max) / t);
        double r = strata_rng_uniform(&s->rng) * zt;
        double acc = 0.0;
        pick = s->cands[nc - 1].id;
        for (int i = 0; i < nc; i++) {
            acc += exp(((double)s->cands[i].logit - max) / t);
            if (r < acc) {
                pick = s->cands[i].id;
                break;
            }
        }
    }
    out->token = pick;
    out->logprob = lp ? (float)((double)s->work[pick] - lse) : NAN;
    return 0;
}

int sampler_device_rule(const struct sampler *s, int top_k_max, struct sampler_rule *rule) {
    if (!s || s->p.n_bias > 0 || penalties_active(&s->p) || s->p.want_logprob ||
        s->p.n_top_logprobs > 0)
        return 0;
    if (s->p.temperature > 0.0f && (s->p.top_k < 1 || s->p.top_k > top_k_max))
        return 0;
    *rule = (struct sampler_rule){s->p.top_k, s->p.top_p, s->p.min_p, s->p.temperature};
    return 1;
}

double sampler_next_uniform(struct sampler *s) {
    return strata_rng_uniform(&s->rng);
}

/* ---- stop sequences ------------------------------------------------------ */

struct stop_matcher {
    char **stops; /* (n_stops) NUL-terminated copies, non-empty */
    size_t *lens; /* (n_stops) bytes */
    int n_stops;
    char *pend; /* held-back text, (pend_cap) bytes */
    size_t pend_len, pend_cap;
    char *out; /* text returned by the last call, (out_cap) bytes */
    size_t out_cap;
    bool hit;
};

struct stop_matcher *stop_matcher_init(const char *const *stops, int n_stops,
                                       struct strata_error *err) {
    if (n_stops < 0 || n_stops > SAMPLER_MAX_STOPS || (n_stops > 0 && !stops)) {
        strata_error_set(err, STRATA_E_RANGE, "at most %d stop sequences", SAMPLER_MAX_STOPS);
        return NULL;
    }
    struct stop_matcher *m = calloc(1, sizeof(*m));
    if (!m)
        goto nomem;
    m->stops = calloc((size_t)n_stops + 1, sizeof(char *));
    m->lens = calloc((size_t)n_stops + 1, sizeof(size_t));
    if (!m->stops || !m->lens)
        goto nomem;
    for (int i = 0; i < n_stops; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0;
        if (len == 0)
            continue;
        if (len > SAMPLER_MAX_STOP_LEN) {
            strata_error_set(err, STRATA_E_RANGE, "stop sequence longer than %d bytes",
                             SAMPLER_MAX_STOP_LEN);
            stop_matcher_free(m);
            return NULL;
        }
        m->stops[m->n_stops] = strdup(stops[i]);
        if (!m->stops[m->n_stops])
            goto nomem;
        m->lens[m->n_stops++] = len;
    }
    return m;
nomem:
    stop_matcher_free(m);
    strata_error_set(err, STRATA_E_NOMEM, "stop matcher: out of memory");
    return NULL;
}

void stop_matcher_free(struct stop_matcher *m) {
    if (!m)
        return;
    for (int i = 0; m->stops && i < m->n_stops; i++)
        free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->pend);
    free(m->out);
    free(m);
}

static bool grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *p = realloc(*buf, c);
    if (!p)
        return false;
    *buf = p;
    *cap = c;
    return true;
}

/* Moves the first n bytes of pend to out. */
static const char *release(struct stop_matcher *m, size_t n, size_t *out_len) {
    if (!grow(&m->out, &m->out_cap, n + 1)) {
        *out_len = 0;
        return NULL;
    }
    /* pend is still NULL when nothing was fed (the first token was EOS):
     * memcpy/memmove must not see NULL, even with a length of 0 */
    if (n)
        memcpy(m->out, m->pend, n);
    m->out[n] = '\0';
    if (m->pend_len > n)
        memmove(m->pend, m->pend + n, m->pend_len - n);
    m->pend_len -= n;
    *out_len = n;
    return m->out;
}

const char *stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, size_t *out_len,
                              bool *hit) {
    *out_len = 0;
    *hit = false;
    if (m->hit)
        return "";
    if (!grow(&m->pend, &m->pend_cap, m->pend_len + len + 1))
        return NULL;
    if (len)
        memcpy(m->pend + m->pend_len, text, len);
    m->pend_len += len;
    /* earliest complete stop string */
    size_t first = SIZE_MAX;
    for (int i = 0; i < m->n_stops; i++) {
        char *at = memmem(m->pend, m->pend_len, m->stops[i], m->lens[i]);
        if (at && (size_t)(at - m->pend) < first)
            first = (size_t)(at - m->pend);
    }
    if (first != SIZE_MAX) {
        m->hit = *hit = true;
        const char *r = release(m, first, out_len);
        m->pend_len = 0;
        return r;
    }
    /* longest suffix of pend that is a proper prefix of some stop string */
    size_t keep = 0;
    for (int i = 0; i < m->n_stops; i++) {
        size_t max = m->lens[i] - 1 < m->pend_len ? m->lens[i] - 1 : m->pend_len;
        for (size_t k = max; k > keep; k--) {
            if (memcmp(m->pend + m->pend_len - k, m->stops[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    return release(m, m->pend_len - keep, out_len);
}

const char *stop_matcher_flush(struct stop_matcher *m, size_t *out_len) {
    *out_len = 0;
    if (m->hit)
        return "";
    return release(m, m->pend_len, out_len);
}

size_t stop_matcher_pending(const struct stop_matcher *m) {
    return m ? m->pend_len : 0;
}
