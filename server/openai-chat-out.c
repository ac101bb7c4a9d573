/* server/openai-chat-out.c: reasoning / content / tool-call output of a
 * chat response (see openai-chat-out.h). */
#include "server/openai-chat-out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session/session.h"
#include "engine/text/tokenizer.h"
#include "engine/text/toolcall.h"
#include "server/openai-tools.h"

/* Prompt tokens detokenized to find the generation prompt's last marker:
 * "<think>\n" is 1-3 tokens, ">>>" 1-3; 8 leaves room for either. */
#define TAIL_TOKENS 8

struct openai_chat_out {
    struct toolcall_parser *p;
    bool keep_special;
    bool single;             /* parallel_tool_calls false: only the first call is answered */
    struct toolcall_delta d; /* the last feed's */
};

int openai_chat_out_init(const struct openai_request *rq, const struct session_base *sb,
                         const int32_t *prompt, int n_prompt, struct openai_chat_out **out,
                         struct strata_error *err) {
    *out = NULL;
    if (rq->route != GEN_ROUTE_CHAT || !rq->ext)
        return 0;
    size_t slen = 0;
    const char *src = session_base_template_source(sb, &slen);
    struct toolcall_parser_params pp = toolcall_parser_params_default();
    pp.tools = rq->ext->tools != NULL;
    pp.family = toolcall_detect(src, slen);
    bool think = toolcall_detect_reasoning(src, slen, &pp.think_open, &pp.think_close);
    /* a forced call's output is the call (the grammar's): no think block,
     * even where the generation prompt opened one (DeepSeek R1) */
    if (think && (rq->ext->choice == OPENAI_TOOL_CHOICE_REQUIRED ||
                  rq->ext->choice == OPENAI_TOOL_CHOICE_FUNCTION)) {
        think = false;
        pp.think_open = pp.think_close = NULL;
    }
    if (!pp.tools && !think)
        return 0;
    char tail[TAIL_TOKENS * 64];
    size_t tn = 0;
    const struct tokenizer *tok = session_base_tokenizer(sb);
    for (int i = n_prompt > TAIL_TOKENS ? n_prompt - TAIL_TOKENS : 0; i < n_prompt; i++) {
        int k = tokenizer_token_to_piece(tok, prompt[i], true, tail + tn, sizeof tail - tn);
        if (k > 0 && (size_t)k <= sizeof tail - tn)
            tn += (size_t)k;
    }
    pp.prompt_tail = tail;
    pp.prompt_tail_len = tn;
    struct openai_chat_out *co = calloc(1, sizeof *co);
    if (!co)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    if (!(co->p = toolcall_parser_init(&pp, err))) {
        free(co);
        return err && err->code ? err->code : STRATA_E_NOMEM;
    }
    /* R7B's thinking markers are control tokens too; "<think>" is not (an added
     * token in the Qwen3 and DeepSeek R1 vocabularies) */
    /* parallel_tool_calls: false with tool_choice auto: a model that writes
     * several calls anyway gets its first answered and the rest dropped (a
     * forced choice's grammar allows one call only: openai-tools-grammar.c) */
    co->single = !rq->ext->parallel;
    co->keep_special = (pp.tools && toolcall_family_control(pp.family)) ||
                       (think && strcmp(pp.think_open, "<think>") != 0);
    *out = co;
    return 0;
}

void openai_chat_out_free(struct openai_chat_out *co) {
    if (!co)
        return;
    toolcall_parser_free(co->p);
    free(co);
}

bool openai_chat_out_keep_special(const struct openai_chat_out *co) {
    return co && co->keep_special;
}

int openai_chat_out_feed(struct openai_chat_out *co, const char *text, size_t len, bool final,
                         struct strata_error *err) {
    return toolcall_parser_feed(co->p, text, len, final, &co->d, err);
}

/* "call_<the response id's hex>_<index>": unique per response and call. */
static json_t *call_id(const struct openai_ctx *oc, int i) {
    char id[80];
    const char *hex = strchr(oc->id, '-');
    snprintf(id, sizeof id, "call_%s_%d", hex ? hex + 1 : oc->id, i);
    return json_string(id);
}

