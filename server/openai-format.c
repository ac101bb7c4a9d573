/* server/openai-format.c: structured output: `response_format` (chat and
 * completions) and llama-server's `json_schema` (completions) compiled into
 * the request's grammar (see openai.h). Runs on the HTTP thread: the
 * compile is bounded by the schema limits of engine/grammar (64 levels,
 * 4096 subschemas, 64 KiB of enum/const text) and the body size limit. */
#include <stdio.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "server/openai.h"
#include "server/openai-check.h"

/* openai_fail with a fixed message */
static int fail(struct strata_error *err, char *param, size_t cap, int code, const char *p,
                const char *msg) {
    return openai_fail(err, param, cap, code, p, "%s", msg);
}

/* Compiles schema (NULL: any JSON object) into *out. */
static int compile(const json_t *schema, const char *p, struct grammar **out, char *param,
                   size_t cap, struct strata_error *err) {
    struct grammar_builder *b = grammar_builder_init(err);
    if (!b)
        return STRATA_E_NOMEM;
    int root = schema ? grammar_json_schema(b, schema, err) : grammar_json_object(b, err);
    if (root >= 0 && !(*out = grammar_build(b, root, err)))
        root = err && err->code ? err->code : STRATA_E_NOMEM;
    grammar_builder_free(b);
    if (root < 0 && param && cap)
        snprintf(param, cap, "%s", p);
    return root < 0 ? root : 0;
}

int openai_parse_format(json_t *body, enum gen_route route, struct grammar **out, char *param,
                        size_t cap, struct strata_error *err) {
    *out = NULL;
    json_t *rf = json_object_get(body, "response_format");
    json_t *js = route == GEN_ROUTE_COMPLETION ? json_object_get(body, "json_schema") : NULL;
    if (json_is_null(rf))
        rf = NULL;
    if (json_is_null(js))
        js = NULL;
    if (rf && js)
        return fail(err, param, cap, STRATA_E_INVALID, "json_schema",
                    "give 'response_format' or 'json_schema', not both");
    if (js) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return fail(err, param, cap, STRATA_E_INVALID, "json_schema",
                        "'json_schema' must be a JSON Schema object");
        return compile(js, "json_schema", out, param, cap, err);
    }
    if (!rf)
        return 0;
    json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    if (!json_is_string(t))
        return fail(err, param, cap, STRATA_E_INVALID, "response_format",
                    "'response_format' must be an object with a string 'type'");
    const char *type = json_string_value(t);
    if (strcmp(type, "text") == 0)
        return 0;
    if (strcmp(type, "json_object") == 0)
        return compile(NULL, "response_format", out, param, cap, err);
    if (strcmp(type, "json_schema") != 0) {
        if (param && cap)
            snprintf(param, cap, "%s", "response_format");
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "response_format type '%.*s' is not one of text, json_object, "
                                "json_schema",
                                strata_utf8_cut(type, 40), type);
    }
    json_t *spec = json_object_get(rf, "json_schema");
    if (!json_is_object(spec))
        return fail(err, param, cap, STRATA_E_INVALID, "response_format",
                    "response_format of type 'json_schema' needs a 'json_schema' object "
                    "({\"name\": ..., \"schema\": {...}})");
    json_t *name = json_object_get(spec, "name"), *strict = json_object_get(spec, "strict");
    if (name && !json_is_string(name))
        return fail(err, param, cap, STRATA_E_INVALID, "response_format",
                    "response_format.json_schema.name must be a string");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return fail(err, param, cap, STRATA_E_INVALID, "response_format",
                    "response_format.json_schema.strict must be a boolean");
    json_t *schema = json_object_get(spec, "schema");
    if (json_is_null(schema))
        schema = NULL;
    if (schema && !json_is_object(schema) && !json_is_boolean(schema))
        return fail(err, param, cap, STRATA_E_INVALID, "response_format",
                    "response_format.json_schema.schema must be a JSON Schema object");
    int rc = compile(schema, "response_format", out, param, cap, err);
    if (rc < 0 && err)
        strata_error_prefix(err, "response_format.json_schema.schema");
    return rc;
}
