/* engine/error.c: the error table and assert (see error.h). */
#include "engine/error.h"

#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct err_row {
    int code;
    const char *name;
    const char *text;
    int http;
    const char *type;
};

static const struct err_row err_table[] = {
#define STRATA_ERR_ROW(name, value, text, http, type) {value, #name, text, http, type},
    STRATA_ERRORS(STRATA_ERR_ROW)
#undef STRATA_ERR_ROW
};

static const struct err_row *err_find(int code) {
    for (size_t i = 0; i < sizeof(err_table) / sizeof(err_table[0]); i++)
        if (err_table[i].code == code)
            return &err_table[i];
    return NULL;
}

int strata_error_setv(struct strata_error *err, int code, const char *fmt, va_list ap) {
    if (!err)
        return code;
    err->code = code;
    if (fmt)
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
    else
        snprintf(err->message, sizeof(err->message), "%s", strata_error_text(code));
    return code;
}

int strata_error_set(struct strata_error *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strata_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void strata_error_prefix(struct strata_error *err, const char *fmt, ...) {
    if (!err)
        return;
    char pre[STRATA_ERROR_MSG_MAX];
    char old[STRATA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof(old));
    /* A long result keeps its head (the prefix, then the start of the old
     * message): truncation is intended, so the count is not checked. */
    int n = snprintf(err->message, sizeof(err->message), "%s: %s", pre, old);
    (void)n;
}

void strata_error_clear(struct strata_error *err) {
    if (!err)
        return;
    err->code = 0;
    err->message[0] = '\0';
}

const char *strata_error_text(int code) {
    const struct err_row *r = err_find(code);
    return r ? r->text : "unknown error";
}

const char *strata_error_name(int code) {
    const struct err_row *r = err_find(code);
    return r ? r->name : "UNKNOWN";
}

int strata_error_http_status(int code) {
    const struct err_row *r = err_find(code);
    return r ? r->http : 500;
}

const char *strata_error_openai_type(int code) {
    const struct err_row *r = err_find(code);
    return r ? r->type : "server_error";
}

void strata_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "strata: assertion failed at %s:%d: %s\n", file, line, expr);
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
    abort();
}
