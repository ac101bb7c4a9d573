/* engine/core/error.h: error codes as values, one table for all of strata.
 *
 *   struct strata_error err = {0};
 *   struct gguf_file *f = gguf_open(path, &err);
 *   if (!f) fprintf(stderr, "%s\n", err.message);
 *
 * Every fallible function returns int (0 ok, negative STRATA_E_* on failure) or
 * NULL (constructors) and takes a caller-owned `struct strata_error *err` last,
 * which may be NULL. The table below gives each code its name and text; the
 * server maps codes to HTTP statuses and OpenAI errors (server/errors.h).
 *
 * Threading: all functions are thread-safe (no shared state).
 */
#ifndef STRATA_ERROR_H
#define STRATA_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* X(NAME, value, text): every failure strata has a name for. What the
 * server answers for each (HTTP status, OpenAI error.type and error.code) is
 * the server's table (server/errors.h), which has a row for every code. */
#define STRATA_ERRORS(X)                                                                           \
    X(OK, 0, "ok")                                                                                 \
    X(NOMEM, -1, "out of memory")                                                                  \
    X(IO, -2, "i/o error")                                                                         \
    X(FORMAT, -3, "invalid file format")                                                           \
    X(INVALID, -4, "invalid argument")                                                             \
    X(UNSUPPORTED, -5, "unsupported")                                                              \
    X(RANGE, -6, "value out of range")                                                             \
    X(TEMPLATE, -7, "chat template error")                                                         \
    X(LIMIT, -8, "resource limit exceeded")                                                        \
    X(CONTEXT_LENGTH, -9, "context length exceeded")                                               \
    X(AUTH, -10, "invalid api key")                                                                \
    X(NOT_FOUND, -11, "not found")                                                                 \
    X(METHOD, -12, "method not allowed")                                                           \
    X(TOO_LARGE, -13, "request body too large")                                                    \
    X(QUEUE_FULL, -14, "server busy: queue full")                                                  \
    X(UNAVAILABLE, -15, "service unavailable")                                                     \
    X(CANCELLED, -16, "cancelled")                                                                 \
    X(TIMEOUT, -17, "timed out")                                                                   \
    X(INTERNAL, -18, "internal error")                                                             \
    X(TOKENIZER, -19, "tokenizer error")                                                           \
    X(CONFIG, -20, "invalid configuration")

enum strata_error_code {
#define STRATA_ERR_ENUM(name, value, text) STRATA_E_##name = value,
    STRATA_ERRORS(STRATA_ERR_ENUM)
#undef STRATA_ERR_ENUM
};

/* The number of codes in the table (server/errors.c checks its rows). */
#define STRATA_ERR_ONE(name, value, text) +1
enum { STRATA_ERROR_COUNT = 0 STRATA_ERRORS(STRATA_ERR_ONE) };
#undef STRATA_ERR_ONE

#define STRATA_ERROR_MSG_MAX 512

struct strata_error {
    int code;                           /* STRATA_E_*; 0 when no error */
    char message[STRATA_ERROR_MSG_MAX]; /* human-readable, NUL-terminated */
};

/* Sets err (if not NULL) and returns code, so `return strata_error_set(...)` works.
 * A message longer than the buffer is cut at a UTF-8 character boundary. */
int strata_error_set(struct strata_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int strata_error_setv(struct strata_error *err, int code, const char *fmt, va_list ap);
/* Prefixes the existing message with "prefix: " (context on the way up). */
void strata_error_prefix(struct strata_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void strata_error_clear(struct strata_error *err);

/* Bytes of s (NUL-terminated) kept when it is cut to at most max bytes
 * without splitting a UTF-8 character: for "%.*s" in messages, where "%.40s"
 * may cut a code point in two and the message then is not UTF-8 (and cannot
 * become a JSON string). Invalid bytes are left as they are. */
int strata_utf8_cut(const char *s, size_t max);

const char *strata_error_text(int code); /* "out of memory"; "unknown error" */
const char *strata_error_name(int code); /* "NOMEM" */

/* Abort only for bugs: prints file:line, the expression and a backtrace. */
#define STRATA_ASSERT(x)                                                                           \
    do {                                                                                           \
        if (!(x))                                                                                  \
            strata_assert_fail(__FILE__, __LINE__, #x);                                            \
    } while (0)
_Noreturn void strata_assert_fail(const char *file, int line, const char *expr);

#endif
