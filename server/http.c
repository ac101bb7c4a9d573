/* server/http.c: routing, limits, auth and request bodies (MHD thread). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server-impl.h"
#include "server/web.h"

struct route {
    const char *path;
    bool prefix; /* "/v1/models/" matches "/v1/models/<id>" */
    const char *method;
    enum metrics_route metric;
};

static const struct route routes[] = {
    {"/v1/chat/completions", false, "POST", METRICS_ROUTE_CHAT},
    {"/v1/completions", false, "POST", METRICS_ROUTE_COMPLETION},
    {"/v1/embeddings", false, "POST", METRICS_ROUTE_EMBEDDINGS},
    {"/tokenize", false, "POST", METRICS_ROUTE_TOKENIZE},
    {"/detokenize", false, "POST", METRICS_ROUTE_DETOKENIZE},
    {"/v1/models", false, "GET", METRICS_ROUTE_MODELS},
    {"/v1/models/", true, "GET", METRICS_ROUTE_MODELS},
    {"/health", false, "GET", METRICS_ROUTE_HEALTH},
    {"/status", false, "GET", METRICS_ROUTE_STATUS},
    {"/metrics", false, "GET", METRICS_ROUTE_METRICS},
};
#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))
/* the embedded page's files (server/web.h), no key needed: the page asks
 * for one before it calls the API */
static const struct route web_route = {"/", false, "GET", METRICS_ROUTE_WEB};

static const struct route *route_find(const struct server *s, const char *url) {
    if (s->p.web_ui && web_find(url))
        return &web_route;
    for (size_t i = 0; i < N_ROUTES; i++) {
        const struct route *r = &routes[i];
        size_t n = strlen(r->path);
        if (r->prefix ? (!strncmp(url, r->path, n) && url[n] && !strchr(url + n, '/'))
                      : !strcmp(url, r->path))
            return r;
    }
    return NULL;
}

static struct exchange *exchange_new(struct server *s, struct MHD_Connection *conn) {
    struct exchange *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return NULL;
    if (pthread_mutex_init(&ex->mu, NULL)) {
        free(ex);
        return NULL;
    }
    ex->srv = s;
    ex->conn = conn;
    ex->refs = 1; /* the connection's */
    ex->route = METRICS_ROUTE_OTHER;
    ex->phase = PHASE_HEADERS;
    ex->t_start = strata_now();
    /* unique within a daemon (the counter) and unlikely to repeat across
     * restarts (the start time mixed in) */
    static _Atomic uint64_t next_id;
    uint64_t x = atomic_fetch_add(&next_id, 1) + 1;
    uint64_t z = x * 0x9e3779b97f4a7c15ull ^ (uint64_t)(s->t_start * 1e6);
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    snprintf(ex->request_id, sizeof ex->request_id, "req-%016llx",
             (unsigned long long)(z ^ (z >> 29)));
    atomic_fetch_add(&s->n_exchanges, 1);
    return ex;
}

/* Checks done once the headers are in: route, method, auth, content type,
 * declared length. Returns MHD_YES with ex->phase still PHASE_HEADERS when
 * the body should be read. */