char *openai_chat_out_chunk(struct openai_chat_out *co, const struct openai_ctx *oc,
                            const char *text, size_t len, bool final, struct openai_logprobs *lp) {
    if (openai_chat_out_feed(co, text, len, final, NULL) < 0)
        return NULL;
    const struct toolcall_delta *d = &co->d;
    if (!d->content_len && !d->reasoning_len && !d->n_events &&
        (!final || openai_logprobs_empty(lp)))
        return NULL;
    json_t *delta = json_object();
    if (d->reasoning_len)
        json_object_set_new(delta, "reasoning_content",
                            json_stringn(d->reasoning, d->reasoning_len));
    if (d->content_len)
        json_object_set_new(delta, "content", json_stringn(d->content, d->content_len));
    if (d->n_events) {
        json_t *calls = json_array();
        json_t *last = NULL;
        int last_index = -1;
        for (int e = 0; e < d->n_events; e++) {
            const struct toolcall_event *ev = &d->events[e];
            if (co->single && ev->index > 0)
                continue;
            if (ev->name) {
                last = json_pack("{s:i, s:o, s:s, s:{s:s, s:s}}", "index", ev->index, "id",
                                 call_id(oc, ev->index), "type", "function", "function", "name",
                                 ev->name, "arguments", "");
                json_array_append_new(calls, last);
                last_index = ev->index;
                continue;
            }
            json_t *piece = json_stringn(ev->args, ev->args_len);
            if (last && last_index == ev->index) { /* same call: one entry */
                json_t *fn = json_object_get(last, "function");
                const char *had = json_string_value(json_object_get(fn, "arguments"));
                size_t hl = strlen(had ? had : "");
                char *joined = malloc(hl + ev->args_len + 1);
                if (joined) {
                    memcpy(joined, had ? had : "", hl);
                    memcpy(joined + hl, ev->args, ev->args_len);
                    json_object_set_new(fn, "arguments", json_stringn(joined, hl + ev->args_len));
                    free(joined);
                }
                json_decref(piece);
                continue;
            }
            last = json_pack("{s:i, s:{s:o}}", "index", ev->index, "function", "arguments", piece);
            json_array_append_new(calls, last);
            last_index = ev->index;
        }
        if (json_array_size(calls))
            json_object_set_new(delta, "tool_calls", calls);
        else
            json_decref(calls);
    }
    if (!json_object_size(delta) && (!final || openai_logprobs_empty(lp))) {
        json_decref(delta); /* only dropped calls' pieces */
        return NULL;
    }
    return openai_chunk_delta_json(oc, delta, lp);
}

const char *openai_chat_out_finish(const struct openai_chat_out *co, const char *reason) {
    if (co && toolcall_parser_n_calls(co->p) > 0 && reason && strcmp(reason, "stop") == 0)
        return "tool_calls";
    return reason;
}

json_t *openai_chat_out_message(const struct openai_chat_out *co, const struct openai_ctx *oc) {
    size_t cl = 0, rl = 0;
    const char *c = toolcall_parser_content(co->p, &cl);
    const char *r = toolcall_parser_reasoning(co->p, &rl);
    int n = toolcall_parser_n_calls(co->p);
    if (co->single && n > 1)
        n = 1;
    json_t *m = json_pack("{s:s}", "role", "assistant");
    if (!m)
        return NULL;
    /* OpenAI: content null when the message is only tool calls */
    json_object_set_new(m, "content", n > 0 && cl == 0 ? json_null() : json_stringn(c, cl));
    if (rl)
        json_object_set_new(m, "reasoning_content", json_stringn(r, rl));
    json_object_set_new(m, "refusal", json_null());
    if (n > 0) {
        json_t *calls = json_array();
        for (int i = 0; i < n; i++) {
            struct toolcall_call tc;
            toolcall_parser_call(co->p, i, &tc);
            json_array_append_new(calls,
                                  json_pack("{s:o, s:s, s:{s:s, s:s%}}", "id", call_id(oc, i),
                                            "type", "function", "function", "name", tc.name,
                                            "arguments", tc.args, tc.args_len));
        }
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}
