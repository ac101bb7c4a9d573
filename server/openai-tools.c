/* server/openai-tools.c: validation and template inputs of the tool and
 * reasoning fields of a chat request (see openai-tools.h). */
#include "server/openai-tools.h"
#include "server/openai-check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session/session.h"
#include "server/openai.h"

/* OpenAI accepts at most 128 tools in one request. */
#define TOOLS_MAX 128

/* OpenAI's function names: [a-zA-Z0-9_-]{1,64}. */
static bool good_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > OPENAI_TOOL_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int check_tools(json_t *tools, char *param, size_t cap, struct strata_error *err) {
    char p[96];
    if (!json_is_array(tools))
        return openai_fail(err, param, cap, STRATA_E_INVALID, "tools", "'tools' must be an array");
    if (json_array_size(tools) > TOOLS_MAX)
        return openai_fail(err, param, cap, STRATA_E_RANGE, "tools",
                           "'tools' has %zu entries; at most %d", json_array_size(tools),
                           TOOLS_MAX);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be an object", p);
        snprintf(p, sizeof p, "tools[%zu].type", i);
        json_t *type = json_object_get(t, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be \"function\"", p);
        snprintf(p, sizeof p, "tools[%zu].function", i);
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be an object", p);
        snprintf(p, sizeof p, "tools[%zu].function.name", i);
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s is required (a string)",
                               p);
        if (!good_name(json_string_value(name)))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                               "%s must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'", p);
        for (size_t k = 0; k < i; k++) {
            json_t *o =
                json_object_get(json_object_get(json_array_get(tools, k), "function"), "name");
            if (strcmp(json_string_value(o), json_string_value(name)) == 0)
                return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                                   "%s '%s' is also the name of tools[%zu]", p,
                                   json_string_value(name), k);
        }
        json_t *d = openai_field(fn, "description");
        snprintf(p, sizeof p, "tools[%zu].function.description", i);
        if (d && !json_is_string(d))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be a string", p);
        json_t *params = openai_field(fn, "parameters");
        snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
        if (params && !json_is_object(params))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                               "%s must be a JSON Schema object", p);
        json_t *strict = openai_field(fn, "strict");
        snprintf(p, sizeof p, "tools[%zu].function.strict", i);
        if (strict && !json_is_boolean(strict))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be a boolean", p);
    }
    return 0;
}

static bool has_tool(json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *n = json_object_get(json_object_get(t, "function"), "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0)
            return true;
    }
    return false;
}

static int parse_choice(json_t *body, json_t *tools, struct openai_chat_ext *x, char *param,
                        size_t cap, struct strata_error *err) {
    json_t *tc = openai_field(body, "tool_choice");
    x->choice = tools ? OPENAI_TOOL_CHOICE_AUTO : OPENAI_TOOL_CHOICE_NONE;
    if (!tc)
        return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "none") == 0) {
            x->choice = OPENAI_TOOL_CHOICE_NONE;
            return 0;
        }
        if (strcmp(s, "auto") == 0)
            x->choice = OPENAI_TOOL_CHOICE_AUTO;
        else if (strcmp(s, "required") == 0)
            x->choice = OPENAI_TOOL_CHOICE_REQUIRED;
        else
            return openai_fail(err, param, cap, STRATA_E_INVALID, "tool_choice",
                               "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                               "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
            return openai_fail(err, param, cap, STRATA_E_INVALID, "tool_choice.type",
                               "'tool_choice.type' must be \"function\"");
        json_t *name = json_object_get(json_object_get(tc, "function"), "name");
        if (!json_is_string(name))
            return openai_fail(err, param, cap, STRATA_E_INVALID, "tool_choice.function.name",
                               "'tool_choice.function.name' must be a string");
        if (!tools || !has_tool(tools, json_string_value(name)))
            return openai_fail(err, param, cap, STRATA_E_INVALID, "tool_choice.function.name",
                               "tool_choice names '%s', which is not one of 'tools'",
                               good_name(json_string_value(name)) ? json_string_value(name) : "?");
        x->choice = OPENAI_TOOL_CHOICE_FUNCTION;
        snprintf(x->forced, sizeof x->forced, "%s", json_string_value(name));
    } else {
        return openai_fail(err, param, cap, STRATA_E_INVALID, "tool_choice",
                           "'tool_choice' must be a string or an object");
    }
    if (!tools)
        return openai_fail(err, param, cap, STRATA_E_INVALID, "tool_choice",
                           "'tool_choice' is only allowed when 'tools' are specified");
    return 0;
}

