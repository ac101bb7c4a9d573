/* server/sched-session.c: one generation job: its prompt (engine/session's
 * session_prompt), its session (sampling, detokenizing, stops, logprob
 * entries: session_step), and the events and OpenAI JSON it sends (see
 * sched.h). Runs on the scheduler thread, except job_tokenize (a prep
 * thread) and job_sample (possibly a pool worker). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/buf.h"
#include "engine/core/clock.h"
#include "server/openai-chat-out.h"
#include "server/openai-tools.h"
#include "server/sched-impl.h"

void job_emit(struct gen_job *j, const struct gen_event *ev) {
    j->sink.on_event(j->sink.ctx, ev);
}

void job_error(struct gen_job *j, int code, const char *msg, const char *param) {
    struct gen_event ev = {.type = GEN_EV_ERROR,
                           .error_code = code,
                           .error_message = msg,
                           .error_param = param && *param ? param : NULL};
    job_emit(j, &ev);
}

void job_clear(struct gen_job *j) {
    session_free(j->sess);
    openai_logprobs_free(j->lp);
    openai_chat_out_free(j->co);
    j->co = NULL;
    free(j->prompt);
    free(j->text);
    free(j->echo);
    j->echo = NULL;
    j->sess = NULL;
    j->lp = NULL;
    j->prompt = NULL;
    j->text = NULL;
    j->text_len = j->text_cap = 0;
    openai_request_free(&j->rq);
    sched_aux_clear(j);
}

void job_tokenize(const struct sched *s, struct gen_job *j) {
    if (j->aux) { /* embeddings, /tokenize, /detokenize */
        sched_aux_prep(s, j);
        return;
    }
    struct tokenizer_ids ids = {0};
    struct session_input in = {0};
    if (j->rq.prompt_ids) {
        /* token ids as given (llama-server does not add BOS to them either) */
        j->tok_rc = session_check_prompt(s->sb, (size_t)j->rq.n_prompt_ids, &j->tok_err);
        if (j->tok_rc < 0)
            return;
        j->prompt = malloc((size_t)j->rq.n_prompt_ids * sizeof(*j->prompt));
        if (!j->prompt) {
            j->tok_rc = strata_error_set(&j->tok_err, STRATA_E_NOMEM, "out of memory");
            return;
        }
        memcpy(j->prompt, j->rq.prompt_ids, (size_t)j->rq.n_prompt_ids * sizeof(*j->prompt));
        j->n_prompt = j->rq.n_prompt_ids;
        return;
    }
    if (j->rq.route == GEN_ROUTE_CHAT)
        openai_session_input(&j->rq, &in);
    else
        in = (struct session_input){.text = j->rq.prompt, .len = j->rq.prompt_len};
    int rc = session_prompt(s->sb, &in, &ids, &j->tok_err);
    if (rc < 0) {
        j->tok_rc = rc;
        return;
    }
    j->prompt = ids.ids;
    j->n_prompt = (int)ids.n;
    j->tok_rc = 0;
}

/* echo: the prompt's text, sent before the first generated text. A text
 * prompt is echoed as given; token ids as they decode (valid UTF-8: the
 * streaming detokenizer, special tokens dropped as in generated text). */
static int job_echo_text(const struct sched *s, struct gen_job *j, struct strata_error *err) {
    if (j->rq.prompt) {
        if (!(j->echo = malloc(j->rq.prompt_len + 1)))
            return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        memcpy(j->echo, j->rq.prompt, j->rq.prompt_len + 1);
        j->echo_len = j->rq.prompt_len;
        return 0;
    }
    struct tokenizer_decode_opts o = tokenizer_decode_opts_default();
    o.strip_leading_space = false;
    struct tokenizer_stream *ts = tokenizer_stream_init(session_base_tokenizer(s->sb), &o, err);
    if (!ts)
        return err && err->code ? err->code : STRATA_E_NOMEM;
    size_t cap = 0, n;
    int rc = 0;
    for (int i = 0; i < j->rq.n_prompt_ids && rc == 0; i++) {
        const char *t = tokenizer_stream_feed(ts, j->rq.prompt_ids[i], &n);
        if (t && n)
            rc = strata_append(&j->echo, &j->echo_len, &cap, t, n);
    }
    const char *t = tokenizer_stream_flush(ts, &n);
    if (rc == 0 && t && n)
        rc = strata_append(&j->echo, &j->echo_len, &cap, t, n);
    if (rc == 0 && !j->echo)
        rc = strata_append(&j->echo, &j->echo_len, &cap, "", 0);
    tokenizer_stream_free(ts);
    return rc < 0 ? strata_error_set(err, STRATA_E_NOMEM, "out of memory") : 0;
}

