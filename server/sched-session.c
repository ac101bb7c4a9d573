/* server/sched-session.c: one generation session: prompt tokens, sampling,
 * stop handling, detokenizing, and the events it sends (see sched.h). Runs
 * on the scheduler thread only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/template.h"
#include "server/sched-impl.h"

void session_emit(struct gen_job *j, const struct gen_event *ev) {
    j->sink.on_event(j->sink.ctx, ev);
}

void session_error(struct gen_job *j, int code, const char *msg, const char *param) {
    struct gen_event ev = {.type = GEN_EV_ERROR,
                           .error_code = code,
                           .error_message = msg,
                           .error_param = param && *param ? param : NULL};
    session_emit(j, &ev);
}

void session_clear(struct gen_job *j) {
    sampler_free(j->smp);
    stop_matcher_free(j->stop);
    tokenizer_stream_free(j->detok);
    openai_logprobs_free(j->lp);
    free(j->prompt);
    free(j->text);
    j->smp = NULL;
    j->stop = NULL;
    j->detok = NULL;
    j->lp = NULL;
    j->prompt = NULL;
    j->text = NULL;
    j->text_len = j->text_cap = 0;
    openai_request_free(&j->rq);
}

/* Renders the chat template and tokenizes it with the message text untrusted. */
static int chat_tokens(const struct sched *s, struct gen_job *j, struct tokenizer_ids *ids,
                       struct strata_error *err) {
    struct template_inputs in = template_inputs_default();
    in.messages = j->rq.messages;
    in.add_generation_prompt = true;
    in.bos_token = s->bos_text;
    in.eos_token = s->eos_text;
    struct template_output out = {0};
    int rc = template_render(s->tmpl, &in, NULL, &out, err);
    if (rc == 0) {
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        eo.parse_special = true;
        eo.untrusted = (const struct tokenizer_range *)out.untrusted;
        eo.n_untrusted = out.n_untrusted;
        rc = tokenizer_encode(s->tok, out.text, out.len, &eo, ids, err);
    }
    template_output_free(&out);
    return rc;
}

void session_tokenize(const struct sched *s, struct gen_job *j) {
    struct tokenizer_ids ids = {0};
    struct strata_error *err = &j->tok_err;
    int rc;
    if (j->rq.route == GEN_ROUTE_CHAT) {
        rc = chat_tokens(s, j, &ids, err);
    } else {
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        rc = tokenizer_encode(s->tok, j->rq.prompt, j->rq.prompt_len, &eo, &ids, err);
    }
    if (rc < 0)
        goto fail;
    /* a template that writes bos_token itself plus add_bos: keep one BOS (llama.cpp warns) */
    int32_t bos = tokenizer_bos(s->tok);
    if (ids.n >= 2 && bos != TOKENIZER_NULL && ids.ids[0] == bos && ids.ids[1] == bos) {
        memmove(ids.ids, ids.ids + 1, (ids.n - 1) * sizeof(int32_t));
        ids.n--;
    }
    if (ids.n == 0) {
        rc = strata_error_set(err, STRATA_E_INVALID, "the prompt is empty (no tokens)");
        goto fail;
    }
    if (ids.n >= (size_t)s->n_ctx) {
        rc = strata_error_set(err, STRATA_E_CONTEXT_LENGTH,
                              "This model's maximum context length is %d tokens. However, your "
                              "messages resulted in %zu tokens.",
                              s->n_ctx, ids.n);
        goto fail;
    }
    j->prompt = ids.ids;
    j->n_prompt = (int)ids.n;
    j->tok_rc = 0;
    return;
fail:
    tokenizer_ids_free(&ids);
    j->tok_rc = rc < 0 ? rc : STRATA_E_INTERNAL;
}