int openai_check_tool_fields(json_t *m, size_t i, char *param, size_t cap,
                             struct strata_error *err) {
    char p[128];
    const char *role = json_string_value(json_object_get(m, "role"));
    if (openai_field(m, "function_call")) {
        snprintf(p, sizeof p, "messages[%zu].function_call", i);
        return openai_fail(err, param, cap, STRATA_E_UNSUPPORTED, p,
                           "%s (the deprecated functions API) is not supported; use tool_calls", p);
    }
    json_t *calls = openai_field(m, "tool_calls");
    if (calls && strcmp(role, "assistant") != 0) {
        snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
        return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                           "%s is only allowed on assistant messages", p);
    }
    if (calls) {
        snprintf(p, sizeof p, "messages[%zu].tool_calls", i);
        if (!json_is_array(calls))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be an array", p);
        size_t j;
        json_t *c;
        json_array_foreach(calls, j, c) {
            snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, j);
            if (!json_is_object(c))
                return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be an object", p);
            snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].id", i, j);
            json_t *id = json_object_get(c, "id");
            if (!json_is_string(id) || json_string_length(id) == 0 || json_string_length(id) > 256)
                return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                                   "%s must be a string of 1 to 256 bytes", p);
            snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].type", i, j);
            json_t *type = json_object_get(c, "type");
            if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
                return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be \"function\"",
                                   p);
            snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].function", i, j);
            json_t *fn = json_object_get(c, "function");
            if (!json_is_object(fn))
                return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be an object", p);
            snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].function.name", i, j);
            json_t *name = json_object_get(fn, "name");
            if (!json_is_string(name) || !good_name(json_string_value(name)))
                return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                                   "%s must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'",
                                   p);
            snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu].function.arguments", i, j);
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_object(args))
                continue; /* already parsed (transformers' own shape) */
            if (!json_is_string(args))
                return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                                   "%s must be a string holding a JSON object", p);
            json_error_t je;
            json_t *o =
                json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &je);
            bool obj = json_is_object(o);
            json_decref(o);
            if (!obj)
                return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                                   "%s is not a JSON object: %s", p,
                                   o ? "another JSON value" : je.text);
        }
    }
    if (strcmp(role, "tool") == 0) {
        snprintf(p, sizeof p, "messages[%zu].tool_call_id", i);
        json_t *id = json_object_get(m, "tool_call_id");
        if (!json_is_string(id))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                               "%s is required on a tool message (a string)", p);
        snprintf(p, sizeof p, "messages[%zu].name", i);
        json_t *name = openai_field(m, "name");
        if (name && !json_is_string(name))
            return openai_fail(err, param, cap, STRATA_E_INVALID, p, "%s must be a string", p);
    }
    return 0;
}

/* A tool message answers a call an earlier assistant message made. */
static int check_tool_ids(json_t *msgs, char *param, size_t cap, struct strata_error *err) {
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (strcmp(json_string_value(json_object_get(m, "role")), "tool") != 0)
            continue;
        const char *id = json_string_value(json_object_get(m, "tool_call_id"));
        bool found = false;
        for (size_t k = i; k-- > 0 && !found;) {
            json_t *calls = openai_field(json_array_get(msgs, k), "tool_calls");
            size_t j;
            json_t *c;
            json_array_foreach(calls, j, c) found |=
                strcmp(json_string_value(json_object_get(c, "id")), id) == 0;
        }
        if (!found) {
            char p[64];
            snprintf(p, sizeof p, "messages[%zu].tool_call_id", i);
            return openai_fail(err, param, cap, STRATA_E_INVALID, p,
                               "%s does not match the id of any tool call of an earlier assistant "
                               "message",
                               p);
        }
    }
    return 0;
}

/* Names a template reads itself: kwargs may not replace them. */
static const char *const reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token",
                                       "eos_token"};

