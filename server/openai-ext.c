/* server/openai-ext.c: n, best_of, the prompt forms, echo, the llama.cpp
 * parameter names and the unknown fields (see openai-ext.h).
 *
 * The llama.cpp names (llama-server's /completion, which its OpenAI routes
 * also read) are each honoured or refused, never dropped:
 * - honoured: n_predict (= max_tokens, -1 = up to the context), top_k,
 *   min_p, seed (parsed with the OpenAI fields), repeat_penalty (=
 *   repetition_penalty), repeat_last_n (the penalty window, -1 = the
 *   context, 0 = off), cache_prompt (false: no prefix-cache reuse),
 *   ignore_eos, n_probs (= logprobs with that many alternatives).
 * - samplers strata does not have are accepted only with the value that
 *   turns them off in llama.cpp (what its web page sends by default:
 *   mirostat 0, typical_p 1, tfs_z 1, dynatemp_range 0, xtc_probability 0,
 *   dry_multiplier 0, top_n_sigma <= 0, penalize_nl false, n_keep 0), so
 *   the request means exactly what strata does; any other value is 400
 *   unsupported naming the field. Their tuning knobs (mirostat_tau,
 *   mirostat_eta, dynatemp_exponent, xtc_threshold, dry_base,
 *   dry_allowed_length, dry_penalty_last_n, dry_sequence_breakers) change
 *   nothing while the sampler is off, in llama.cpp too, so they are known
 *   fields.
 * - grammar, samplers, lora, image_data, id_slot, post_sampling_probs:
 *   400 unsupported when present (not null, not empty, not the default).
 * Any other field is unknown: ignored as OpenAI does, its name kept in
 * rq->unknown for the debug log line (sched.c's op_submit). */
#include "server/openai-ext.h"
#include "server/openai-check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *ext_memdup(const void *src, size_t n) {
    void *p = malloc(n ? n : 1);
    if (p && n)
        memcpy(p, src, n);
    return p;
}

/* ---- the prompt forms ------------------------------------------------------ */

/* ids of one prompt (an array of integers) into p; pname: its param ("prompt"
 * or "prompt[2]") */
static int read_ids(struct openai_vctx *c, json_t *a, const char *pname, int n_vocab,
                    struct openai_prompt *p) {
    size_t n = json_array_size(a);
    if (n == 0)
        return openai_fail(c->err, c->param, c->cap, STRATA_E_INVALID, pname,
                           "%s must not be empty", pname);
    if (n > (size_t)INT32_MAX / 2)
        return openai_fail(c->err, c->param, c->cap, STRATA_E_RANGE, pname, "%s is too long",
                           pname);
    p->ids = malloc(n * sizeof(*p->ids));
    if (!p->ids)
        return strata_error_set(c->err, STRATA_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        char q[48];
        snprintf(q, sizeof q, "%s[%zu]", pname, i);
        json_t *x = json_array_get(a, i);
        if (!openai_json_int(x, &id))
            return openai_fail(c->err, c->param, c->cap, STRATA_E_INVALID, q,
                               "%s must be a token id (an integer)", q);
        if (id < 0 || id >= n_vocab)
            return openai_fail(c->err, c->param, c->cap, STRATA_E_RANGE, q,
                               "%s is %lld, not a token id in 0..%d", q, (long long)id,
                               n_vocab - 1);
        p->ids[i] = (int32_t)id;
    }
    p->n_ids = (int)n;
    return 0;
}

static int read_text(struct openai_vctx *c, json_t *s, struct openai_prompt *p) {
    p->len = json_string_length(s);
    p->text = malloc(p->len + 1);
    if (!p->text)
        return strata_error_set(c->err, STRATA_E_NOMEM, "out of memory");
    memcpy(p->text, json_string_value(s), p->len + 1);
    return 0;
}

