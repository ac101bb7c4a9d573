/* server/openai-check.h: the field readers every OpenAI request parser of
 * the server shares (openai.c, openai-ext.c, openai-tools.c,
 * openai-format.c): one error shape (the code, its message and the
 * offending field for error.param) and the optional-field readers.
 *
 *   struct openai_vctx v = {body, param, param_cap, err};
 *   double t;
 *   int rc = openai_get_num(&v, "temperature", 0, 2, &t); // 1 read, 0 absent, < 0 error
 *
 * JSON null counts as absent. An integer field takes a real with no
 * fraction (2.0), as OpenAI's parsers do. Messages name the field:
 * "'top_k' must be an integer", "'n' is 17; it must be between 1 and 16".
 * Threading: no state; any thread.
 */
#ifndef STRATA_SERVER_OPENAI_CHECK_H
#define STRATA_SERVER_OPENAI_CHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

struct openai_vctx {
    json_t *body;             /* borrowed: the object the fields are read from */
    char *param;              /* caller's buffer for error.param (may be NULL) */
    size_t cap;               /* bytes of param */
    struct strata_error *err; /* may be NULL */
};

/* Sets err (code, printf message) and param (p; "" for NULL); returns code. */
int openai_fail(struct strata_error *err, char *param, size_t cap, int code, const char *p,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The member `name` of o, NULL when absent or null. borrowed */
json_t *openai_field(json_t *o, const char *name);
/* x as an integer: a JSON integer, or a real with no fraction below 9e15. */
bool openai_json_int(json_t *x, int64_t *out);

/* Optional fields of v->body: 1 read into *out, 0 absent, or a negative
 * STRATA_E_INVALID (wrong type) / STRATA_E_RANGE (outside [lo, hi]). */
int openai_get_num(struct openai_vctx *v, const char *name, double lo, double hi, double *out);
int openai_get_int(struct openai_vctx *v, const char *name, int64_t lo, int64_t hi, int64_t *out);
int openai_get_bool(struct openai_vctx *v, const char *name, bool *out);

#endif