int openai_chat_ext_parse(json_t *body, json_t *msgs, struct openai_chat_ext **out, char *param,
                          size_t cap, struct strata_error *err) {
    *out = NULL;
    struct openai_chat_ext *x = calloc(1, sizeof *x);
    if (!x)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    x->parallel = true;
    int rc;
    json_t *tools = openai_field(body, "tools");
    if (tools && (rc = check_tools(tools, param, cap, err)) < 0)
        goto fail;
    if (tools && json_array_size(tools) == 0)
        tools = NULL; /* an empty list is no tools */
    if ((rc = parse_choice(body, tools, x, param, cap, err)) < 0)
        goto fail;
    if (tools && x->choice != OPENAI_TOOL_CHOICE_NONE) {
        x->tools = json_incref(tools);
        x->n_tools = json_array_size(tools);
    }
    json_t *ptc = openai_field(body, "parallel_tool_calls");
    if (ptc && !json_is_boolean(ptc)) {
        rc = openai_fail(err, param, cap, STRATA_E_INVALID, "parallel_tool_calls",
                         "'parallel_tool_calls' must be a boolean");
        goto fail;
    }
    x->parallel = !ptc || json_is_true(ptc);
    if ((rc = check_tool_ids(msgs, param, cap, err)) < 0)
        goto fail;
    json_t *kw = openai_field(body, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw)) {
            rc = openai_fail(err, param, cap, STRATA_E_INVALID, "chat_template_kwargs",
                             "'chat_template_kwargs' must be an object");
            goto fail;
        }
        for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
            if (json_object_get(kw, reserved[r])) {
                char p[64];
                snprintf(p, sizeof p, "chat_template_kwargs.%s", reserved[r]);
                rc = openai_fail(
                    err, param, cap, STRATA_E_INVALID, p,
                    "'%s' is set by the server and cannot be a chat_template_kwargs key",
                    reserved[r]);
                goto fail;
            }
        if (!(x->extra_vars = json_deep_copy(kw))) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
            goto fail;
        }
    }
    json_t *re = openai_field(body, "reasoning_effort");
    if (re) {
        static const char *const efforts[] = {"none", "minimal", "low", "medium", "high"};
        bool ok = false;
        for (size_t e = 0; json_is_string(re) && e < sizeof efforts / sizeof efforts[0]; e++)
            ok |= strcmp(json_string_value(re), efforts[e]) == 0;
        if (!ok) {
            rc = openai_fail(err, param, cap, STRATA_E_INVALID, "reasoning_effort",
                             "'reasoning_effort' must be one of \"none\", \"minimal\", \"low\", "
                             "\"medium\", \"high\"");
            goto fail;
        }
        snprintf(x->effort, sizeof x->effort, "%s", json_string_value(re));
    }
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    x->prefill = strcmp(json_string_value(json_object_get(last, "role")), "assistant") == 0 &&
                 !openai_field(last, "tool_calls") &&
                 json_is_string(openai_field(last, "content")) &&
                 json_string_length(openai_field(last, "content")) > 0;
    *out = x;
    return 0;
fail:
    openai_chat_ext_free(x);
    return rc;
}

void openai_chat_ext_free(struct openai_chat_ext *x) {
    if (!x)
        return;
    json_decref(x->tools);
    json_decref(x->extra_vars);
    free(x);
}

int openai_chat_ext_check_template(struct openai_chat_ext *x, json_t *msgs, const char *src,
                                   size_t len, char *param, size_t cap, struct strata_error *err) {
    if (x && !memmem(src, len, "tool_calls", strlen("tool_calls"))) {
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            if (openai_field(m, "tool_calls") && !openai_field(m, "content") &&
                json_object_set_new(m, "content", json_string("")) < 0)
                return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        }
    }
    if (!x || !x->effort[0])
        return 0;
    if (!memmem(src, len, "reasoning_effort", strlen("reasoning_effort")))
        return openai_fail(
            err, param, cap, STRATA_E_UNSUPPORTED, "reasoning_effort",
            "'reasoning_effort' is not supported by this model: its chat template has "
            "no reasoning_effort variable");
    if (!x->extra_vars && !(x->extra_vars = json_object()))
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    /* an explicit chat_template_kwargs.reasoning_effort wins */
    if (!json_object_get(x->extra_vars, "reasoning_effort") &&
        json_object_set_new(x->extra_vars, "reasoning_effort", json_string(x->effort)) < 0)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    return 0;
}

json_t *openai_chat_messages(json_t *msgs) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *calls = openai_field(m, "tool_calls");
        bool need = !openai_field(m, "content") || calls;
        if (!need) {
            if (json_array_append(out, m) < 0)
                goto fail;
            continue;
        }
        json_t *x = json_copy(m);
        if (!x || json_array_append_new(out, x) < 0)
            goto fail;
        if (!calls) {
            if (json_object_set_new(x, "content", json_string("")) < 0)
                goto fail;
            continue;
        }
        /* tool_calls with arguments as objects (the rest of each call kept) */
        json_t *nc = json_array();
        if (!nc || json_object_set_new(x, "tool_calls", nc) < 0)
            goto fail;
        size_t j;
        json_t *c;
        json_array_foreach(calls, j, c) {
            json_t *cc = json_deep_copy(c);
            if (!cc || json_array_append_new(nc, cc) < 0)
                goto fail;
            json_t *fn = json_object_get(cc, "function");
            json_t *a = json_object_get(fn, "arguments");
            if (json_is_string(a)) {
                json_t *o = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
                if (!o || json_object_set_new(fn, "arguments", o) < 0)
                    goto fail;
            }
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

void openai_session_input(const struct openai_request *rq, struct session_input *in) {
    memset(in, 0, sizeof *in);
    in->messages = rq->messages;
    in->tools = rq->ext ? rq->ext->tools : NULL;
    in->extra_vars = rq->ext ? rq->ext->extra_vars : NULL;
    in->continue_last = rq->ext && rq->ext->prefill;
}
