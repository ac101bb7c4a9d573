/* server/respond.c: JSON and error responses, request-body checks. */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/server-impl.h"

int sbuf_append(struct sbuf *b, const void *data, size_t n) {
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return STRATA_E_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void sbuf_free(struct sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* error.code: OpenAI's own strings where one exists, else the lower-case
 * table name ("too_large"). */
static const char *error_code_string(int code, char *buf, size_t cap) {
    switch (code) {
    case STRATA_E_AUTH:
        return "invalid_api_key";
    case STRATA_E_CONTEXT_LENGTH:
        return "context_length_exceeded";
    case STRATA_E_QUEUE_FULL:
        return "rate_limit_exceeded";
    default:
        break;
    }
    const char *name = strata_error_name(code);
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++)
        buf[i] = (char)tolower((unsigned char)name[i]);
    buf[i] = '\0';
    return buf;
}

char *http_error_json(int code, const char *message, const char *param) {
    char cbuf[64];
    json_t *err = json_pack("{s:s, s:s, s:o, s:s}", "message",
                            message && *message ? message : strata_error_text(code), "type",
                            strata_error_openai_type(code), "param",
                            param && *param ? json_string(param) : json_null(), "code",
                            error_code_string(code, cbuf, sizeof(cbuf)));
    if (!err)
        return NULL;
    json_t *root = json_pack("{s:o}", "error", err);
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static enum metrics_route metrics_route_of(const struct exchange *ex) {
    return ex->route;
}

enum MHD_Result http_respond_json(struct exchange *ex, int status, char *body) {
    if (!body)
        return MHD_NO; /* out of memory: MHD closes the connection */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result rc = MHD_queue_response(ex->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    ex->phase = PHASE_RESPONDED;
    metrics_count_request(ex->srv->metrics, metrics_route_of(ex), status);
    return rc;
}

enum MHD_Result http_respond_error(struct exchange *ex, int code, const char *message,
                                   const char *param, const char *allow) {
    char *body = http_error_json(code, message, param);
    if (!body)
        return MHD_NO;
    int status = strata_error_http_status(code);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (code == STRATA_E_AUTH)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(ex->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    ex->phase = PHASE_RESPONDED;
    metrics_count_request(ex->srv->metrics, metrics_route_of(ex), status);
    return rc;
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF. */
bool http_utf8_valid(const char *str, size_t n, size_t *bad_offset) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned min, cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, min = 0x80, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, min = 0x800, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, min = 0x10000, cp = c & 0x07;
        } else {
            goto bad;
        }
        if (n - i < len)
            goto bad;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                goto bad;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            goto bad;
        i += len;
    }
    return true;
bad:
    if (bad_offset)
        *bad_offset = i;
    return false;
}

bool http_content_type_is_json(const char *ct) {
    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof(want) - 1))
        return false;
    const char *rest = ct + sizeof(want) - 1;
    while (*rest == ' ')
        rest++;
    return *rest == '\0' || *rest == ';';
}
