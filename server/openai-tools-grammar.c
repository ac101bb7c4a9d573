/* server/openai-tools-grammar.c: the grammar of a forced tool_choice
 * ("required" or a named function): the output IS a call of a listed
 * function, written as the template's family writes calls
 * (toolcall_forced_form), its arguments valid against the function's
 * parameters schema (engine/grammar). See openai-tools.h. */
#include <stdio.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "engine/text/toolcall.h"
#include "server/openai-tools.h"
#include "server/openai.h"

/* A literal node; -1 for "" (left out of sequences); < -1 an error. */
static int lit(struct grammar_builder *b, const char *s, struct strata_error *err) {
    return s && *s ? grammar_lit(b, s, strlen(s), err) : -1;
}

/* seq of the nodes that are not -1 (at least one). */
static int seq(struct grammar_builder *b, const int *in, int n, struct strata_error *err) {
    int nodes[8], k = 0;
    for (int i = 0; i < n; i++) {
        if (in[i] < -1)
            return in[i];
        if (in[i] >= 0)
            nodes[k++] = in[i];
    }
    return k == 1 ? nodes[0] : grammar_seq(b, nodes, k, err);
}

/* One call of tool t (its index i for the error's param). */
static int call_node(struct grammar_builder *b, const struct toolcall_form *fm, json_t *t, size_t i,
                     char *param, size_t cap, struct strata_error *err) {
    json_t *fn = json_object_get(t, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = json_object_get(fn, "parameters");
    json_t *any = NULL;
    if (!json_is_object(params))
        params = any = json_pack("{s:s}", "type", "object");
    int args = params ? grammar_json_schema(b, params, err) : STRATA_E_NOMEM;
    json_decref(any);
    if (args < 0) {
        snprintf(param, cap, "tools[%zu].function.parameters", i);
        return args;
    }
    char head[256];
    if (fm->object) { /* {"name": "f", "arguments": ARGS} */
        snprintf(head, sizeof head, "{\"%s\": \"%s\", \"%s\": ", fm->name_key, name, fm->args_key);
        int parts[] = {lit(b, fm->call_open, err), lit(b, head, err), args, lit(b, "}", err),
                       lit(b, fm->call_close, err)};
        return seq(b, parts, 5, err);
    }
    snprintf(head, sizeof head, "%s%s%s", fm->call_open ? fm->call_open : "", name,
             fm->name_close ? fm->name_close : "");
    int parts[] = {lit(b, head, err), args, lit(b, fm->call_close, err)};
    return seq(b, parts, 3, err);
}

int openai_tools_grammar(struct openai_request *rq, const char *src, size_t len, char *param,
                         size_t cap, struct strata_error *err) {
    struct openai_chat_ext *x = rq->ext;
    if (!x || !x->tools ||
        (x->choice != OPENAI_TOOL_CHOICE_REQUIRED && x->choice != OPENAI_TOOL_CHOICE_FUNCTION))
        return 0;
    if (x->prefill) {
        snprintf(param, cap, "tool_choice");
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "a forced tool_choice cannot continue an assistant message "
                                "(prefill): the call would start inside its text");
    }
    if (rq->grammar) {
        snprintf(param, cap, "tool_choice");
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "a forced tool_choice cannot be combined with response_format");
    }
    struct toolcall_form fm;
    toolcall_forced_form(toolcall_detect(src, len), &fm);
    struct grammar_builder *b = grammar_builder_init(err);
    if (!b)
        return err && err->code ? err->code : STRATA_E_NOMEM;
    int rc = 0;
    int calls[128], n = 0; /* openai-tools.c: at most 128 tools */
    size_t i;
    json_t *t;
    json_array_foreach(x->tools, i, t) {
        const char *name =
            json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (x->choice == OPENAI_TOOL_CHOICE_FUNCTION && strcmp(name, x->forced) != 0)
            continue;
        if (n >= 128 || (calls[n] = call_node(b, &fm, t, i, param, cap, err)) < 0) {
            rc = n >= 128 ? STRATA_E_LIMIT : calls[n];
            goto out;
        }
        n++;
    }
    int one = n == 1 ? calls[0] : grammar_alt(b, calls, n, err);
    int body = one;
    /* parallel calls where the family writes several: call (sep call)* */
    if (one >= 0 && x->parallel && fm.sep) {
        int more[] = {lit(b, fm.sep, err), one};
        int next = seq(b, more, 2, err);
        /* at most 64 calls: the output parser's bound (toolcall.c MAX_CALLS) */
        int rep = next >= 0 ? grammar_repeat(b, next, 0, 63, err) : next;
        int both[] = {one, rep};
        body = rep >= 0 ? grammar_seq(b, both, 2, err) : rep;
    }
    int parts[] = {lit(b, fm.open, err), body, lit(b, fm.close, err)};
    int root = seq(b, parts, 3, err);
    if (root < 0) {
        rc = root;
        goto out;
    }
    if (!(rq->grammar = grammar_build(b, root, err)))
        rc = err && err->code ? err->code : STRATA_E_NOMEM;
out:
    grammar_builder_free(b);
    if (rc < 0 && !param[0])
        snprintf(param, cap, "tool_choice");
    return rc;
}
