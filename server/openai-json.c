/* server/openai-json.c: response, chunk and logprobs JSON (see openai.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/session/session.h"
#include "server/openai.h"

/* "fp_strata_<version>": system_fingerprint names the build that answered. */
#define OPENAI_FINGERPRINT "fp_strata_0_1_0"

void openai_ctx_init(struct openai_ctx *oc, enum gen_route route, const char *model,
                     bool usage_null, uint64_t id_bits) {
    memset(oc, 0, sizeof(*oc));
    oc->route = route;
    snprintf(oc->id, sizeof(oc->id), "%s-%016llx", route == GEN_ROUTE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)id_bits);
    oc->created = (int64_t)time(NULL);
    snprintf(oc->model, sizeof(oc->model), "%s", model);
    oc->usage_null = usage_null;
}

/* ---- logprobs ----------------------------------------------------------- */

struct openai_logprobs {
    enum gen_route route;
    json_t *content;                                          /* chat: array */
    json_t *tokens, *token_logprobs, *top_logprobs, *offsets; /* completions: arrays */
};

struct openai_logprobs *openai_logprobs_init(enum gen_route route) {
    struct openai_logprobs *lp = calloc(1, sizeof(*lp));
    if (!lp)
        return NULL;
    lp->route = route;
    openai_logprobs_clear(lp);
    if (!lp->content && !lp->tokens) {
        openai_logprobs_free(lp);
        return NULL;
    }
    return lp;
}

void openai_logprobs_free(struct openai_logprobs *lp) {
    if (!lp)
        return;
    json_decref(lp->content);
    json_decref(lp->tokens);
    json_decref(lp->token_logprobs);
    json_decref(lp->top_logprobs);
    json_decref(lp->offsets);
    free(lp);
}

void openai_logprobs_clear(struct openai_logprobs *lp) {
    json_decref(lp->content);
    json_decref(lp->tokens);
    json_decref(lp->token_logprobs);
    json_decref(lp->top_logprobs);
    json_decref(lp->offsets);
    lp->content = lp->tokens = lp->token_logprobs = lp->top_logprobs = lp->offsets = NULL;
    if (lp->route == GEN_ROUTE_CHAT) {
        lp->content = json_array();
    } else {
        lp->tokens = json_array();
        lp->token_logprobs = json_array();
        lp->top_logprobs = json_array();
        lp->offsets = json_array();
    }
}

bool openai_logprobs_empty(const struct openai_logprobs *lp) {
    return !lp || json_array_size(lp->route == GEN_ROUTE_CHAT ? lp->content : lp->tokens) == 0;
}

/* A token's text as a JSON string (invalid UTF-8 bytes of a partial code
 * point become U+FFFD, as OpenAI shows them) and its raw bytes. */
static json_t *token_text(const struct session_piece *p, json_t **bytes_out) {
    const char *buf = p->bytes;
    const int n = p->n_bytes;
    if (bytes_out) {
        *bytes_out = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(*bytes_out, json_integer((unsigned char)buf[i]));
    }
    json_t *s = json_stringn(buf, (size_t)n);
    if (s)
        return s;
    char fixed[SESSION_PIECE_MAX * 3 + 1];
    size_t o = 0;
    for (int i = 0; i < n;) {
        unsigned char c = (unsigned char)buf[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *probe = len && i + len <= n ? json_stringn(buf + i, (size_t)len) : NULL;
        if (probe) {
            memcpy(fixed + o, buf + i, (size_t)len);
            o += (size_t)len;
            i += len;
            json_decref(probe);
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    return json_stringn(fixed, o);
}

int openai_logprobs_add(struct openai_logprobs *lp, const struct session_logprob *e, int n_top) {
    if (n_top > e->n_top)
        n_top = e->n_top;
    if (lp->route == GEN_ROUTE_CHAT) {
        json_t *bytes = NULL;
        json_t *top = json_array();
        for (int i = 0; i < n_top; i++) {
            json_t *b = NULL;
            json_t *t = token_text(&e->top[i], &b);
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", t, "logprob",
                                                 (double)e->top[i].logprob, "bytes", b));
        }
        json_t *t = token_text(&e->pick, &bytes);
        json_t *o = json_pack("{s:o, s:f, s:o, s:o}", "token", t, "logprob",
                              (double)e->pick.logprob, "bytes", bytes, "top_logprobs", top);
        return o && json_array_append_new(lp->content, o) == 0 ? 0 : STRATA_E_NOMEM;
    }
    json_t *alts = json_object();
    for (int i = 0; i < n_top; i++) {
        json_t *t = token_text(&e->top[i], NULL);
        if (t)
            json_object_set_new(alts, json_string_value(t), json_real(e->top[i].logprob));
        json_decref(t);
    }
    json_array_append_new(lp->tokens, token_text(&e->pick, NULL));
    json_array_append_new(lp->token_logprobs, json_real(e->pick.logprob));
    json_array_append_new(lp->top_logprobs, alts);
    json_array_append_new(lp->offsets, json_integer((json_int_t)e->text_offset));
    return 0;
}

json_t *openai_logprobs_json(struct openai_logprobs *lp) {
    if (lp->route == GEN_ROUTE_CHAT)
        return json_pack("{s:O, s:n}", "content", lp->content, "refusal");
    return json_pack("{s:O, s:O, s:O, s:O}", "tokens", lp->tokens, "token_logprobs",
                     lp->token_logprobs, "top_logprobs", lp->top_logprobs, "text_offset",
                     lp->offsets);
}

/* ---- builders ------------------------------------------------------------ */

static char *dump(json_t *j) {
    if (!j)
        return NULL;
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    return s;
}

static json_t *envelope(const struct openai_ctx *oc, bool chunk) {
    const char *object = oc->route == GEN_ROUTE_CHAT
                             ? (chunk ? "chat.completion.chunk" : "chat.completion")
                             : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", oc->id, "object", object, "created",
                     (json_int_t)oc->created, "model", oc->model, "system_fingerprint",
                     OPENAI_FINGERPRINT);
}

