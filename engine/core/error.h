/* engine/core/error.h: error codes as values, one table for all of strata.
 *
 *   struct strata_error err = {0};
 *   struct gguf_file *f = gguf_open(path, &err);
 *   if (!f) fprintf(stderr, "%s\n", err.message);
 *
 * Every fallible function returns int (0 ok, negative STRATA_E_* on failure) or
 * NULL (constructors) and takes a caller-owned `struct strata_error *err` last,
 * which may be NULL. The table below gives each code its text, the HTTP status
 * the server answers with, and the OpenAI `error.type`.
 *
 * Threading: all functions are thread-safe (no shared state).
 */
#ifndef STRATA_ERROR_H
#define STRATA_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* X(NAME, value, text, http_status, openai_type) */
#define STRATA_ERRORS(X)                                                                           \
    X(OK, 0, "ok", 200, "")                                                                        \
    X(NOMEM, -1, "out of memory", 503, "server_error")                                             \
    X(IO, -2, "i/o error", 500, "server_error")                                                    \
    X(FORMAT, -3, "invalid file format", 400, "invalid_request_error")                             \
    X(INVALID, -4, "invalid argument", 400, "invalid_request_error")                               \
    X(UNSUPPORTED, -5, "unsupported", 400, "invalid_request_error")                                \
    X(RANGE, -6, "value out of range", 400, "invalid_request_error")                               \
    X(TEMPLATE, -7, "chat template error", 400, "invalid_request_error")                           \
    X(LIMIT, -8, "resource limit exceeded", 400, "invalid_request_error")                          \
    X(CONTEXT_LENGTH, -9, "context length exceeded", 400, "invalid_request_error")                 \
    X(AUTH, -10, "invalid api key", 401, "authentication_error")                                   \
    X(NOT_FOUND, -11, "not found", 404, "not_found_error")                                         \
    X(METHOD, -12, "method not allowed", 405, "invalid_request_error")                             \
    X(TOO_LARGE, -13, "request body too large", 413, "invalid_request_error")                      \
    X(QUEUE_FULL, -14, "server busy: queue full", 429, "rate_limit_error")                         \
    X(UNAVAILABLE, -15, "service unavailable", 503, "server_error")                                \
    X(CANCELLED, -16, "cancelled", 499, "server_error")                                            \
    X(TIMEOUT, -17, "timed out", 504, "server_error")                                              \
    X(INTERNAL, -18, "internal error", 500, "server_error")                                        \
    X(TOKENIZER, -19, "tokenizer error", 400, "invalid_request_error")                             \
    X(CONFIG, -20, "invalid configuration", 400, "invalid_request_error")

enum strata_error_code {
#define STRATA_ERR_ENUM(name, value, text, http, type) STRATA_E_##name = value,
    STRATA_ERRORS(STRATA_ERR_ENUM)
#undef STRATA_ERR_ENUM
};

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

const char *strata_error_text(int code);        /* "out of memory"; "unknown error" */
const char *strata_error_name(int code);        /* "NOMEM" */
int strata_error_http_status(int code);         /* 500 for unknown codes */
const char *strata_error_openai_type(int code); /* "server_error" for unknown codes */

/* Abort only for bugs: prints file:line, the expression and a backtrace. */
#define STRATA_ASSERT(x)                                                                           \
    do {                                                                                           \
        if (!(x))                                                                                  \
            strata_assert_fail(__FILE__, __LINE__, #x);                                            \
    } while (0)
_Noreturn void strata_assert_fail(const char *file, int line, const char *expr);

#endif