static enum MHD_Result on_headers(struct exchange *ex, const char *url, const char *method) {
    struct server *s = ex->srv;
    struct MHD_Connection *c = ex->conn;
    snprintf(ex->method, sizeof ex->method, "%.*s", strata_utf8_cut(method, sizeof ex->method - 1),
             method);
    snprintf(ex->path, sizeof ex->path, "%.*s", strata_utf8_cut(url, sizeof ex->path - 1), url);
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && strlen(origin) < sizeof ex->origin &&
        http_cors_allowed(s->p.cors_origins, origin))
        snprintf(ex->origin, sizeof ex->origin, "%s", origin);
    const struct route *r = route_find(s, url);
    if (!r)
        return http_respond_error_as(ex, STRATA_E_NOT_FOUND, "unknown_url", "unknown route", NULL,
                                     NULL);
    ex->route = r->metric;
    if (!strcmp(method, "OPTIONS")) /* the CORS preflight: before auth (it carries no key) */
        return http_respond_options(ex, r->method);
    if (strcmp(method, r->method)) {
        if (!strcmp(method, "HEAD") && !strcmp(r->method, "GET")) {
            /* MHD answers HEAD from the GET response without a body */
        } else {
            char msg[96];
            snprintf(msg, sizeof(msg), "method %.*s not allowed on %s (use %s)",
                     strata_utf8_cut(method, 16), method, r->path, r->method);
            return http_respond_error(ex, STRATA_E_METHOD, msg, NULL, r->method);
        }
    }
    if (r->metric != METRICS_ROUTE_HEALTH && r->metric != METRICS_ROUTE_WEB) {
        ex->key_index =
            auth_key_index(s->p.auth, MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                                  MHD_HTTP_HEADER_AUTHORIZATION));
        if (ex->key_index < 0)
            return http_respond_error(ex, STRATA_E_AUTH,
                                      "invalid or missing API key (Authorization: Bearer <key>)",
                                      NULL, NULL);
    }
    switch (r->metric) {
    case METRICS_ROUTE_HEALTH:
        return status_health(ex);
    case METRICS_ROUTE_STATUS:
        return status_status(ex);
    case METRICS_ROUTE_METRICS:
        return status_metrics(ex);
    case METRICS_ROUTE_MODELS:
        return status_models(ex, r->prefix ? url + strlen(r->path) : NULL);
    case METRICS_ROUTE_WEB:
        return web_respond(ex, web_find(url));
    default:
        break;
    }
    ex->gen_route = r->metric == METRICS_ROUTE_CHAT         ? GEN_ROUTE_CHAT
                    : r->metric == METRICS_ROUTE_EMBEDDINGS ? GEN_ROUTE_EMBEDDINGS
                    : r->metric == METRICS_ROUTE_TOKENIZE   ? GEN_ROUTE_TOKENIZE
                    : r->metric == METRICS_ROUTE_DETOKENIZE ? GEN_ROUTE_DETOKENIZE
                                                            : GEN_ROUTE_COMPLETION;
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!http_content_type_accepts_json(ct)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Content-Type %.*s is not accepted: send application/json",
                 strata_utf8_cut(ct, 64), ct);
        return http_respond_error_as(ex, STRATA_E_INVALID, "invalid_content_type", msg, NULL, NULL);
    }
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end = NULL;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end != cl && n > s->p.max_body) {
            char msg[128];
            snprintf(msg, sizeof(msg), "request body of %llu bytes exceeds the limit of %zu", n,
                     s->p.max_body);
            return http_respond_error(ex, STRATA_E_TOO_LARGE, msg, NULL, NULL);
        }
    }
    return MHD_YES;
}

static enum MHD_Result on_resumed(struct exchange *ex);

/* Slowloris guard for bodies: MHD's --timeout is per read, so a client
 * sending a byte a second would hold its connection forever. As Apache's
 * mod_reqtimeout (body=20,MinRate=500) does, the body must arrive within
 * --timeout seconds plus one second per 64 KiB received; past that the
 * connection is closed (MHD 0.9.75 cannot queue a response mid-upload). */
static bool body_in_time(const struct exchange *ex) {
    double got = (double)(ex->body.len + ex->n_dropped);
    double limit = (double)ex->srv->p.timeout_s + got / 65536.0;
    return strata_now() - ex->t_start <= limit;
}

