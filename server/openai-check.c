/* server/openai-check.c: the shared request-field readers (openai-check.h). */
#include "server/openai-check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

int openai_fail(struct strata_error *err, char *param, size_t cap, int code, const char *p,
                const char *fmt, ...) {
    if (param && cap)
        snprintf(param, cap, "%s", p ? p : "");
    va_list ap;
    va_start(ap, fmt);
    strata_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

json_t *openai_field(json_t *o, const char *name) {
    json_t *v = json_object_get(o, name);
    return json_is_null(v) ? NULL : v;
}

bool openai_json_int(json_t *x, int64_t *out) {
    if (json_is_integer(x)) {
        *out = json_integer_value(x);
        return true;
    }
    if (json_is_real(x) && json_real_value(x) == floor(json_real_value(x)) &&
        fabs(json_real_value(x)) < 9e15) {
        *out = (int64_t)json_real_value(x);
        return true;
    }
    return false;
}

int openai_get_num(struct openai_vctx *v, const char *name, double lo, double hi, double *out) {
    json_t *x = openai_field(v->body, name);
    if (!x)
        return 0;
    if (!json_is_number(x))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, name,
                           "'%s' must be a number", name);
    double d = json_number_value(x);
    if (!(d >= lo && d <= hi))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, name,
                           "'%s' is %g; it must be between %g and %g", name, d, lo, hi);
    *out = d;
    return 1;
}

int openai_get_int(struct openai_vctx *v, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    json_t *x = openai_field(v->body, name);
    if (!x)
        return 0;
    int64_t i;
    if (!openai_json_int(x, &i))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, name,
                           "'%s' must be an integer", name);
    if (i < lo || i > hi)
        return openai_fail(v->err, v->param, v->cap, STRATA_E_RANGE, name,
                           "'%s' is %lld; it must be between %lld and %lld", name, (long long)i,
                           (long long)lo, (long long)hi);
    *out = i;
    return 1;
}

int openai_get_bool(struct openai_vctx *v, const char *name, bool *out) {
    json_t *x = openai_field(v->body, name);
    if (!x)
        return 0;
    if (!json_is_boolean(x))
        return openai_fail(v->err, v->param, v->cap, STRATA_E_INVALID, name,
                           "'%s' must be a boolean", name);
    *out = json_is_true(x);
    return 1;
}
