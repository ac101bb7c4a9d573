/* server/openai.h: the OpenAI protocol: request parsing/validation and the
 * JSON of responses and stream chunks (chat.completion, text_completion,
 * chat.completion.chunk).
 *
 *   struct openai_request rq;
 *   char param[64];
 *   if (openai_parse(&submit, "stories260K", n_vocab, &rq, param, sizeof(param), &err) < 0)
 *       ... 400/404 with err.message and param ...
 *   struct openai_ctx oc;
 *   openai_ctx_init(&oc, rq.route, "stories260K", rq.stream_usage);
 *   char *j = openai_chunk_delta(&oc, "Once", 4, NULL);   // owned: free()
 *
 * Validation follows OpenAI: wrong types and out-of-range values give
 * STRATA_E_INVALID / STRATA_E_RANGE (400 invalid_request_error) with
 * error.param naming the field ("messages[2].role", "temperature"); an
 * unknown model gives STRATA_E_NOT_FOUND (404); fields strata does not
 * implement (functions, tools on completions, suffix, best_of other than n,
 * echo with logprobs, llama.cpp samplers it lacks) give STRATA_E_UNSUPPORTED
 * (400, code "unsupported") rather than being ignored. n, the prompt forms,
 * echo and the llama.cpp names are openai-ext.c's (openai-ext.h); tools,
 * tool_choice and the chat extensions openai-tools.c's; response_format
 * openai-format.c's. Unknown fields are ignored, as OpenAI does, and listed
 * in rq.unknown for the debug log. JSON null counts as absent.
 *
 * Ownership: an openai_request owns its strings and a reference to the
 * messages array (openai_request_free). Builders return malloc'd JSON text.
 * Threading: no shared state; any thread.
 */
#ifndef STRATA_SERVER_OPENAI_H
#define STRATA_SERVER_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/sample/sampler.h"
#include "server/gen.h"

#define OPENAI_MAX_STOPS 4

struct session_logprob;
struct openai_chat_ext;
struct grammar;

struct openai_request {
    enum gen_route route;
    bool stream;
    bool stream_usage; /* stream_options.include_usage (or the server's always-usage) */
    /* chat: owned reference to the validated array, where an assistant message
     * without content reads as content ""; else NULL */
    json_t *messages;
    char *prompt;                  /* completion: owned, NUL-terminated; else NULL */
    size_t prompt_len;             /* bytes */
    int64_t max_tokens;            /* max_tokens / max_completion_tokens; -1 = up to the context */
    bool logprobs;                 /* report logprobs */
    int top_logprobs;              /* alternatives per token, 0..20 (completions: 0..5) */
    struct sampler_params sp;      /* sp.bias points into bias */
    struct sampler_bias *bias;     /* owned: (sp.n_bias) */
    bool has_seed;                 /* false: the caller picks a fresh seed */
    char *stops[OPENAI_MAX_STOPS]; /* owned */
    int n_stops;
    struct openai_chat_ext *ext; /* chat: owned: tools, tool_choice, kwargs, prefill
                                    (openai-tools.h); else NULL */
    /* owned (grammar_free): response_format json_object / json_schema (or the
     * completions' json_schema) compiled; NULL = free text */
    struct grammar *grammar;
    /* a choice of n > 1 (openai_request_choice): ext and grammar are the parent
     * request's, borrowed (the parent outlives its choices), not freed here */
    bool borrows_shared;
    /* server/openai-ext.c (n, prompt lists, token ids, echo, llama.cpp names) */
    int n;                         /* choices per prompt, 1..OPENAI_MAX_N */
    struct openai_prompt *prompts; /* completions: (n_prompts) owned, every prompt; the
                                      job's own one is prompt / prompt_ids */
    int n_prompts;                 /* 1 for chat */
    int32_t *prompt_ids;           /* completion given as token ids: owned (n_prompt_ids) */
    int n_prompt_ids;
    bool echo;         /* completions: the prompt text starts each choice */
    bool cache_prompt; /* false: no prefix-cache reuse for this request */
    bool ignore_eos;   /* EOG tokens end nothing (llama.cpp's ignore_eos) */
    json_t *unknown;   /* owned: array of field names strata does not know */
};

/* Most choices one request may ask for (n). Each choice is a session with
 * its own KV sequence (the prompt's blocks shared), so with --parallel P
 * only P choices decode at once and the rest wait for a slot; 16 bounds what
 * one request can queue (n x prompts <= OPENAI_MAX_CHOICES in all). */
#define OPENAI_MAX_N 16
/* Most prompts in one /v1/completions request (an array of prompts). */
#define OPENAI_MAX_PROMPTS 64
/* Most choices of one request in all (prompts x n). */
#define OPENAI_MAX_CHOICES 64

/* One prompt of /v1/completions: text, or token ids (text NULL). */
struct openai_prompt {
    char *text; /* owned, NUL-terminated; NULL for ids */
    size_t len;
    int32_t *ids; /* owned (n_ids); NULL for text */
    int n_ids;
};