int job_prepare(struct sched *s, struct gen_job *j, struct strata_error *err, char *param,
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
    if (j->rq.echo && (rc = job_echo_text(s, j, err)) < 0)
        goto fail;
    struct session_params sp = session_params_default();
    sp.sampler = j->rq.sp;
    if (sp.sampler.penalty_last_n < 0) /* repeat_last_n -1: the whole context */
        sp.sampler.penalty_last_n = s->n_ctx < (1 << 20) ? s->n_ctx : 1 << 20;
    sp.ignore_eos = j->rq.ignore_eos;
    sp.stops = (const char *const *)j->rq.stops;
    sp.n_stops = j->rq.n_stops;
    sp.logprobs = j->rq.logprobs;
    sp.grammar = j->rq.grammar;     /* the request outlives its session (job_clear) */
    sp.strip_leading_space = false; /* generated text continues the prompt */
    /* reasoning and tool calls split out of the text (openai-chat-out.h) */
    if ((rc = openai_chat_out_init(&j->rq, s->sb, j->prompt, j->n_prompt, &j->co, err)) < 0)
        goto fail;
    sp.keep_special = openai_chat_out_keep_special(j->co);
    j->sess = session_init(s->sb, &sp, err);
    if (!j->sess) {
        /* a bias token out of range; a stop sequence too long was refused by openai_parse */
        if (err && err->code == STRATA_E_RANGE && j->rq.sp.n_bias > 0)
            snprintf(param, param_cap, "%s", "logit_bias");
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
            job_emit(j, &ev);
            free(js);
        }
    }
    return 0;
fail:
    return rc < 0 ? rc : STRATA_E_INTERNAL;
}

/* A DELTA chunk (js: owned, freed here; NULL: nothing to send) carrying the
 * tokens not yet counted. */
static void emit_chunk(struct gen_job *j, char *js) {
    if (!js)
        return;
    struct gen_event ev = {.type = GEN_EV_DELTA,
                           .json = js,
                           .json_len = strlen(js),
                           .n_tokens = j->n_unsent > 0 ? j->n_unsent : 1};
    job_emit(j, &ev);
    j->n_unsent = 0;
    free(js);
}

/* Text released by the session: a DELTA chunk (stream) or appended (the
 * non-stream body; a DELTA event without JSON still counts the tokens).
 * force: send a chunk without text when logprobs wait to go out (the last
 * chunk before FINISH). */
static void emit_text(struct gen_job *j, const char *text, size_t len, bool force) {
    if (j->echo) {
        /* echo: the prompt's text goes out with the first text of the choice */
        char *both = NULL;
        size_t n = 0, cap = 0;
        int rc = strata_append(&both, &n, &cap, j->echo, j->echo_len);
        if (rc == 0 && len)
            rc = strata_append(&both, &n, &cap, text, len);
        free(j->echo);
        j->echo = NULL;
        if (rc < 0) { /* out of memory: the choice loses its echo, not its text */
            free(both);
            emit_text(j, text, len, force);
            return;
        }
        emit_text(j, both, n, true);
        free(both);
        return;
    }
    if (j->co) { /* final: the last text (force is only set by finish) */
        if (!j->rq.stream) {
            openai_chat_out_feed(j->co, text, len, force, NULL);
            if (j->n_unsent) {
                struct gen_event ev = {.type = GEN_EV_DELTA, .n_tokens = j->n_unsent};
                job_emit(j, &ev);
                j->n_unsent = 0;
            }
            return;
        }
        char *js = openai_chat_out_chunk(j->co, &j->oc, text, len, force, j->lp);
        if (js && j->lp)
            openai_logprobs_clear(j->lp);
        emit_chunk(j, js);
        return;
    }
    if (!j->rq.stream) {
        /* out of memory: the response loses text rather than the server crashing */
        if (len)
            strata_append(&j->text, &j->text_len, &j->text_cap, text, len);
        if (j->n_unsent) {
            struct gen_event ev = {.type = GEN_EV_DELTA, .n_tokens = j->n_unsent};
            job_emit(j, &ev);
            j->n_unsent = 0;
        }
        return;
    }
    if (len == 0 && !(force && !openai_logprobs_empty(j->lp)))
        return;
    char *js = openai_chunk_delta(&j->oc, text, len, j->lp);
    if (j->lp)
        openai_logprobs_clear(j->lp);
    emit_chunk(j, js);
}

