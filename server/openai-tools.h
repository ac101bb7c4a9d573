/* server/openai-tools.h: the chat request's tool and reasoning fields:
 * `tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls`,
 * `tool` messages, `chat_template_kwargs`, `reasoning_effort`, and the
 * assistant prefill; and the output side (openai-chat-out.c): the
 * generated text split into reasoning_content, content and tool_calls.
 *
 *   // in openai_parse (chat): validated, then what the template receives
 *   struct openai_chat_ext *x;
 *   if (openai_chat_ext_parse(body, msgs, &x, param, cap, &err) < 0) ... 400 ...
 *   rq->messages = openai_chat_messages(msgs);  // arguments strings -> objects
 *   // at submit, once the template is known:
 *   openai_chat_ext_check_template(x, src, len, param, cap, &err);
 *   // prompt: session_input {.tools = x->tools, .extra_vars = x->extra_vars,
 *   //                        .continue_last = x->prefill}
 *
 * Conventions (Hugging Face transformers' apply_chat_template): `tools` is
 * the OpenAI array as sent ({type:"function", function:{name, description,
 * parameters}}); an assistant's tool_calls keep their shape with
 * function.arguments parsed from its JSON string into an object; a tool
 * message keeps tool_call_id (and name). tool_choice "none" hides the tools
 * from the template and the output parser. reasoning_effort reaches the
 * template as the variable `reasoning_effort` where the template reads one,
 * else 400 unsupported (param "reasoning_effort").
 *
 * Errors: STRATA_E_INVALID with param naming the field ("tools[1].function.name",
 * "messages[3].tool_calls[0].function.arguments", "tool_choice"),
 * STRATA_E_UNSUPPORTED for what is not implemented (a parameters schema
 * keyword the grammar lacks, for a forced tool_choice: param
 * "tools[i].function.parameters").
 *
 * Ownership: openai_chat_ext owned by the request (openai_chat_ext_free).
 * Threading: no shared state.
 */
#ifndef STRATA_SERVER_OPENAI_TOOLS_H
#define STRATA_SERVER_OPENAI_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/core/error.h"

enum openai_tool_choice {
    OPENAI_TOOL_CHOICE_AUTO = 0, /* the default when tools are given */
    OPENAI_TOOL_CHOICE_NONE,     /* tools hidden, nothing parsed */
    OPENAI_TOOL_CHOICE_REQUIRED, /* a call of one of the tools */
    OPENAI_TOOL_CHOICE_FUNCTION, /* a call of `forced` */
};

#define OPENAI_TOOL_NAME_MAX 64 /* OpenAI's limit: [a-zA-Z0-9_-]{1,64} */

struct openai_chat_ext {
    json_t *tools; /* owned reference: what the template gets; NULL: none or choice "none" */
    size_t n_tools;
    enum openai_tool_choice choice;
    char forced[OPENAI_TOOL_NAME_MAX + 1]; /* FUNCTION: the name */
    bool parallel;                         /* parallel_tool_calls (default true) */
    json_t *extra_vars; /* owned: chat_template_kwargs (+ reasoning_effort); NULL = none */
    char effort[16];    /* reasoning_effort as given; "" = absent */
    bool prefill;       /* the last message is an assistant's with content and no tool_calls */
};

/* Validates the fields above of a chat body (msgs: the body's messages,
 * already checked by openai.c for roles and content). *out: owned, set on
 * success (even with none of the fields: then all defaults). */
int openai_chat_ext_parse(json_t *body, json_t *msgs, struct openai_chat_ext **out, char *param,
                          size_t cap, struct strata_error *err);
void openai_chat_ext_free(struct openai_chat_ext *x); /* NULL is a no-op */

/* One message's tool fields (openai.c's check_messages calls it per
 * message): assistant tool_calls, a tool message's tool_call_id and name. */
int openai_check_tool_fields(json_t *m, size_t i, char *param, size_t cap,
                             struct strata_error *err);

/* The messages as the template sees them (a new reference; NULL on out of
 * memory): content null/absent reads "" except on an assistant message
 * with tool_calls (kept as transformers passes it), tool_calls' arguments
 * strings parsed into objects. */
json_t *openai_chat_messages(json_t *msgs);

struct session_input;
struct openai_request;
/* The prompt input of a chat request (the scheduler's and the tests'):
 * messages, tools, extra_vars and the prefill flag, borrowed from rq. */
void openai_session_input(const struct openai_request *rq, struct session_input *in);

/* Checks what depends on the model's template (reasoning_effort needs a
 * template that reads it) and adds reasoning_effort to extra_vars. msgs
 * (openai_chat_messages' result): a template that never reads tool_calls
 * (ChatML) gets "" for the null content of a tool-calling message, as
 * every other message without content, instead of failing on it. */
int openai_chat_ext_check_template(struct openai_chat_ext *x, json_t *msgs, const char *src,
                                   size_t len, char *param, size_t cap, struct strata_error *err);

/* A forced tool_choice ("required", or a named function) compiled into
 * rq->grammar for the template's family (openai-tools-grammar.c): the
 * output is then a call, parsed as any other. 0 and nothing set when
 * tool_choice is not forced. At submit, when the template is known. */
int openai_tools_grammar(struct openai_request *rq, const char *src, size_t len, char *param,
                         size_t cap, struct strata_error *err);

#endif
