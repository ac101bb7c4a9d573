/* server/errors.h: what the server answers for each engine error code: the
 * HTTP status, OpenAI's error.type and error.code.
 *
 *   int status = http_error_status(STRATA_E_QUEUE_FULL);   // 429
 *
 * One row per code of engine/core/error.h's table (errors.c checks the
 * count at compile time and test-http every code). error.code is OpenAI's
 * own string where it has one (invalid_api_key, context_length_exceeded,
 * rate_limit_exceeded, invalid_value), else a snake_case name of the
 * failure. Threading: read-only data, any thread.
 */
#ifndef STRATA_SERVER_ERRORS_H
#define STRATA_SERVER_ERRORS_H

/* X(NAME, http_status, openai_type, openai_code) */
#define STRATA_HTTP_ERRORS(X)                                                                      \
    X(OK, 200, "", "")                                                                             \
    X(NOMEM, 503, "server_error", "out_of_memory")                                                 \
    X(IO, 500, "server_error", "io_error")                                                         \
    X(FORMAT, 400, "invalid_request_error", "invalid_format")                                      \
    X(INVALID, 400, "invalid_request_error", "invalid_value")                                      \
    X(UNSUPPORTED, 400, "invalid_request_error", "unsupported")                                    \
    X(RANGE, 400, "invalid_request_error", "invalid_value")                                        \
    X(TEMPLATE, 400, "invalid_request_error", "template_error")                                    \
    X(LIMIT, 400, "invalid_request_error", "limit_exceeded")                                       \
    X(CONTEXT_LENGTH, 400, "invalid_request_error", "context_length_exceeded")                     \
    X(AUTH, 401, "authentication_error", "invalid_api_key")                                        \
    X(NOT_FOUND, 404, "not_found_error", "not_found")                                              \
    X(METHOD, 405, "invalid_request_error", "method_not_allowed")                                  \
    X(TOO_LARGE, 413, "invalid_request_error", "request_too_large")                                \
    X(QUEUE_FULL, 429, "rate_limit_error", "rate_limit_exceeded")                                  \
    X(UNAVAILABLE, 503, "server_error", "service_unavailable")                                     \
    X(CANCELLED, 499, "server_error", "cancelled")                                                 \
    X(TIMEOUT, 504, "server_error", "timeout")                                                     \
    X(INTERNAL, 500, "server_error", "internal_error")                                             \
    X(TOKENIZER, 400, "invalid_request_error", "tokenizer_error")                                  \
    X(CONFIG, 400, "invalid_request_error", "invalid_configuration")

int http_error_status(int code);       /* 500 for unknown codes */
const char *http_error_type(int code); /* "server_error" for unknown codes */
const char *http_error_code(int code); /* "out_of_memory"; "internal_error" for unknown and 0 */

#endif
