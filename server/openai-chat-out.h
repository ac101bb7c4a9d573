/* server/openai-chat-out.h: a chat response's generated text split into
 * message.reasoning_content, content and tool_calls (engine/text/toolcall.h
 * by the template's family), as stream deltas and as the final message.
 *
 *   struct openai_chat_out *co = NULL;
 *   if (openai_chat_out_init(&rq, sb, prompt, n_prompt, &co, &err) < 0) ...
 *   // co NULL: nothing to split (no tools, no reasoning markers): plain text
 *   sp.keep_special = openai_chat_out_keep_special(co);
 *   per text delta:  char *js = openai_chat_out_chunk(co, &oc, text, n, false, lp);
 *   at the end:      js = openai_chat_out_chunk(co, &oc, "", 0, true, lp);
 *                    reason = openai_chat_out_finish(co, "stop");    // "tool_calls"
 *   non-stream:      openai_chat_out_feed(co, text, n, final) ...
 *                    json_t *msg = openai_chat_out_message(co, &oc);
 *
 * Stream deltas have OpenAI's shape: {"reasoning_content": ...}, {"content":
 * ...}, {"tool_calls": [{index, id, type: "function", function: {name,
 * arguments: ""}}]} once per call, then {"tool_calls": [{index, function:
 * {arguments: piece}}]}. The final message has content null when only calls
 * were made, and reasoning_content when there was reasoning.
 *
 * Ownership: co owned (openai_chat_out_free); returned JSON text and
 * message owned by the caller. Threading: one job's thread at a time.
 */
#ifndef STRATA_SERVER_OPENAI_CHAT_OUT_H
#define STRATA_SERVER_OPENAI_CHAT_OUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "server/openai.h"

struct session_base;
struct openai_chat_out;

/* *out NULL (and 0) when the response needs no split. prompt: the prompt's
 * ids (its last tokens tell whether the generation prompt opened a think
 * block). */
int openai_chat_out_init(const struct openai_request *rq, const struct session_base *sb,
                         const int32_t *prompt, int n_prompt, struct openai_chat_out **out,
                         struct strata_error *err);
void openai_chat_out_free(struct openai_chat_out *co); /* NULL is a no-op */
/* The session must keep control tokens' text (the markers are control tokens). */
bool openai_chat_out_keep_special(const struct openai_chat_out *co);
/* Feeds text; 0 or STRATA_E_NOMEM. */
int openai_chat_out_feed(struct openai_chat_out *co, const char *text, size_t len, bool final,
                         struct strata_error *err);
/* Feeds text and builds the stream chunk of what may go out (NULL when
 * nothing does and no logprobs wait, or on out of memory). */
char *openai_chat_out_chunk(struct openai_chat_out *co, const struct openai_ctx *oc,
                            const char *text, size_t len, bool final, struct openai_logprobs *lp);
/* "tool_calls" for a response that made calls and stopped; else reason. */
const char *openai_chat_out_finish(const struct openai_chat_out *co, const char *reason);
/* The non-stream message (owned; NULL on out of memory). */
json_t *openai_chat_out_message(const struct openai_chat_out *co, const struct openai_ctx *oc);

#endif