/* Parses and validates req->body. model_id: the served id; n_vocab bounds
 * logit_bias keys. On failure: negative STRATA_E_*, err message, and param
 * (the offending field, "" if none). On success *out must be released with
 * openai_request_free(). */
int openai_parse(const struct gen_submit *req, const char *model_id, int n_vocab,
                 struct openai_request *out, char *param, size_t param_cap,
                 struct strata_error *err);
void openai_request_free(struct openai_request *rq); /* zeroes; NULL is a no-op */
/* Structured output (openai-format.c): `response_format` {"type": "text" |
 * "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}
 * and, on completions, llama-server's `json_schema` (a schema) compiled into
 * *out (NULL for text). Errors: STRATA_E_INVALID / _UNSUPPORTED / _LIMIT
 * with param "response_format" (or "json_schema") and the schema's message. */
int openai_parse_format(json_t *body, enum gen_route route, struct grammar **out, char *param,
                        size_t param_cap, struct strata_error *err);
/* A request of one choice, choice `index` of rq (prompt index / rq->n): its
 * own copy of everything, the prompt of that index, the seed + index when a
 * seed was given. 0 or STRATA_E_NOMEM (out zeroed). openai-ext.c */
int openai_request_choice(const struct openai_request *rq, int index, struct openai_request *out,
                          struct strata_error *err);

/* Identity shared by every chunk of one response. */
struct openai_ctx {
    enum gen_route route;
    char id[48];     /* "chatcmpl-<hex>" / "cmpl-<hex>" */
    int64_t created; /* unix seconds, fixed for the whole response */
    char model[128];
    bool usage_null; /* stream with usage: every chunk carries "usage": null */
    int index;       /* choices[].index of this choice (n > 1, several prompts) */
};
void openai_ctx_init(struct openai_ctx *oc, enum gen_route route, const char *model,
                     bool usage_null, uint64_t id_bits);

/* Logprobs of the tokens of a response or chunk, in OpenAI's shape for the
 * route: chat {content:[{token, logprob, bytes, top_logprobs}], refusal:null},
 * completions {tokens, token_logprobs, top_logprobs:[{tok: lp}], text_offset}. */
struct openai_logprobs;
/* NULL on out of memory. owned: free with openai_logprobs_free() */
struct openai_logprobs *openai_logprobs_init(enum gen_route route);
void openai_logprobs_free(struct openai_logprobs *lp); /* NULL is a no-op */
/* Adds one token: its entry from session_step (engine/session: the token's
 * bytes, logprob, alternatives and text offset; borrowed for the call), with
 * at most n_top alternatives. 0 or STRATA_E_NOMEM. */
int openai_logprobs_add(struct openai_logprobs *lp, const struct session_logprob *e, int n_top);
bool openai_logprobs_empty(const struct openai_logprobs *lp);
/* The JSON value built so far (borrowed) and a reset for the next chunk. */
json_t *openai_logprobs_json(struct openai_logprobs *lp);
void openai_logprobs_clear(struct openai_logprobs *lp);

struct openai_usage {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
};

/* Where a response's time went, as llama-server's "timings" object (plus
 * queued_ms): prompt_n prompt tokens computed (cache_n more came from the
 * prefix cache) in prompt_ms, from admission to the first token;
 * predicted_n tokens generated, predicted_ms from the first token to the
 * last, so predicted_per_second is (predicted_n - 1) / predicted_ms: the
 * first token's time is the prompt's. queued_ms: submit to admission
 * (tokenizing and waiting for a slot or KV blocks). */
struct openai_timings {
    int64_t cache_n, prompt_n, predicted_n;
    double queued_ms, prompt_ms, predicted_ms;
};

/* Builders (owned: free with free()); NULL on out of memory. lp may be NULL. */
char *openai_chunk_role(const struct openai_ctx *oc);
char *openai_chunk_delta(const struct openai_ctx *oc, const char *text, size_t len,
                         struct openai_logprobs *lp);
/* t (may be NULL) adds "timings" to the chunk, as llama-server's last chunk has it. */
char *openai_chunk_finish(const struct openai_ctx *oc, const char *finish_reason,
                          const struct openai_timings *t);
char *openai_chunk_usage(const struct openai_ctx *oc, const struct openai_usage *u);
char *openai_response(const struct openai_ctx *oc, const char *text, size_t len,
                      const char *finish_reason, struct openai_logprobs *lp,
                      const struct openai_usage *u, const struct openai_timings *t);

/* Chat builders for a delta / message object the caller makes (steals it):
 * reasoning_content and tool_calls (openai-chat-out.c). */
char *openai_chunk_delta_json(const struct openai_ctx *oc, json_t *delta,
                              struct openai_logprobs *lp);
char *openai_response_message(const struct openai_ctx *oc, json_t *message,
                              const char *finish_reason, struct openai_logprobs *lp,
                              const struct openai_usage *u, const struct openai_timings *t);

/* The served model id for a file path: its basename without ".gguf". */
void openai_model_id(const char *path, char *buf, size_t cap);

#endif