int openai_ext_prompt(json_t *body, int n_vocab, struct openai_request *rq, char *param,
                      size_t param_cap, struct strata_error *err) {
    struct openai_vctx c = {body, param, param_cap, err};
    json_t *p = openai_field(body, "prompt");
    if (!p)
        return openai_fail(err, param, param_cap, STRATA_E_INVALID, "prompt",
                           "'prompt' is required");
    const char *shape = "'prompt' must be a string, an array of strings, an array of token ids "
                        "or an array of arrays of token ids";
    size_t n = 1;
    bool ids = false; /* one prompt of token ids */
    if (json_is_array(p)) {
        n = json_array_size(p);
        if (n == 0)
            return openai_fail(err, param, param_cap, STRATA_E_INVALID, "prompt",
                               "'prompt' must not be an empty array");
        ids = json_is_number(json_array_get(p, 0));
        if (ids)
            n = 1;
        else if (n > OPENAI_MAX_PROMPTS)
            return openai_fail(err, param, param_cap, STRATA_E_RANGE, "prompt",
                               "'prompt' has %zu prompts; at most %d", n, OPENAI_MAX_PROMPTS);
    } else if (!json_is_string(p)) {
        return openai_fail(err, param, param_cap, STRATA_E_INVALID, "prompt", "%s", shape);
    }
    rq->prompts = calloc(n, sizeof(*rq->prompts));
    if (!rq->prompts)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    rq->n_prompts = (int)n;
    int rc = 0;
    if (json_is_string(p)) {
        rc = read_text(&c, p, &rq->prompts[0]);
    } else if (ids) {
        rc = read_ids(&c, p, "prompt", n_vocab, &rq->prompts[0]);
    } else {
        for (size_t i = 0; i < n && rc == 0; i++) {
            json_t *x = json_array_get(p, i);
            char q[32];
            snprintf(q, sizeof q, "prompt[%zu]", i);
            if (json_is_string(x))
                rc = read_text(&c, x, &rq->prompts[i]);
            else if (json_is_array(x))
                rc = read_ids(&c, x, q, n_vocab, &rq->prompts[i]);
            else
                rc = openai_fail(err, param, param_cap, STRATA_E_INVALID, q,
                                 "%s must be a string or an array of token ids", q);
        }
    }
    if (rc < 0)
        return rc;
    /* one prompt: the job's own, as before */
    struct openai_prompt *p0 = &rq->prompts[0];
    if (n == 1 && p0->text) {
        if (!(rq->prompt = strdup(p0->text)))
            return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        rq->prompt_len = p0->len;
    } else if (n == 1) {
        if (!(rq->prompt_ids = ext_memdup(p0->ids, (size_t)p0->n_ids * sizeof(int32_t))))
            return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        rq->n_prompt_ids = p0->n_ids;
    }
    return 0;
}

/* ---- the llama.cpp names ------------------------------------------------------ */

/* A sampler strata does not have: accepted with the value that turns it off. */
struct off_value {
    const char *name;
    enum { OFF_NUM_EQ, OFF_NUM_LE, OFF_BOOL_FALSE } kind;
    double off;
};
static const struct off_value off_values[] = {
    {"mirostat", OFF_NUM_EQ, 0},        {"typical_p", OFF_NUM_EQ, 1},
    {"tfs_z", OFF_NUM_EQ, 1},           {"dynatemp_range", OFF_NUM_EQ, 0},
    {"xtc_probability", OFF_NUM_EQ, 0}, {"dry_multiplier", OFF_NUM_EQ, 0},
    {"top_n_sigma", OFF_NUM_LE, 0},     {"penalize_nl", OFF_BOOL_FALSE, 0},
    {"n_keep", OFF_NUM_EQ, 0},
};

/* No effect while their sampler is off (llama.cpp's too): known, not used. */
static const char *const knobs[] = {
    "mirostat_tau",      "mirostat_eta",       "dynatemp_exponent",  "xtc_threshold",
    "dry_base",          "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
    "timings_per_token", "return_tokens",      "response_fields",    "n_cmpl",
    "n_indent",          "t_max_predict_ms",   "t_max_prompt_ms",    "stream_include_usage"};

/* Refused when present with anything but null / empty / false / -1. */
static const char *const refused[] = {"grammar",    "samplers", "lora",
                                      "image_data", "id_slot",  "post_sampling_probs"};

/* Fields read somewhere in the server (OpenAI's, the llama.cpp names above,
 * the ones other parts of strata answer). Unknown = none of these. */
static const char *const known[] = {"model",
                                    "messages",
                                    "prompt",
                                    "stream",
                                    "stream_options",
                                    "max_tokens",
                                    "max_completion_tokens",
                                    "temperature",
                                    "top_p",
                                    "n",
                                    "stop",
                                    "presence_penalty",
                                    "frequency_penalty",
                                    "logit_bias",
                                    "logprobs",
                                    "top_logprobs",
                                    "user",
                                    "seed",
                                    "response_format",
                                    "tools",
                                    "tool_choice",
                                    "functions",
                                    "function_call",
                                    "parallel_tool_calls",
                                    "audio",
                                    "prediction",
                                    "suffix",
                                    "best_of",
                                    "echo",
                                    "metadata",
                                    "store",
                                    "service_tier",
                                    "modalities",
                                    "reasoning_effort",
                                    "chat_template_kwargs",
                                    "web_search_options",
                                    "json_schema",
                                    "repetition_penalty",
                                    "top_k",
                                    "min_p",
                                    "n_predict",
                                    "repeat_penalty",
                                    "repeat_last_n",
                                    "cache_prompt",
                                    "ignore_eos",
                                    "n_probs"};

static bool in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}
#define IN(name, list) in_list((name), (list), sizeof(list) / sizeof((list)[0]))