static struct openai_timings job_timings(const struct gen_job *j) {
    const double first = j->n_gen > 0 ? j->t_first : j->t_admit;
    return (struct openai_timings){
        .cache_n = j->n_cached,
        .prompt_n = j->n_prompt - j->n_cached,
        .predicted_n = j->n_gen,
        .queued_ms = (j->t_admit - j->t_submit) * 1e3,
        .prompt_ms = (first - j->t_admit) * 1e3,
        .predicted_ms = j->n_gen > 1 ? (j->t_last - j->t_first) * 1e3 : 0.0,
    };
}

/* The last text (d: the session's final delta), then FINISH and USAGE. */
static void finish(struct gen_job *j, const struct session_delta *d, const char *reason) {
    emit_text(j, d->text, d->len, true);
    reason = openai_chat_out_finish(j->co, reason);
    j->finish_reason = reason;
    struct openai_usage u = {j->n_prompt, j->n_gen, j->n_cached};
    const struct openai_timings t = job_timings(j);
    char *js = j->rq.stream ? openai_chunk_finish(&j->oc, reason, &t) : NULL;
    struct gen_event ev = {.type = GEN_EV_FINISH,
                           .json = js,
                           .json_len = js ? strlen(js) : 0,
                           .finish_reason = reason};
    job_emit(j, &ev);
    free(js);
    js = j->rq.stream_usage ? openai_chunk_usage(&j->oc, &u) : NULL;
    ev = (struct gen_event){.type = GEN_EV_USAGE,
                            .json = js,
                            .json_len = js ? strlen(js) : 0,
                            .n_prompt_tokens = u.prompt_tokens,
                            .n_completion_tokens = u.completion_tokens,
                            .n_cached_tokens = u.cached_tokens};
    job_emit(j, &ev);
    free(js);
}

/* Body of a non-stream response, built at the end (DONE carries it). */
char *job_response(struct gen_job *j, const char *reason) {
    struct openai_usage u = {j->n_prompt, j->n_gen, j->n_cached};
    const struct openai_timings t = job_timings(j);
    if (j->co)
        return openai_response_message(&j->oc, openai_chat_out_message(j->co, &j->oc), reason,
                                       j->lp, &u, &t);
    return openai_response(&j->oc, j->text ? j->text : "", j->text_len, reason, j->lp, &u, &t);
}

void job_sample(struct gen_job *j, const float *logits) {
    j->pick_err.code = 0;
    j->pick_rc = session_sample(j->sess, logits, &j->pick, &j->pick_err);
}

bool job_on_logits(struct sched *s, struct gen_job *j) {
    struct session_delta d;
    if (j->pick_rc < 0 || session_step(j->sess, &j->pick, &d, &j->pick_err) < 0) {
        job_error(j, j->pick_err.code, j->pick_err.message, NULL);
        j->finish_reason = NULL;
        return true;
    }
    j->n_gen++;
    j->n_unsent++;
    j->last = j->pick.token;
    s->tokens_generated++;
    j->t_last = strata_now();
    if (j->n_gen == 1)
        j->t_first = j->t_last;
    if (d.logprob)
        openai_logprobs_add(j->lp, d.logprob, j->rq.top_logprobs);
    if (d.stop) { /* an EOG token or a stop sequence: finish_reason "stop" */
        finish(j, &d, "stop");
        return true;
    }
    if (d.len)
        emit_text(j, d.text, d.len, false);
    else if (!j->rq.stream)
        emit_text(j, "", 0, false);
    if (j->n_gen >= j->max_tokens || j->n_past + 1 >= s->n_ctx) {
        session_flush(j->sess, &d); /* text that completes a stop here still says "stop" */
        finish(j, &d, d.stop ? "stop" : "length");
        return true;
    }
    return false;
}
