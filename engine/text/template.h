/* engine/text/template.h: chat templates: a Jinja2-subset interpreter that renders
 * a model's chat template byte-identically to Python Jinja2 configured as
 * Hugging Face transformers' apply_chat_template does
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls,
 * tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).
 *
 *   struct strata_error err = {0};
 *   struct chat_template *t = template_parse(src, strlen(src), &err);
 *   if (!t) { fprintf(stderr, "%s\n", err.message); return 1; }   // "line 3, column 7: ..."
 *   struct template_inputs in = template_inputs_default();
 *   in.messages = messages;                 // json array of {role, content, ...}
 *   in.add_generation_prompt = true;
 *   in.bos_token = "<s>";
 *   struct template_limits lim = template_limits_default();
 *   struct template_output out = {0};
 *   if (template_render(t, &in, &lim, &out, &err) == 0)
 *       fwrite(out.text, 1, out.len, stdout);   // untrusted ranges in out.untrusted
 *   template_output_free(&out);
 *   template_free(t);
 *
 * Inputs: message `content` given as a list of {type:"text", text} parts is
 * joined into one string with "\n" between parts (non-text parts are dropped)
 * before rendering, as llama.cpp's server does. Every string that comes from
 * `messages` or `tools` (contents, names, roles, tool arguments, dict keys) is
 * untrusted; literals of the template, bos/eos and `extra_vars` are trusted.
 * Taint is tracked per byte range through concatenation and output; functions
 * that transform a tainted string (strip, replace, slicing, upper, tojson...)
 * taint their whole result. The output lists the untrusted byte ranges so the
 * tokenizer never turns request text into special tokens.
 *
 * Errors: syntax errors give STRATA_E_TEMPLATE with "line L, column C: ...";
 * raise_exception(msg) gives STRATA_E_TEMPLATE with msg; runtime errors
 * (undefined attribute of undefined, type errors) give STRATA_E_TEMPLATE; a
 * template exceeding a template_limits bound gives STRATA_E_LIMIT naming the
 * bound.
 *
 * Ownership: a chat_template is owned by the caller (free with
 * template_free()); inputs are borrowed for the duration of the call.
 * Threading: a parsed chat_template is immutable; any number of threads may
 * render it concurrently (each render has its own state).
 */
#ifndef STRATA_TEMPLATE_H
#define STRATA_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/core/error.h"

struct chat_template;

struct template_inputs {
    const json_t *messages; /* borrowed: array of message objects (required) */
    const json_t
        *tools; /* borrowed: array, or NULL (then `tools` is none, as transformers passes) */
    bool add_generation_prompt; /* default false */
    const char *bos_token;      /* borrowed, NUL-terminated; NULL renders as "" */
    const char *eos_token;      /* borrowed, NUL-terminated; NULL renders as "" */
    const json_t *extra_vars; /* borrowed: object of extra globals (enable_thinking...), or NULL */
    time_t now;               /* strftime_now's clock; 0 = current local time */
};

struct template_limits {
    int max_depth;           /* nesting of statements, expressions and macro calls (default 200) */
    int64_t max_steps;       /* evaluated nodes + loop iterations (default 10,000,000) */
    size_t max_output_bytes; /* rendered text and any one string (default 16 MiB) */
    size_t max_memory_bytes; /* all values allocated during one render (default 512 MiB) */
    int64_t max_range;       /* range() length, as Jinja's sandbox MAX_RANGE (default 100,000) */
};

struct template_range {
    size_t offset; /* bytes into template_output.text */
    size_t length; /* bytes */
};

struct template_output {
    char *text;                       /* owned: NUL-terminated, len bytes */
    size_t len;                       /* bytes */
    struct template_range *untrusted; /* owned: sorted, non-overlapping, non-adjacent */
    size_t n_untrusted;
};

struct template_inputs template_inputs_default(void);
struct template_limits template_limits_default(void);

/* Parses template source (len bytes, need not be NUL-terminated). Returns
 * NULL and fills err (STRATA_E_TEMPLATE, with line and column) on syntax
 * errors. owned: free with template_free() */
struct chat_template *template_parse(const char *src, size_t len, struct strata_error *err);
void template_free(struct chat_template *t); /* NULL is a no-op */

/* Renders into *out (overwritten; free with template_output_free() even on
 * failure). lim may be NULL (defaults). Returns 0 or a negative STRATA_E_*. */
int template_render(const struct chat_template *t, const struct template_inputs *in,
                    const struct template_limits *lim, struct template_output *out,
                    struct strata_error *err);
void template_output_free(struct template_output *out); /* zeroes *out; NULL is a no-op */

/* ChatML fallback for models without a chat template (static string). */
const char *template_chatml_source(void);

#endif
