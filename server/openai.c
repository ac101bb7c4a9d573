/* server/openai.c: OpenAI request validation (see openai.h). The response
 * and chunk builders live in openai-json.c. */
#include "server/openai.h"
#include "server/openai-check.h"
#include "server/openai-ext.h"

#include "server/openai-tools.h"
#include "engine/grammar/grammar.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "%.*s" arguments for user text cut to at most n bytes at a character
 * boundary ("%.40s" could split a UTF-8 character, and a message that is
 * not UTF-8 cannot become the JSON error body). */
#define CUT(s, n) strata_utf8_cut((s), (n)), (s)

/* Reads an optional number in [lo, hi] into *out. 1 read, 0 absent, <0 error. */
static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};

static int check_messages(struct openai_vctx *v, json_t *msgs) {
    char p[96];
    if (!json_is_array(msgs))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "messages",
                           "'messages' must be an array");
    if (json_array_size(msgs) == 0)
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "messages",
                           "'messages' must contain at least one message");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        snprintf(p, sizeof(p), "messages[%zu]", i);
        if (!json_is_object(m))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p,
                               "%s must be an object", p);
        snprintf(p, sizeof(p), "messages[%zu].role", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p, "%s must be a string",
                               p);
        bool known = false;
        for (size_t r = 0; r < sizeof(roles) / sizeof(roles[0]); r++)
            known |= strcmp(json_string_value(role), roles[r]) == 0;
        if (!known)
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p,
                               "%s '%.*s' is not one of system, developer, user, assistant, tool",
                               p, CUT(json_string_value(role), 40));
        bool assistant = strcmp(json_string_value(role), "assistant") == 0;
        int trc = openai_check_tool_fields(m, i, v->param, v->cap, v->err);
        if (trc < 0)
            return trc;
        snprintf(p, sizeof(p), "messages[%zu].content", i);
        json_t *c = openai_field(m, "content");
        if (!c) {
            if (assistant)
                continue; /* OpenAI allows a content-less assistant message */
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p, "%s is required", p);
        }
        if (json_is_string(c))
            continue;
        if (!json_is_array(c))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p,
                               "%s must be a string or an array of content parts", p);
        size_t j;
        json_t *part;
        json_array_foreach(c, j, part) {
            snprintf(p, sizeof(p), "messages[%zu].content[%zu].type", i, j);
            json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
            if (!json_is_string(type))
                return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p,
                                   "%s must be a string", p);
            if (strcmp(json_string_value(type), "text") != 0)
                return openai_fail(v->err, v->param, v->cap, STRATA_E_UNSUPPORTED, p,
                                   "content part type '%.*s' is not supported (text only)",
                                   CUT(json_string_value(type), 40));
            if (!json_is_string(json_object_get(part, "text"))) {
                snprintf(p, sizeof(p), "messages[%zu].content[%zu].text", i, j);
                return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, p,
                                   "%s must be a string", p);
            }
        }
    }
    return 0;
}

static int parse_stop(struct openai_vctx *v, struct openai_request *rq) {
    json_t *s = openai_field(v->body, "stop");
    if (!s)
        return 0;
    if (json_is_string(s)) {
        /* the same limit as each string of the array form, with the same param
         * (it was found only by the stop matcher, after "param" was cleared) */
        if (json_string_length(s) > SAMPLER_MAX_STOP_LEN)
            return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, "stop",
                               "stop sequence longer than %d bytes", SAMPLER_MAX_STOP_LEN);
        rq->stops[0] = strdup(json_string_value(s));
        rq->n_stops = 1;
        return rq->stops[0] ? 0 : strata_error_set(v->err, STRATA_E_NOMEM, "out of memory");
    }
    if (!json_is_array(s))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "stop",
                           "'stop' must be a string or an array of strings");
    if (json_array_size(s) > OPENAI_MAX_STOPS)
        return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, "stop",
                           "'stop' has %zu sequences; at most %d", json_array_size(s),
                           OPENAI_MAX_STOPS);
    size_t i;
    json_t *x;
    json_array_foreach(s, i, x) {
        if (!json_is_string(x))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "stop",
                               "'stop' must be a string or an array of strings");
        if (json_string_length(x) > SAMPLER_MAX_STOP_LEN)
            return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, "stop",
                               "stop sequence longer than %d bytes", SAMPLER_MAX_STOP_LEN);
        rq->stops[rq->n_stops] = strdup(json_string_value(x));
        if (!rq->stops[rq->n_stops])
            return strata_error_set(v->err, STRATA_E_NOMEM, "out of memory");
        rq->n_stops++;
    }
    return 0;
}

