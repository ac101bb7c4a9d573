/* server/errors.c: engine error codes as HTTP and OpenAI errors (errors.h). */
#include "server/errors.h"

#include <stddef.h>

#include "engine/core/error.h"

struct http_error_row {
    int code;
    int status;
    const char *type;
    const char *oa_code;
};

static const struct http_error_row rows[] = {
#define ROW(name, status, type, oa) {STRATA_E_##name, status, type, oa},
    STRATA_HTTP_ERRORS(ROW)
#undef ROW
};
_Static_assert(sizeof rows / sizeof rows[0] == STRATA_ERROR_COUNT,
               "server/errors.h needs a row for every code of engine/core/error.h");

static const struct http_error_row *find(int code) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].code == code)
            return &rows[i];
    return NULL;
}

int http_error_status(int code) {
    const struct http_error_row *r = find(code);
    return r ? r->status : 500;
}

const char *http_error_type(int code) {
    const struct http_error_row *r = find(code);
    return r ? r->type : "server_error";
}

const char *http_error_code(int code) {
    const struct http_error_row *r = find(code);
    return r && code != 0 ? r->oa_code : "internal_error";
}
