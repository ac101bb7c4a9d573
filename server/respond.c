/* server/respond.c: JSON and error responses, request-body checks. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/errors.h"
#include "server/server-impl.h"
#include "engine/core/buf.h"

int sbuf_append(struct sbuf *b, const void *data, size_t n) {
    return strata_append(&b->p, &b->len, &b->cap, data, n) < 0 ? STRATA_E_NOMEM : 0;
}

void sbuf_free(struct sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* error.code: the table's column (engine/core/error.h), except that an
 * unknown model is NOT_FOUND with param "model" and OpenAI's code for it is
 * model_not_found. */
static const char *error_code_string(int code, const char *param) {
    if (code == STRATA_E_NOT_FOUND && param && !strcmp(param, "model"))
        return "model_not_found";
    return http_error_code(code);
}

/* error.type: the table's, except that OpenAI calls an unknown model an
 * invalid request (404, invalid_request_error, param "model", code
 * model_not_found). */
static const char *error_type_string(int code, const char *param) {
    if (code == STRATA_E_NOT_FOUND && param && !strcmp(param, "model"))
        return "invalid_request_error";
    return http_error_type(code);
}

/* s with every byte that does not belong to a valid UTF-8 character
 * replaced by U+FFFD, or NULL when s is valid as it is (or on out of memory:
 * the caller then keeps s and fails later). owned: free() */
static char *utf8_replace_invalid(const char *s) {
    size_t n = strlen(s), bad = 0;
    if (http_utf8_valid(s, n, &bad))
        return NULL;
    char *out = malloc(3 * n + 1); /* at most one U+FFFD (3 bytes) per input byte */
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t rest = n - i;
        if (http_utf8_valid(s + i, rest, &bad))
            bad = rest;
        memcpy(out + o, s + i, bad);
        o += bad;
        i += bad;
        if (i < n) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

char *http_error_json_as(int code, const char *oa_code, const char *message, const char *param) {
    /* Every error must get its body: a message or param that is not UTF-8
     * (user text cut mid-character, the JSON parser quoting a partial
     * character) made json_pack fail, and the client got no response at all.
     * Invalid bytes become U+FFFD, as OpenAI shows them. */
    if (!message || !*message)
        message = strata_error_text(code);
    char *fixed_msg = utf8_replace_invalid(message);
    char *fixed_param = param && *param ? utf8_replace_invalid(param) : NULL;
    json_t *err =
        json_pack("{s:s, s:s, s:o, s:s}", "message", fixed_msg ? fixed_msg : message, "type",
                  error_type_string(code, param), "param",
                  param && *param ? json_string(fixed_param ? fixed_param : param) : json_null(),
                  "code", oa_code ? oa_code : error_code_string(code, param));
    free(fixed_msg);
    free(fixed_param);
    if (!err)
        return NULL;
    json_t *root = json_pack("{s:o}", "error", err);
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

char *http_error_json(int code, const char *message, const char *param) {
    return http_error_json_as(code, NULL, message, param);
}

static enum metrics_route metrics_route_of(const struct exchange *ex) {
    return ex->route;
}

/* A JSON response that owns body (steals: freed on every path); NULL when
 * libmicrohttpd is out of memory. */
static struct MHD_Response *json_response(char *body) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return r;
}

void http_close_if_draining(struct exchange *ex, struct MHD_Response *r) {
    /* while draining, a kept-alive connection would only wait to be reset */
    if (ex->close_after || atomic_load(&ex->srv->draining))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

bool http_cors_allowed(const char *list, const char *origin) {
    if (!list || !*list || !origin || !*origin)
        return false;
    const size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && t[-1] == ' ')
            t--;
        if ((t - p == 1 && *p == '*') || ((size_t)(t - p) == n && !strncasecmp(p, origin, n)))
            return true;
        p = e;
    }
    return false;
}

void http_common_headers(struct exchange *ex, struct MHD_Response *r) {
    MHD_add_response_header(r, "X-Request-Id", ex->request_id);
    if (ex->origin[0]) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", ex->origin);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id");
        MHD_add_response_header(r, "Vary", "Origin");
    }
    http_close_if_draining(ex, r);
}

/* Queues r (released here), marks the exchange answered and counts it. */
static enum MHD_Result queue_final(struct exchange *ex, int status, struct MHD_Response *r) {
    http_common_headers(ex, r);
    ex->log_status = status;
    enum MHD_Result rc = MHD_queue_response(ex->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    ex->phase = PHASE_RESPONDED;
    metrics_count_request(ex->srv->metrics, metrics_route_of(ex), status);
    return rc;
}

enum MHD_Result http_respond_raw(struct exchange *ex, int status, struct MHD_Response *r) {
    return queue_final(ex, status, r);
}

enum MHD_Result http_respond_options(struct exchange *ex, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    char methods[64];
    snprintf(methods, sizeof methods, "%s, %sOPTIONS", allow, strcmp(allow, "GET") ? "" : "HEAD, ");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, methods);
    if (ex->origin[0]) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        const char *req = MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND,
                                                      "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                req && *req && strlen(req) < 1024 ? req
                                                                  : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return queue_final(ex, 204, r);
}

enum MHD_Result http_respond_json(struct exchange *ex, int status, char *body) {
    if (!body)
        return MHD_NO; /* out of memory: MHD closes the connection */
    struct MHD_Response *r = json_response(body);
    if (!r)
        return MHD_NO;
    return queue_final(ex, status, r);
}

enum MHD_Result http_respond_error(struct exchange *ex, int code, const char *message,
                                   const char *param, const char *allow) {
    return http_respond_error_as(ex, code, NULL, message, param, allow);
}

enum MHD_Result http_respond_error_as(struct exchange *ex, int code, const char *oa_code,
                                      const char *message, const char *param, const char *allow) {
    char *body = http_error_json_as(code, oa_code, message, param);
    if (!body)
        return MHD_NO;
    if (!ex->log_error)
        ex->log_error = code; /* for the request's log line */
    int status = http_error_status(code);
    struct MHD_Response *r = json_response(body);
    if (!r)
        return MHD_NO;
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (code == STRATA_E_AUTH)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (code == STRATA_E_QUEUE_FULL) /* --parallel + --queue in flight: back off a second */
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    return queue_final(ex, status, r);
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

/* The types a JSON body comes with in practice: none at all, curl -d's
 * default (application/x-www-form-urlencoded) and text/plain (a browser's
 * fetch of a string body, which needs no CORS preflight). llama-server and
 * Ollama parse the body as JSON whatever the type; strata does for these and
 * refuses the rest (multipart/form-data, application/xml, ...) by name. */
bool http_content_type_accepts_json(const char *ct) {
    if (!ct || http_content_type_is_json(ct))
        return true;
    while (*ct == ' ')
        ct++;
    static const char *const ok[] = {"application/x-www-form-urlencoded", "text/plain"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const size_t n = strlen(ok[i]);
        if (!strncasecmp(ct, ok[i], n)) {
            const char *rest = ct + n;
            while (*rest == ' ')
                rest++;
            if (*rest == '\0' || *rest == ';')
                return true;
        }
    }
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
