/* engine/core/error.c: the error table and assert (see error.h). */
#include "engine/core/error.h"

#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct err_row {
    int code;
    const char *name;
    const char *text;
};

static const struct err_row err_table[] = {
#define STRATA_ERR_ROW(name, value, text) {value, #name, text},
    STRATA_ERRORS(STRATA_ERR_ROW)
#undef STRATA_ERR_ROW
};

static const struct err_row *err_find(int code) {
    for (size_t i = 0; i < sizeof(err_table) / sizeof(err_table[0]); i++)
        if (err_table[i].code == code)
            return &err_table[i];
    return NULL;
}

/* Start of the character that holds byte i of s (i itself when it is not a
 * continuation byte, or when the continuation bytes lead nowhere valid). */
static size_t utf8_char_start(const unsigned char *s, size_t i) {
    size_t k = i;
    while (k > 0 && i - k < 3 && (s[k] & 0xC0) == 0x80)
        k--;
    return (s[k] & 0xC0) == 0xC0 ? k : i;
}

/* Length of the UTF-8 sequence lead byte c announces (1 for ASCII and for
 * bytes that cannot lead one). */
static size_t utf8_seq_len(unsigned char c) {
    return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
}

int strata_utf8_cut(const char *str, size_t max) {
    const unsigned char *s = (const unsigned char *)str;
    if (max > INT32_MAX)
        max = INT32_MAX;
    size_t n = strnlen(str, max);
    if (n < max || s[n] == '\0') /* the whole string fits */
        return (int)n;
    /* s[n] is the first byte left out: drop the character it belongs to if it
     * started inside the kept part */
    size_t k = utf8_char_start(s, n);
    if (k < n && k + utf8_seq_len(s[k]) > n)
        n = k;
    return (int)n;
}

int strata_error_setv(struct strata_error *err, int code, const char *fmt, va_list ap) {
    if (!err)
        return code;
    err->code = code;
    int n;
    if (fmt)
        n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
    else
        n = snprintf(err->message, sizeof(err->message), "%s", strata_error_text(code));
    if (n >= (int)sizeof(err->message)) {
        /* cut: do not end in half a character (the message may become JSON) */
        const unsigned char *m = (const unsigned char *)err->message;
        size_t end = sizeof(err->message) - 1;
        size_t k = utf8_char_start(m, end - 1);
        if (k + utf8_seq_len(m[k]) > end)
            err->message[k] = '\0';
    }
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
     * message): truncation is intended. Composed by hand, not with
     * snprintf("%s: %s"), which gcc -O2 reports as a possible truncation. */
    size_t cap = sizeof(err->message) - 1, n = 0;
    const char *parts[3] = {pre, ": ", old};
    for (int i = 0; i < 3 && n < cap; i++) {
        size_t k = strnlen(parts[i], cap - n);
        memcpy(err->message + n, parts[i], k);
        n += k;
    }
    err->message[n] = '\0';
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

void strata_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "strata: assertion failed at %s:%d: %s\n", file, line, expr);
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
    abort();
}