static bool is_empty_value(json_t *x) {
    return !x || json_is_null(x) || json_is_false(x) ||
           (json_is_string(x) && json_string_length(x) == 0) ||
           (json_is_array(x) && json_array_size(x) == 0) ||
           (json_is_object(x) && json_object_size(x) == 0) ||
           (json_is_integer(x) && json_integer_value(x) == -1);
}

static int check_llama_off(struct openai_vctx *c) {
    for (size_t i = 0; i < sizeof(off_values) / sizeof(off_values[0]); i++) {
        const struct off_value *o = &off_values[i];
        json_t *x = openai_field(c->body, o->name);
        if (!x)
            continue;
        bool off;
        if (o->kind == OFF_BOOL_FALSE) {
            if (!json_is_boolean(x))
                return openai_fail(c->err, c->param, c->cap, STRATA_E_INVALID, o->name,
                                   "'%s' must be a boolean", o->name);
            off = json_is_false(x);
        } else {
            if (!json_is_number(x))
                return openai_fail(c->err, c->param, c->cap, STRATA_E_INVALID, o->name,
                                   "'%s' must be a number", o->name);
            double d = json_number_value(x);
            off = o->kind == OFF_NUM_EQ ? d == o->off : d <= o->off;
        }
        if (!off)
            return openai_fail(c->err, c->param, c->cap, STRATA_E_UNSUPPORTED, o->name,
                               "'%s' is not supported by this server (only its off value, %s%g, "
                               "is accepted)",
                               o->name,
                               o->kind == OFF_BOOL_FALSE ? "false; "
                               : o->kind == OFF_NUM_LE   ? "<= "
                                                         : "",
                               o->off);
    }
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        json_t *x = json_object_get(c->body, refused[i]);
        if (!is_empty_value(x))
            return openai_fail(c->err, c->param, c->cap, STRATA_E_UNSUPPORTED, refused[i],
                               "'%s' is not supported by this server", refused[i]);
    }
    return 0;
}

static int parse_llama(struct openai_vctx *c, struct openai_request *rq, int n_vocab) {
    (void)n_vocab;
    int rc;
    int64_t i;
    double d;
    if ((rc = check_llama_off(c)) < 0)
        return rc;
    /* n_predict: -1 = no limit but the context; max_tokens wins when both are given */
    if ((rc = openai_get_int(c, "n_predict", -1, INT32_MAX, &i)) < 0)
        return rc;
    if (rc && i == 0)
        return openai_fail(c->err, c->param, c->cap, STRATA_E_RANGE, "n_predict",
                           "'n_predict' is 0; it must be -1 (up to the context) or at least 1");
    if (rc && !openai_field(c->body, "max_tokens") &&
        !openai_field(c->body, "max_completion_tokens"))
        rq->max_tokens = i < 0 ? -1 : i;
    if ((rc = openai_get_num(c, "repeat_penalty", 0.01, 10, &d)) < 0)
        return rc;
    if (rc)
        rq->sp.repeat_penalty = (float)d;
    /* -1: the context (job_prepare resolves it; the sampler caps its window at 2^20) */
    if ((rc = openai_get_int(c, "repeat_last_n", -1, 1 << 20, &i)) < 0)
        return rc;
    if (rc)
        rq->sp.penalty_last_n = (int)i;
    if ((rc = openai_get_bool(c, "cache_prompt", &rq->cache_prompt)) < 0)
        return rc;
    if ((rc = openai_get_bool(c, "ignore_eos", &rq->ignore_eos)) < 0)
        return rc;
    const int max_top = SAMPLER_MAX_TOP_LOGPROBS;
    if ((rc = openai_get_int(c, "n_probs", 0, max_top, &i)) < 0)
        return rc;
    if (rc && i > 0 && !openai_field(c->body, "logprobs")) {
        rq->logprobs = true;
        rq->top_logprobs = (int)i;
        rq->sp.n_top_logprobs = (int)i;
        rq->sp.want_logprob = true;
    }
    return 0;
}