int session_prepare(struct sched *s, struct gen_job *j, struct strata_error *err, char *param,
                    size_t param_cap) {
    const char *pname = j->rq.route == GEN_ROUTE_CHAT ? "messages" : "prompt";
    snprintf(param, param_cap, "%s", pname);
    int rc;
    if (!j->tokenized) /* cannot happen: sched_prep_stop sets stop first */
        return strata_error_set(err, STRATA_E_CANCELLED, "server shutting down");
    if (j->tok_rc < 0) {
        if (err)
            *err = j->tok_err;
        return j->tok_rc;
    }
    int64_t room = s->n_ctx - j->n_prompt;
    j->max_tokens = j->rq.max_tokens < 0 || j->rq.max_tokens > room ? room : j->rq.max_tokens;
    /* room for the generated tokens too: prompt[pos] is the KV history */
    int32_t *hist =
        realloc(j->prompt, ((size_t)j->n_prompt + (size_t)j->max_tokens + 1) * sizeof(*hist));
    if (!hist) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto fail;
    }
    j->prompt = hist;
    if (!j->rq.has_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        j->rq.sp.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                        (atomic_fetch_add(&s->id_counter, 1) * 0x9e3779b97f4a7c15ull);
    }
    snprintf(param, param_cap, "%s", "");
    j->smp = sampler_init(&j->rq.sp, s->n_vocab, err);
    if (!j->smp) {
        snprintf(param, param_cap, "%s", "logit_bias");
        rc = err ? err->code : STRATA_E_INVALID;
        goto fail;
    }
    j->stop = stop_matcher_init((const char *const *)j->rq.stops, j->rq.n_stops, err);
    /* generated text continues the prompt: keep the first token's leading space */
    struct tokenizer_decode_opts dopts = tokenizer_decode_opts_default();
    dopts.strip_leading_space = false;
    j->detok = j->stop ? tokenizer_stream_init(s->tok, &dopts, err) : NULL;
    if (!j->stop || !j->detok) {
        rc = err && err->code ? err->code : STRATA_E_NOMEM;
        goto fail;
    }
    if (j->rq.logprobs && !(j->lp = openai_logprobs_init(j->rq.route))) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto fail;
    }
    if (j->rq.stream) {
        char *js = j->rq.route == GEN_ROUTE_CHAT ? openai_chunk_role(&j->oc) : NULL;
        if (j->rq.route == GEN_ROUTE_CHAT && !js) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
            goto fail;
        }
        if (js) {
            struct gen_event ev = {.type = GEN_EV_ROLE, .json = js, .json_len = strlen(js)};
            session_emit(j, &ev);
            free(js);
        }
    }
    return 0;
fail:
    return rc < 0 ? rc : STRATA_E_INTERNAL;
}

/* Text released by the stop matcher: a DELTA chunk (stream) or appended. */
static void emit_text(struct gen_job *j, const char *text, size_t len, bool force) {
    if (!j->rq.stream) {
        if (len && j->text_len + len + 1 > j->text_cap) {
            size_t cap = j->text_cap ? j->text_cap * 2 : 256;
            while (cap < j->text_len + len + 1)
                cap *= 2;
            char *p = realloc(j->text, cap);
            if (!p)
                return; /* the response loses text rather than the server crashing */
            j->text = p;
            j->text_cap = cap;
        }
        if (len) {
            memcpy(j->text + j->text_len, text, len);
            j->text_len += len;
            j->text[j->text_len] = '\0';
        }
        if (j->n_unsent) {
            struct gen_event ev = {.type = GEN_EV_DELTA, .n_tokens = j->n_unsent};
            session_emit(j, &ev);
            j->n_unsent = 0;
        }
        return;
    }
    if (len == 0 && !(force && !openai_logprobs_empty(j->lp)))
        return;
    char *js = openai_chunk_delta(&j->oc, text, len, j->lp);
    if (j->lp)
        openai_logprobs_clear(j->lp);
    if (!js)
        return;
    struct gen_event ev = {.type = GEN_EV_DELTA,
                           .json = js,
                           .json_len = strlen(js),
                           .n_tokens = j->n_unsent > 0 ? j->n_unsent : 1};
    session_emit(j, &ev);
    j->n_unsent = 0;
    free(js);
}