/* Body complete: check it and hand it to the generation layer. */
static enum MHD_Result on_body(struct exchange *ex) {
    struct server *s = ex->srv;
    char msg[320];
    if (ex->body_too_large) {
        snprintf(msg, sizeof(msg), "request body exceeds the limit of %zu bytes", s->p.max_body);
        return http_respond_error(ex, STRATA_E_TOO_LARGE, msg, NULL, NULL);
    }
    size_t bad = 0;
    if (!http_utf8_valid(ex->body.p ? ex->body.p : "", ex->body.len, &bad)) {
        snprintf(msg, sizeof(msg), "request body is not valid UTF-8 (byte offset %zu)", bad);
        return http_respond_error_as(ex, STRATA_E_INVALID, "invalid_encoding", msg, NULL, NULL);
    }
    json_error_t jerr;
    json_t *body = json_loadb(ex->body.p ? ex->body.p : "", ex->body.len, 0, &jerr);
    if (!body) {
        snprintf(msg, sizeof(msg), "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                 jerr.text);
        return http_respond_error_as(ex, STRATA_E_INVALID, "invalid_json", msg, NULL, NULL);
    }
    sbuf_free(&ex->body);
    if (!json_is_object(body)) {
        json_decref(body);
        return http_respond_error_as(ex, STRATA_E_INVALID, "invalid_type",
                                     "request body must be a JSON object", NULL, NULL);
    }
    /* ready is loaded first: its atomic store publishes p.gen (server.c), so
     * p.gen is only read after it (a request racing the end of loading used
     * to read p.gen.ops as NULL and get "no generation backend"). */
    bool ready = atomic_load(&s->ready);
    if (!ready || atomic_load(&s->draining) || !s->p.gen.ops) {
        json_decref(body);
        const char *why = !ready                      ? "model is loading"
                          : atomic_load(&s->draining) ? "server is shutting down"
                                                      : "no generation backend in this build";
        return http_respond_error(ex, STRATA_E_UNAVAILABLE, why, NULL, NULL);
    }

    /* Fields the ticker and the scheduler read are set before the exchange
     * is listed; it is listed before submit since events may arrive before
     * submit returns. */
    ex->t_submit = strata_now();
    ex->next_keepalive = ex->t_submit + s->p.keepalive_ms / 1000.0;
    ex->stream = json_is_true(json_object_get(body, "stream"));
    pthread_mutex_lock(&s->mu);
    ex->refs++; /* the job's */
    ex->next = s->pending;
    if (s->pending)
        s->pending->prev = ex;
    s->pending = ex;
    s->n_pending++;
    pthread_mutex_unlock(&s->mu);

    /* each API key has its own prefix-cache partition (gen.h) */
    struct gen_submit req = {
        ex->gen_route,           body,           ex->stream,         s->p.always_usage,
        (uint32_t)ex->key_index, ex->request_id, s->p.log_level >= 3};
    struct gen_submit_out out = {0};
    struct strata_error err = {0};
    int rc = s->p.gen.ops->submit(s->p.gen.self, &req, (struct gen_sink){stream_on_event, ex}, &out,
                                  &err);
    json_decref(body);
    if (rc) {
        pthread_mutex_lock(&s->mu);
        if (ex->prev)
            ex->prev->next = ex->next;
        else
            s->pending = ex->next;
        if (ex->next)
            ex->next->prev = ex->prev;
        s->n_pending--;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        ex->refs--; /* no event will come; the connection still holds one */
        return http_respond_error(ex, rc, err.message, out.error_param, NULL);
    }
    pthread_mutex_lock(&ex->mu);
    ex->job = out.job;
    ex->phase = PHASE_WAITING;
    pthread_mutex_unlock(&ex->mu);
    return on_resumed(ex); /* events may have arrived already; else it suspends */
}

/* Resumed while PHASE_WAITING: the answer is in, shutdown gave up, or (a
 * stream) the first event or keep-alive is there. A stream's SSE response
 * (status 200) is queued only then, so an error found before any token (a
 * template's raise_exception, context length) gets its own status and
 * OpenAI error body, as OpenAI answers them. */
static enum MHD_Result on_resumed(struct exchange *ex) {
    pthread_mutex_lock(&ex->mu);
    bool ready = ex->final_ready, aborted = ex->aborted;
    bool start_sse =
        ex->stream && !ready && !aborted && (ex->out.len > ex->out_off || ex->gen_done);
    if (start_sse)
        ex->sse_started = true; /* later events go to the SSE buffer */
    int status = ex->final_status;
    char *body = ex->final_body;
    ex->final_body = NULL;
    if (!ready && !aborted && !start_sse) { /* spurious: keep waiting */
        ex->suspended = true;
        MHD_suspend_connection(ex->conn);
    }
    pthread_mutex_unlock(&ex->mu);
    if (start_sse)
        return stream_start(ex);
    if (ready)
        return http_respond_json(ex, status, body);
    free(body);
    if (aborted)
        return http_respond_error(ex, STRATA_E_UNAVAILABLE, "server is shutting down", NULL, NULL);
    return MHD_YES;
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value) {
    (void)kind;
    framing_add(cls, key, strlen(key), value ? value : "", value ? strlen(value) : 0);
    return MHD_YES;
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **con_cls) {
    struct server *s = cls;
    struct exchange *ex = *con_cls;
    if (!ex) {
        front_conn_busy(s->front, conn); /* not idle: never dropped to make room */
        ex = exchange_new(s, conn);
        if (!ex)
            return MHD_NO;
        *con_cls = ex;
        /* The front checked the framing of a connection's first request; a
         * later (keep-alive) one is checked here, before its body is read. */
        struct framing fr = {0};
        MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_header, &fr);
        const char *why = framing_error(&fr);
        if (why) {
            ex->close_after = true;
            return http_respond_error_as(ex, STRATA_E_INVALID, "invalid_header", why, NULL, NULL);
        }
        /* Requests without a body are answered on the next call: a response
         * queued on this first call makes MHD 0.9.75 close the connection
         * (measured: curl saw `Connection: close` on every GET). POST errors
         * found in the headers are answered now, before the body is read. */
        if (!strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH"))
            return on_headers(ex, url, method);
        ex->phase = PHASE_DEFERRED;
        return MHD_YES;
    }
    switch (ex->phase) {
    case PHASE_DEFERRED:
        if (*upload_size) { /* a body on GET/DELETE/...: not used, dropped */
            ex->n_dropped += *upload_size;
            *upload_size = 0;
            return ex->n_dropped > s->p.max_body || !body_in_time(ex) ? MHD_NO : MHD_YES;
        }
        ex->phase = PHASE_HEADERS;
        return on_headers(ex, url, method);
    case PHASE_HEADERS:
        if (*upload_size) {
            size_t n = *upload_size;
            *upload_size = 0;
            if (ex->body_too_large || ex->body.len + n > s->p.max_body) {
                /* MHD 0.9.75 accepts a response only before or after the
                 * upload, so the rest is drained (kept: nothing) and 413 is
                 * answered at its end; a body that keeps coming past 4x the
                 * limit gets the connection closed instead. */
                ex->body_too_large = true;
                ex->n_dropped += n;
                sbuf_free(&ex->body);
                return ex->n_dropped > 4 * s->p.max_body || !body_in_time(ex) ? MHD_NO : MHD_YES;
            }
            if (sbuf_append(&ex->body, upload, n))
                return MHD_NO;
            return body_in_time(ex) ? MHD_YES : MHD_NO;
        }
        return on_body(ex);
    case PHASE_WAITING:
        return on_resumed(ex);
    case PHASE_STREAMING:
    case PHASE_RESPONDED:
        break;
    }
    return MHD_YES;
}

/* The request's line on stderr (server_params.log_level >= info), logfmt so
 * log shippers split it:
 *   strata: request id=req-... method=POST path=/v1/chat/completions status=200
 *     prompt=46 cached=0 completion=12 ttft_ms=35 tok_s=28.1 total_ms=480
 *     stream=1 [error=CONTEXT_LENGTH] [disconnect=1]
 * ttft_ms: from the request's arrival to its first generated token; tok_s:
 * the decode rate after it, (completion - 1) / (last token - first token);
 * total_ms: arrival to the end of the response. Token fields only for the
 * completion routes; the path a client chose is cut and
 * printed with quotes, spaces and control bytes replaced by _. */
static void log_escape(const char *in, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && n + 4 <= cap; p++) {
        if (*p <= 0x20 || *p >= 0x7f || *p == '"' || *p == '%') {
            out[n++] = '%';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 15];
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
}

static void log_request(struct exchange *ex, enum MHD_RequestTerminationCode toe) {
    if (ex->srv->p.log_level < 2 || !ex->method[0])
        return;
    /* the client's bytes, percent-encoded outside printable ASCII (and for
     * '%', '"', ' '): one line a request whatever the client sent, and
     * valid UTF-8 for a log reader */
    char path[3 * sizeof ex->path], method[3 * sizeof ex->method];
    log_escape(ex->path, path, sizeof path);
    log_escape(ex->method, method, sizeof method);
    const double now = strata_now();
    char tokens[192] = "";
    if (ex->route == METRICS_ROUTE_CHAT || ex->route == METRICS_ROUTE_COMPLETION ||
        ex->route == METRICS_ROUTE_EMBEDDINGS) {
        const double ttft = ex->got_token ? (ex->t_first_token - ex->t_start) * 1e3 : 0.0;
        const double span = ex->t_last_token - ex->t_first_token;
        const double tok_s = ex->n_completion > 1 && span > 0 ? (ex->n_completion - 1) / span : 0.0;
        snprintf(tokens, sizeof tokens,
                 " prompt=%lld cached=%lld completion=%lld ttft_ms=%.0f tok_s=%.1f stream=%d",
                 (long long)ex->n_prompt, (long long)ex->n_cached, (long long)ex->n_completion,
                 ttft, tok_s, ex->stream ? 1 : 0);
    }
    fprintf(stderr, "strata: request id=%s method=%s path=%s status=%d%s total_ms=%.0f%s%s%s\n",
            ex->request_id, method, path, ex->log_status, tokens, (now - ex->t_start) * 1e3,
            ex->log_error ? " error=" : "", ex->log_error ? strata_error_name(ex->log_error) : "",
            toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " disconnect=1" : "");
}

void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                       enum MHD_RequestTerminationCode toe) {
    struct server *s = cls;
    struct exchange *ex = *con_cls;
    front_conn_idle(s->front, conn); /* its next request's headers are due within --timeout */
    if (!ex)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&ex->mu);
    log_request(ex, toe);
    ex->conn_gone = true;
    ex->suspended = false;
    struct gen_job *job = ex->gen_done || ex->peer_gone ? NULL : ex->job;
    pthread_mutex_unlock(&ex->mu);
    if (job) {
        /* Still generating: the client left (or the daemon stops). The job
         * cannot be released before our reference is dropped below. */
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
            metrics_count_disconnect(s->metrics);
        s->p.gen.ops->cancel(s->p.gen.self, job);
    }
    exchange_unref(ex);
}