static json_t *usage_json(const struct openai_usage *u) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens);
}

static json_t *timings_json(const struct openai_timings *t) {
    const double pr = t->prompt_ms > 0 ? (double)t->prompt_n * 1e3 / t->prompt_ms : 0.0;
    const double gen = t->predicted_n > 1 && t->predicted_ms > 0
                           ? (double)(t->predicted_n - 1) * 1e3 / t->predicted_ms
                           : 0.0;
    return json_pack(
        "{s:I, s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f}", "cache_n", (json_int_t)t->cache_n,
        "prompt_n", (json_int_t)t->prompt_n, "prompt_ms", t->prompt_ms, "prompt_per_token_ms",
        t->prompt_n > 0 ? t->prompt_ms / (double)t->prompt_n : 0.0, "prompt_per_second", pr,
        "predicted_n", (json_int_t)t->predicted_n, "predicted_ms", t->predicted_ms,
        "predicted_per_token_ms", gen > 0 ? 1e3 / gen : 0.0, "predicted_per_second", gen,
        "queued_ms", t->queued_ms);
}

/* One streamed choice: chat {index, delta, logprobs, finish_reason},
 * completions {index, text, logprobs, finish_reason}. delta steals. */
static char *chunk(const struct openai_ctx *oc, json_t *delta, const char *text, size_t len,
                   struct openai_logprobs *lp, const char *finish, const struct openai_timings *t) {
    json_t *j = envelope(oc, true);
    json_t *choice = json_pack("{s:i}", "index", oc->index);
    if (oc->route == GEN_ROUTE_CHAT)
        json_object_set_new(choice, "delta", delta);
    else
        json_object_set_new(choice, "text", json_stringn(text ? text : "", text ? len : 0));
    json_object_set_new(choice, "logprobs",
                        openai_logprobs_empty(lp) ? json_null() : openai_logprobs_json(lp));
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    if (oc->usage_null)
        json_object_set_new(j, "usage", json_null());
    if (t)
        json_object_set_new(j, "timings", timings_json(t));
    return dump(j);
}

char *openai_chunk_role(const struct openai_ctx *oc) {
    return chunk(oc, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), "", 0, NULL, NULL,
                 NULL);
}

char *openai_chunk_delta(const struct openai_ctx *oc, const char *text, size_t len,
                         struct openai_logprobs *lp) {
    json_t *delta = oc->route == GEN_ROUTE_CHAT
                        ? json_pack("{s:s%}", "content", text ? text : "", text ? len : 0)
                        : NULL;
    return chunk(oc, delta, text, len, lp, NULL, NULL);
}

char *openai_chunk_finish(const struct openai_ctx *oc, const char *finish_reason,
                          const struct openai_timings *t) {
    json_t *delta = oc->route == GEN_ROUTE_CHAT ? json_object() : NULL;
    return chunk(oc, delta, "", 0, NULL, finish_reason, t);
}

char *openai_chunk_usage(const struct openai_ctx *oc, const struct openai_usage *u) {
    json_t *j = envelope(oc, true);
    json_object_set_new(j, "choices", json_array());
    json_object_set_new(j, "usage", usage_json(u));
    return dump(j);
}

char *openai_chunk_delta_json(const struct openai_ctx *oc, json_t *delta,
                              struct openai_logprobs *lp) {
    return delta ? chunk(oc, delta, "", 0, lp, NULL, NULL) : NULL;
}

/* The body of a response of one choice whose `key` ("message" or "text")
 * is value (stolen). */
static char *response_one(const struct openai_ctx *oc, const char *key, json_t *value,
                          const char *finish_reason, struct openai_logprobs *lp,
                          const struct openai_usage *u, const struct openai_timings *t) {
    json_t *j = envelope(oc, false);
    json_t *choice = json_pack("{s:i}", "index", oc->index);
    json_object_set_new(choice, key, value);
    json_object_set_new(choice, "logprobs", lp ? openai_logprobs_json(lp) : json_null());
    json_object_set_new(choice, "finish_reason", json_string(finish_reason));
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    json_object_set_new(j, "usage", usage_json(u));
    if (t)
        json_object_set_new(j, "timings", timings_json(t));
    return dump(j);
}

char *openai_response_message(const struct openai_ctx *oc, json_t *message,
                              const char *finish_reason, struct openai_logprobs *lp,
                              const struct openai_usage *u, const struct openai_timings *t) {
    return response_one(oc, "message", message, finish_reason, lp, u, t);
}

char *openai_response(const struct openai_ctx *oc, const char *text, size_t len,
                      const char *finish_reason, struct openai_logprobs *lp,
                      const struct openai_usage *u, const struct openai_timings *t) {
    json_t *s = json_stringn(text ? text : "", text ? len : 0);
    if (oc->route == GEN_ROUTE_CHAT)
        return openai_response_message(
            oc, json_pack("{s:s, s:o, s:n}", "role", "assistant", "content", s, "refusal"),
            finish_reason, lp, u, t);
    return response_one(oc, "text", s, finish_reason, lp, u, t);
}