static int parse_bias(struct openai_vctx *v, struct openai_request *rq, int n_vocab) {
    json_t *b = openai_field(v->body, "logit_bias");
    if (!b)
        return 0;
    if (!json_is_object(b))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "logit_bias",
                           "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(b);
    if (n > (size_t)n_vocab)
        return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, "logit_bias",
                           "'logit_bias' has more entries than the vocabulary");
    rq->bias = calloc(n + 1, sizeof(*rq->bias));
    if (!rq->bias)
        return strata_error_set(v->err, STRATA_E_NOMEM, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(b, key, val) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id >= n_vocab)
            return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, "logit_bias",
                               "logit_bias key '%.*s' is not a token id in 0..%d", CUT(key, 40),
                               n_vocab - 1);
        if (!json_is_number(val))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "logit_bias",
                               "logit_bias values must be numbers");
        double d = json_number_value(val);
        if (!(d >= -100.0 && d <= 100.0))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, "logit_bias",
                               "logit_bias value %g outside -100..100", d);
        rq->bias[rq->sp.n_bias++] = (struct sampler_bias){(int32_t)id, (float)d};
    }
    rq->sp.bias = rq->bias;
    return 0;
}

/* Fields strata does not implement: refuse rather than ignore. */
static int check_unsupported(struct openai_vctx *v, enum gen_route route) {
    static const char *const never[] = {"functions", "function_call", "audio",      "prediction",
                                        "suffix",    "tools",         "tool_choice"};
    /* tools and tool_choice are chat fields (openai-tools.c) */
    const size_t n_never = sizeof(never) / sizeof(never[0]) - (route == GEN_ROUTE_CHAT ? 2 : 0);
    for (size_t i = 0; i < n_never; i++) {
        json_t *x = openai_field(v->body, never[i]);
        if (x && !(json_is_array(x) && json_array_size(x) == 0) &&
            !(json_is_string(x) && strcmp(json_string_value(x), "none") == 0))
            return openai_fail(v->err, v->param, v->cap, STRATA_E_UNSUPPORTED, never[i],
                               "'%s' is not supported by this server", never[i]);
    }
    return 0; /* n, best_of and echo: openai-ext.c */
}

static int parse_sampling(struct openai_vctx *v, struct openai_request *rq) {
    double d;
    int64_t i;
    int rc;
    struct sampler_params *sp = &rq->sp;
    if ((rc = openai_get_num(v, "temperature", 0, 2, &d)) < 0)
        return rc;
    if (rc)
        sp->temperature = (float)d;
    if ((rc = openai_get_num(v, "top_p", 0, 1, &d)) < 0)
        return rc;
    if (rc)
        sp->top_p = (float)d;
    if ((rc = openai_get_int(v, "top_k", 0, INT32_MAX, &i)) < 0)
        return rc;
    if (rc)
        sp->top_k = (int)i;
    if ((rc = openai_get_num(v, "min_p", 0, 1, &d)) < 0)
        return rc;
    if (rc)
        sp->min_p = (float)d;
    if ((rc = openai_get_num(v, "presence_penalty", -2, 2, &d)) < 0)
        return rc;
    if (rc)
        sp->presence_penalty = (float)d;
    if ((rc = openai_get_num(v, "frequency_penalty", -2, 2, &d)) < 0)
        return rc;
    if (rc)
        sp->frequency_penalty = (float)d;
    if ((rc = openai_get_num(v, "repetition_penalty", 0.01, 10, &d)) < 0)
        return rc;
    if (rc)
        sp->repeat_penalty = (float)d;
    if ((rc = openai_get_int(v, "seed", INT64_MIN, INT64_MAX, &i)) < 0)
        return rc;
    if (rc) {
        sp->seed = (uint64_t)i;
        rq->has_seed = true;
    }
    return 0;
}

static int parse_logprobs(struct openai_vctx *v, struct openai_request *rq) {
    int rc;
    int64_t i;
    if (rq->route == GEN_ROUTE_COMPLETION) {
        /* legacy completions: "logprobs": integer 0..5 = number of alternatives */
        if ((rc = openai_get_int(v, "logprobs", 0, 5, &i)) < 0)
            return rc;
        if (rc) {
            rq->logprobs = true;
            rq->top_logprobs = (int)i;
        }
        return 0;
    }
    if ((rc = openai_get_bool(v, "logprobs", &rq->logprobs)) < 0)
        return rc;
    if ((rc = openai_get_int(v, "top_logprobs", 0, 20, &i)) < 0)
        return rc;
    if (rc) {
        if (!rq->logprobs)
            return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, "top_logprobs",
                               "'top_logprobs' requires 'logprobs': true");
        rq->top_logprobs = (int)i;
    }
    return 0;
}

