/* engine/text/toolcall.h: a chat model's generated text split into
 * reasoning, content and tool calls, by the chat template's family (one
 * table, toolcall.c), fed one piece at a time as it is generated.
 *
 *   const struct toolcall_family *f = toolcall_detect(tmpl_src, tmpl_len);
 *   struct toolcall_parser_params pp = toolcall_parser_params_default();
 *   pp.family = f;                    // NULL: Hermes-style <tool_call> (the generic form)
 *   pp.tools = true;                  // parse calls (false: reasoning split only)
 *   pp.prompt_tail = tail; pp.prompt_tail_len = n;   // the prompt's last bytes
 *   struct toolcall_parser *p = toolcall_parser_init(&pp, &err);
 *   for each generated piece:
 *       struct toolcall_delta d;
 *       toolcall_parser_feed(p, piece, n, false, &d, &err);
 *       ... d.content / d.reasoning: text to send; d.events: calls begun, argument bytes
 *   toolcall_parser_feed(p, "", 0, true, &d, &err);  // the end: release what was held
 *   for (i < toolcall_parser_n_calls(p)) toolcall_parser_call(p, i, &c);
 *   toolcall_parser_free(p);
 *
 * Families (what the model writes; see toolcall.c's table): Hermes/Qwen
 * `<tool_call>{"name", "arguments"}</tool_call>`, Llama 3.x a bare JSON
 * `{"name", "parameters"}` at the start or after `<|python_tag|>`, Mistral
 * `[TOOL_CALLS][{...}, ...]`, Functionary v3.2 `>>>name\n{args}` (the
 * generation prompt writes the first `>>>`; `>>>all\n` is text), Functionary
 * v3.1 `<function=name>{args}</function>`, Command-R+ ``Action: ```json
 * [{"tool_name", "parameters"}]``` ``, Command R7B
 * `<|START_ACTION|>[...]<|END_ACTION|>`, Firefunction v2 `functools[...]`,
 * DeepSeek R1 `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name
 * \n```json\n{args}\n```<｜tool▁call▁end｜>...`. Reasoning: `<think>...</think>`
 * for templates that mention it (Qwen3, DeepSeek R1; a prompt that ends in
 * `<think>` starts inside it), `<|START_THINKING|>...<|END_THINKING|>` (R7B).
 *
 * Streaming: text that may still be the start of a marker is held back
 * until it is decided; content and reasoning come out as settled; a call is
 * announced once its name is complete, then its arguments come out as raw
 * JSON bytes in pieces (the concatenation is the final arguments text). A
 * marker followed by something that is not a call stays content. The
 * generated text is kept whole and re-scanned per feed: O(n) a feed on
 * outputs of a few KiB.
 *
 * Ownership: families are static; a parser is owned by its caller
 * (toolcall_parser_free); delta strings are borrowed until the next call.
 * Threading: a parser belongs to one thread at a time; families are
 * immutable.
 */
#ifndef STRATA_TOOLCALL_H
#define STRATA_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/core/error.h"

struct toolcall_family;

/* The family a template's source belongs to, or NULL (none of the table's:
 * callers use the generic Hermes form). */
const struct toolcall_family *toolcall_detect(const char *tmpl_src, size_t len);
/* "hermes", "llama3", ...; "generic" for NULL. */
const char *toolcall_family_name(const struct toolcall_family *f);
/* Its markers are control tokens ([TOOL_CALLS], <|python_tag|>, DeepSeek's
 * and R7B's): the detokenizer must keep control tokens' text. */
bool toolcall_family_control(const struct toolcall_family *f);
/* How a call is written in a family, for a grammar that forces one: the
 * calls are open, call, (sep, call)*, close; a call is call_open, then
 * either the object {name_key: name, args_key: arguments} (object) or the
 * name, name_close and the arguments object, then call_close. sep NULL:
 * one call only (Llama 3's bare JSON). Strings are static; NULL reads as "".
 * Functionary v3.2's first ">>>" is the generation prompt's, so its form
 * starts at the name. */
struct toolcall_form {
    const char *open, *sep, *close;
    const char *call_open, *call_close;
    bool object;
    const char *name_key, *args_key; /* object */
    const char *name_close;          /* !object */
};
void toolcall_forced_form(const struct toolcall_family *f, struct toolcall_form *out);
/* The family of a name (toolcall_family_name's), or NULL. */
const struct toolcall_family *toolcall_family_by_name(const char *name);

/* Reasoning markers of a template's source: "<think>"/"</think>" when the
 * template mentions </think>, R7B's thinking tokens; false when none. */
bool toolcall_detect_reasoning(const char *tmpl_src, size_t len, const char **open,
                               const char **close);

struct toolcall_parser_params {
    const struct toolcall_family *family; /* static; NULL = generic */
    bool tools;                           /* parse tool calls */
    const char *think_open, *think_close; /* borrowed, static or outliving p; NULL: none */
    const char *prompt_tail;              /* borrowed for init: the prompt's last bytes */
    size_t prompt_tail_len;
};
struct toolcall_parser_params toolcall_parser_params_default(void);

struct toolcall_event {
    int index;        /* the call, 0-based, in output order */
    const char *name; /* non-NULL once: the call begins (NUL-terminated) */
    const char *args; /* argument bytes to append (not NUL-terminated); may be empty */
    size_t args_len;
};

struct toolcall_delta {
    const char *content; /* borrowed; "" when none */
    size_t content_len;
    const char *reasoning;
    size_t reasoning_len;
    const struct toolcall_event *events; /* borrowed: (n_events) */
    int n_events;
};

struct toolcall_call {
    const char *name; /* borrowed from the parser */
    const char *args; /* borrowed: the arguments text (JSON), not NUL-terminated */
    size_t args_len;
    bool complete; /* the call's text ended (else it was cut by a length limit) */
};

struct toolcall_parser;
/* owned: free with toolcall_parser_free() */
struct toolcall_parser *toolcall_parser_init(const struct toolcall_parser_params *pp,
                                             struct strata_error *err);
void toolcall_parser_free(struct toolcall_parser *p); /* NULL is a no-op */
/* Feeds generated text (complete UTF-8) and fills *d with what may go out
 * now; final: the generation ended, so nothing is held back any more.
 * 0 or STRATA_E_NOMEM (then *d is empty). */
int toolcall_parser_feed(struct toolcall_parser *p, const char *text, size_t len, bool final,
                         struct toolcall_delta *d, struct strata_error *err);
int toolcall_parser_n_calls(const struct toolcall_parser *p);
void toolcall_parser_call(const struct toolcall_parser *p, int i, struct toolcall_call *out);
/* Everything sent as content / reasoning so far (borrowed, NUL-terminated). */
const char *toolcall_parser_content(const struct toolcall_parser *p, size_t *len);
const char *toolcall_parser_reasoning(const struct toolcall_parser *p, size_t *len);

#endif