static void finish(struct sched *s, struct gen_job *j, const char *reason) {
    size_t n = 0;
    const char *t = tokenizer_stream_flush(j->detok, &n);
    bool hit = false;
    if (n) {
        t = stop_matcher_feed(j->stop, t, n, &n, &hit);
        if (t && n)
            emit_text(j, t, n, false);
        if (hit)
            reason = "stop";
    }
    if (!hit) {
        t = stop_matcher_flush(j->stop, &n);
        emit_text(j, t, n, true);
    } else {
        emit_text(j, "", 0, true);
    }
    struct openai_usage u = {j->n_prompt, j->n_gen, j->n_cached};
    char *js = j->rq.stream ? openai_chunk_finish(&j->oc, reason) : NULL;
    struct gen_event ev = {.type = GEN_EV_FINISH,
                           .json = js,
                           .json_len = js ? strlen(js) : 0,
                           .finish_reason = reason};
    session_emit(j, &ev);
    free(js);
    js = j->rq.stream_usage ? openai_chunk_usage(&j->oc, &u) : NULL;
    ev = (struct gen_event){.type = GEN_EV_USAGE,
                            .json = js,
                            .json_len = js ? strlen(js) : 0,
                            .n_prompt_tokens = u.prompt_tokens,
                            .n_completion_tokens = u.completion_tokens,
                            .n_cached_tokens = u.cached_tokens};
    session_emit(j, &ev);
    free(js);
    (void)s;
}

/* Body of a non-stream response, built at the end (DONE carries it). */
char *session_response(struct gen_job *j, const char *reason) {
    struct openai_usage u = {j->n_prompt, j->n_gen, j->n_cached};
    return openai_response(&j->oc, j->text ? j->text : "", j->text_len, reason, j->lp, &u);
}

/* Greedy without logprobs, bias or penalties needs only the argmax, and
 * sampler_sample also computes the log-sum-exp of the whole row for
 * logprobs (an exp() per vocabulary entry): on llama-3.2-1b (128,256
 * entries) that was 0.5 ms a row, 2.7 ms of a ~75 ms step at 5 streams
 * (bench/load.mjs CLIENTS=8 REQS=2, strata_sched_seconds_total{phase="sample"}
 * per step, 2-vCPU EPYC VM). Same pick as sampler_sample: non-finite logits
 * count as -inf, the lowest id wins ties, all -inf is an error. */
static bool session_greedy_only(const struct gen_job *j) {
    const struct sampler_params *p = &j->rq.sp;
    return p->temperature <= 0.0f && !j->lp && p->n_bias == 0 && p->repeat_penalty == 1.0f &&
           p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f;
}

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

void session_sample(const struct sched *s, struct gen_job *j, const float *logits) {
    j->pick_err.code = 0;
    j->pick_rc = session_greedy_only(j) ? greedy_pick(logits, s->n_vocab, &j->pick, &j->pick_err)
                                        : sampler_sample(j->smp, logits, &j->pick, &j->pick_err);
}

bool session_on_logits(struct sched *s, struct gen_job *j) {
    if (j->pick_rc < 0) {
        session_error(j, j->pick_err.code, j->pick_err.message, NULL);
        j->finish_reason = NULL;
        return true;
    }
    const struct sampler_result r = j->pick;
    sampler_accept(j->smp, r.token);
    j->n_gen++;
    j->n_unsent++;
    j->last = r.token;
    s->tokens_generated++;
    if (j->n_gen == 1)
        j->t_first = sched_now();
    if (tokenizer_is_eog(s->tok, r.token)) {
        j->finish_reason = "stop";
        finish(s, j, j->finish_reason);
        return true;
    }
    size_t n = 0;
    const char *piece = tokenizer_stream_feed(j->detok, r.token, &n);
    if (j->lp)
        openai_logprobs_add(j->lp, s->tok, &r, j->rq.top_logprobs, j->text_total);
    j->text_total += n;
    bool hit = false;
    const char *out = piece ? stop_matcher_feed(j->stop, piece, n, &n, &hit) : NULL;
    if (hit) {
        if (out && n)
            emit_text(j, out, n, false);
        j->finish_reason = "stop";
        finish(s, j, j->finish_reason);
        return true;
    }
    if (out && n)
        emit_text(j, out, n, false);
    else if (!j->rq.stream)
        emit_text(j, "", 0, false);
    if (j->n_gen >= j->max_tokens || j->n_past + 1 >= s->n_ctx) {
        j->finish_reason = "length";
        finish(s, j, j->finish_reason);
        return true;
    }
    return false;
}