int openai_parse(const struct gen_submit *req, const char *model_id, int n_vocab,
                 struct openai_request *out, char *param, size_t param_cap,
                 struct strata_error *err) {
    memset(out, 0, sizeof(*out));
    if (param && param_cap)
        param[0] = '\0';
    out->route = req->route;
    out->sp = sampler_params_default();
    out->max_tokens = -1;
    struct openai_vctx v = {req->body, param, param_cap, err};
    int rc = 0;
    if (!json_is_object(req->body)) {
        rc = openai_fail(err, param, param_cap, STRATA_E_INVALID, "",
                         "the body must be a JSON object");
        goto fail;
    }
    json_t *model = openai_field(req->body, "model");
    if (!json_is_string(model)) {
        rc = openai_fail(err, param, param_cap, STRATA_E_INVALID, "model",
                         "'model' is required and must be a string");
        goto fail;
    }
    if (strcmp(json_string_value(model), model_id) != 0) {
        rc = openai_fail(err, param, param_cap, STRATA_E_NOT_FOUND, "model",
                         "The model '%.*s' does not exist; this server serves '%s'",
                         CUT(json_string_value(model), 100), model_id);
        goto fail;
    }
    if ((rc = openai_get_bool(&v, "stream", &out->stream)) < 0)
        goto fail;
    json_t *so = openai_field(req->body, "stream_options");
    if (so) {
        json_t *iu = json_object_get(so, "include_usage");
        if (!json_is_object(so) || (iu && !json_is_null(iu) && !json_is_boolean(iu))) {
            rc = openai_fail(err, param, param_cap, STRATA_E_INVALID, "stream_options",
                             "'stream_options' must be an object with a boolean 'include_usage'");
            goto fail;
        }
        out->stream_usage = json_is_true(iu);
    }
    out->stream_usage = out->stream && (out->stream_usage || req->always_usage);
    if ((rc = check_unsupported(&v, req->route)) < 0)
        goto fail;
    if ((rc = openai_parse_format(req->body, req->route, &out->grammar, param, param_cap, err)) < 0)
        goto fail;
    if (req->route == GEN_ROUTE_CHAT) {
        json_t *msgs = json_object_get(req->body, "messages");
        if (!msgs) {
            rc = openai_fail(err, param, param_cap, STRATA_E_INVALID, "messages",
                             "'messages' is required");
            goto fail;
        }
        if ((rc = check_messages(&v, msgs)) < 0)
            goto fail;
        if ((rc = openai_chat_ext_parse(req->body, msgs, &out->ext, param, param_cap, err)) < 0)
            goto fail;
        if (!(out->messages = openai_chat_messages(msgs))) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
            goto fail;
        }
    } else if ((rc = openai_ext_prompt(req->body, n_vocab, out, param, param_cap, err)) < 0) {
        goto fail;
    }
    int64_t mt;
    if ((rc = openai_get_int(&v, "max_tokens", 1, INT32_MAX, &mt)) < 0)
        goto fail;
    if (rc)
        out->max_tokens = mt;
    if ((rc = openai_get_int(&v, "max_completion_tokens", 1, INT32_MAX, &mt)) < 0)
        goto fail;
    if (rc)
        out->max_tokens = mt;
    if ((rc = parse_sampling(&v, out)) < 0 || (rc = parse_logprobs(&v, out)) < 0 ||
        (rc = parse_stop(&v, out)) < 0 || (rc = parse_bias(&v, out, n_vocab)) < 0)
        goto fail;
    json_t *user = openai_field(req->body, "user");
    if (user && !json_is_string(user)) {
        rc =
            openai_fail(err, param, param_cap, STRATA_E_INVALID, "user", "'user' must be a string");
        goto fail;
    }
    out->sp.n_top_logprobs = out->logprobs ? out->top_logprobs : 0;
    out->sp.want_logprob = out->logprobs;
    if ((rc = openai_ext_parse(req->body, n_vocab, out, param, param_cap, err)) < 0)
        goto fail;
    return 0;
fail:
    openai_request_free(out);
    return rc < 0 ? rc : STRATA_E_INVALID;
}

void openai_request_free(struct openai_request *rq) {
    if (!rq)
        return;
    json_decref(rq->messages);
    if (!rq->borrows_shared) {
        openai_chat_ext_free(rq->ext);
        grammar_free(rq->grammar);
    }
    free(rq->prompt);
    free(rq->bias);
    for (int i = 0; i < rq->n_stops; i++)
        free(rq->stops[i]);
    openai_ext_free(rq);
    memset(rq, 0, sizeof(*rq));
}

void openai_model_id(const char *path, char *buf, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
        n -= 5;
    snprintf(buf, cap, "%.*s", (int)n, base);
}
