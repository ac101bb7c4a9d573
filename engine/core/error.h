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

/* X(NAME, value, text, http_status, openai_type, openai_code): openai_code
 * is the body's error.code, OpenAI's own string where it has one
 * (invalid_api_key, context_length_exceeded, rate_limit_exceeded,
 * invalid_value), else a snake_case name of the failure. */
#define STRATA_ERRORS(X)                                                                           \
    X(OK, 0, "ok", 200, "", "")                                                                    \
    X(NOMEM, -1, "out of memory", 503, "server_error", "out_of_memory")                            \
    X(IO, -2, "i/o error", 500, "server_error", "io_error")                                        \
    X(FORMAT, -3, "invalid file format", 400, "invalid_request_error", "invalid_format")           \
    X(INVALID, -4, "invalid argument", 400, "invalid_request_error", "invalid_value")              \
    X(UNSUPPORTED, -5, "unsupported", 400, "invalid_request_error", "unsupported")                 \
    X(RANGE, -6, "value out of range", 400, "invalid_request_error", "invalid_value")              \
    X(TEMPLATE, -7, "chat template error", 400, "invalid_request_error", "template_error")         \
    X(LIMIT, -8, "resource limit exceeded", 400, "invalid_request_error", "limit_exceeded")        \
    X(CONTEXT_LENGTH, -9, "context length exceeded", 400, "invalid_request_error",                 \
      "context_length_exceeded")                                                                   \
    X(AUTH, -10, "invalid api key", 401, "authentication_error", "invalid_api_key")                \
    X(NOT_FOUND, -11, "not found", 404, "not_found_error", "not_found")                            \
    X(METHOD, -12, "method not allowed", 405, "invalid_request_error", "method_not_allowed")       \
    X(TOO_LARGE, -13, "request body too large", 413, "invalid_request_error", "request_too_large") \
    X(QUEUE_FULL, -14, "server busy: queue full", 429, "rate_limit_error", "rate_limit_exceeded")  \
    X(UNAVAILABLE, -15, "service unavailable", 503, "server_error", "service_unavailable")         \
    X(CANCELLED, -16, "cancelled", 499, "server_error", "cancelled")                               \
    X(TIMEOUT, -17, "timed out", 504, "server_error", "timeout")                                   \
    X(INTERNAL, -18, "internal error", 500, "server_error", "internal_error")                      \
    X(TOKENIZER, -19, "tokenizer error", 400, "invalid_request_error", "tokenizer_error")          \
    X(CONFIG, -20, "invalid configuration", 400, "invalid_request_error", "invalid_configuration")

enum strata_error_code {
#define STRATA_ERR_ENUM(name, value, text, http, type, code) STRATA_E_##name = value,
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
const char *strata_error_openai_code(int code); /* "out_of_memory"; "internal_error" for unknown */

/* Abort only for bugs: prints file:line, the expression and a backtrace. */
#define STRATA_ASSERT(x)                                                                           \
    do {                                                                                           \
        if (!(x))                                                                                  \
            strata_assert_fail(__FILE__, __LINE__, #x);                                            \
    } while (0)
_Noreturn void strata_assert_fail(const char *file, int line, const char *expr);

#endif