int openai_ext_parse(json_t *body, int n_vocab, struct openai_request *rq, char *param,
                     size_t param_cap, struct strata_error *err) {
    struct openai_vctx c = {body, param, param_cap, err};
    int rc;
    int64_t n = 1, best_of = 0;
    if ((rc = openai_get_int(&c, "n", 1, OPENAI_MAX_N, &n)) < 0)
        return rc;
    rq->n = (int)n;
    if (rq->n_prompts < 1)
        rq->n_prompts = 1;
    if ((int64_t)rq->n_prompts * n > OPENAI_MAX_CHOICES)
        return openai_fail(err, param, param_cap, STRATA_E_RANGE, "n",
                           "%d prompts x n %lld = %lld choices; at most %d in one request",
                           rq->n_prompts, (long long)n, (long long)rq->n_prompts * n,
                           OPENAI_MAX_CHOICES);
    if ((rc = openai_get_int(&c, "best_of", 1, OPENAI_MAX_N, &best_of)) < 0)
        return rc;
    if (rc && best_of != n)
        return openai_fail(
            err, param, param_cap, STRATA_E_UNSUPPORTED, "best_of",
            "best_of (%lld) other than n (%lld) is not supported: strata returns every "
            "choice it generates",
            (long long)best_of, (long long)n);
    if ((rc = openai_get_bool(&c, "echo", &rq->echo)) < 0)
        return rc;
    if (rq->echo && rq->route == GEN_ROUTE_CHAT)
        return openai_fail(err, param, param_cap, STRATA_E_UNSUPPORTED, "echo",
                           "'echo' is a /v1/completions field");
    rq->cache_prompt = true;
    if ((rc = parse_llama(&c, rq, n_vocab)) < 0)
        return rc;
    if (rq->echo && rq->logprobs)
        return openai_fail(
            err, param, param_cap, STRATA_E_UNSUPPORTED, "echo",
            "'echo' with 'logprobs' is not supported: the prompt tokens' logprobs need "
            "the logits of every prompt position, and strata's prefill computes only "
            "the last one (positions from the prefix cache have none)");
    /* the unknown fields, for the debug log */
    const char *key;
    json_t *val;
    json_object_foreach(body, key, val) {
        if (IN(key, known) || IN(key, knobs) || IN(key, refused))
            continue;
        bool off = false;
        for (size_t i = 0; i < sizeof(off_values) / sizeof(off_values[0]); i++)
            off |= strcmp(key, off_values[i].name) == 0;
        if (off)
            continue;
        if (!rq->unknown && !(rq->unknown = json_array()))
            return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        if (json_array_size(rq->unknown) < 32)
            json_array_append_new(rq->unknown, json_string(key));
    }
    return 0;
}

void openai_ext_free(struct openai_request *rq) {
    for (int i = 0; rq->prompts && i < rq->n_prompts; i++) {
        free(rq->prompts[i].text);
        free(rq->prompts[i].ids);
    }
    free(rq->prompts);
    free(rq->prompt_ids);
    json_decref(rq->unknown);
    rq->prompts = NULL;
    rq->prompt_ids = NULL;
    rq->unknown = NULL;
}

void openai_ext_unknown_list(const struct openai_request *rq, char *buf, size_t cap) {
    size_t len = 0, i;
    json_t *x;
    if (cap)
        buf[0] = '\0';
    json_array_foreach(rq->unknown, i, x) {
        int w = snprintf(buf + len, cap - len, "%s%.64s", i ? "," : "", json_string_value(x));
        if (w < 0 || (size_t)w >= cap - len) {
            buf[len] = '\0'; /* whole names only */
            break;
        }
        len += (size_t)w;
    }
}

/* ---- one choice ------------------------------------------------------------------ */

int openai_request_choice(const struct openai_request *rq, int index, struct openai_request *out,
                          struct strata_error *err) {
    *out = *rq;
    out->messages = NULL;
    out->prompt = NULL;
    out->prompt_ids = NULL;
    out->prompts = NULL;
    out->n_prompts = 1;
    out->n = 1;
    out->bias = NULL;
    out->unknown = NULL;
    out->borrows_shared = true; /* ext, grammar: the parent's (openai.h) */
    out->n_stops = 0;
    out->sp.bias = NULL;
    out->sp.n_bias = 0;
    if (rq->messages)
        out->messages = json_incref(rq->messages);
    const struct openai_prompt *p = rq->prompts ? &rq->prompts[index / rq->n] : NULL;
    if (p && p->text) {
        if (!(out->prompt = strdup(p->text)))
            goto nomem;
        out->prompt_len = p->len;
    } else if (p) {
        if (!(out->prompt_ids = ext_memdup(p->ids, (size_t)p->n_ids * sizeof(int32_t))))
            goto nomem;
        out->n_prompt_ids = p->n_ids;
    }
    if (rq->sp.n_bias > 0) {
        if (!(out->bias = ext_memdup(rq->bias, (size_t)rq->sp.n_bias * sizeof(*rq->bias))))
            goto nomem;
        out->sp.bias = out->bias;
        out->sp.n_bias = rq->sp.n_bias;
    }
    for (int i = 0; i < rq->n_stops; i++) {
        if (!(out->stops[i] = strdup(rq->stops[i])))
            goto nomem;
        out->n_stops++;
    }
    if (rq->has_seed)
        out->sp.seed = rq->sp.seed + (uint64_t)index;
    return 0;
nomem:
    openai_request_free(out);
    return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
}
