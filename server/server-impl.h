/* server/server-impl.h: internals shared by the server .c files (not a public API).
 *
 * One `struct exchange` per HTTP request. Its lifetime is reference counted:
 * one reference for the MHD connection (dropped in the NOTIFY_COMPLETED
 * callback) and one for the generation job (dropped when GEN_EV_DONE
 * arrives); whoever drops the last one frees it and releases the job.
 *
 * Lock order: server.mu -> exchange.mu -> (MHD internal). gen ops are called
 * without exchange.mu held (cancel from the completed callback, before the
 * connection reference is dropped, so the job is still unreleased). The
 * front's mutex is a leaf: nothing else is taken while it is held.
 *
 * Connections reach MHD through the front (front.c): it owns the listening
 * socket, holds a new connection until its request headers are in (within
 * --timeout), checks their framing, then hands it to MHD; it keeps at most
 * --max-connections open by dropping the longest-waiting idle one.
 */
#ifndef STRATA_SERVER_IMPL_H
#define STRATA_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "engine/core/clock.h" /* strata_now: the one monotonic clock */
#include "server/metrics.h"
#include "server/server.h"

/* Growable byte buffer (SSE output, request body). */
struct sbuf {
    char *p; /* owned: len bytes used of cap */
    size_t len, cap;
};
int sbuf_append(struct sbuf *b, const void *data, size_t n); /* 0 or STRATA_E_NOMEM */
void sbuf_free(struct sbuf *b);

enum exchange_phase {
    PHASE_DEFERRED,  /* no-body method: handled on the second access-handler call */
    PHASE_HEADERS,   /* first access-handler call done, reading the body */
    PHASE_WAITING,   /* job submitted; connection suspended until DONE (non-stream) or
                        the first event or keep-alive (stream) */
    PHASE_STREAMING, /* SSE response queued; content reader drains `out` */
    PHASE_RESPONDED, /* a complete response was queued */
};

struct exchange {
    struct server *srv;
    struct MHD_Connection *conn; /* borrowed; valid until the completed callback */
    enum metrics_route route;
    enum gen_route gen_route;
    enum exchange_phase phase; /* MHD thread only */
    struct sbuf body;          /* request body, at most max_body bytes */
    bool body_too_large;
    bool close_after;    /* answer with Connection: close (framing refused) */
    int key_index;       /* the API key that authorized the request (auth_key_index) */
    char request_id[24]; /* "req-" + 16 hex: X-Request-Id and the log line */
    char origin[256];    /* the request's Origin when --cors-origin allows it, else "" */
    size_t n_dropped;    /* body bytes of a no-body method, discarded */
    double t_start;      /* seconds (monotonic) when the headers were in */
    double t_submit;     /* seconds (monotonic) when the job was submitted */

    pthread_mutex_t mu; /* guards everything below */
    int refs;
    struct gen_job *job; /* set after submit; released at free */
    bool stream;
    bool sse_started; /* stream: SSE response queued; before, an error gets a plain status */
    bool conn_gone;   /* completed callback ran */
    bool peer_gone;   /* the ticker saw the client close while suspended; job cancelled */
    bool suspended;   /* we suspended the connection and nobody resumed it yet */
    bool gen_done;    /* GEN_EV_DONE seen */
    bool aborted;     /* shutdown gave up on the generation layer */
    bool error_seen;  /* GEN_EV_ERROR seen */
    bool got_token;   /* first DELTA seen (TTFT recorded) */
    /* server_shutdown cancelled the job: its CANCELLED error is answered 503 */
    bool shutdown_cancel;
    struct sbuf out;  /* stream: SSE bytes not yet handed to MHD */
    size_t out_off;   /* bytes of out already handed over */
    int final_status; /* non-stream: status of the final response */
    char *final_body; /* owned: non-stream final body (JSON) */
    bool final_ready;
    double t_last_token;  /* seconds; inter-token latency */
    double t_first_token; /* seconds; 0 until the first DELTA */
    /* for the request's log line (USAGE and ERROR events, the response) */
    int64_t n_prompt, n_cached, n_completion;
    int log_status;        /* status of the response queued (200 for a stream) */
    int log_error;         /* STRATA_E_* of an ERROR event (mid-stream too), 0 if none */
    char method[8];        /* the request's, cut */
    char path[96];         /* the request's URL path, cut at a character boundary */
    double next_keepalive; /* seconds; stream keep-alive due time */

    struct exchange *prev, *next; /* server.pending list (server.mu) while job is live */
};

struct server {
    struct server_params p; /* copy; host points at `host` */
    char *host;             /* owned */
    struct front *front;    /* owned: the listening socket and the accept policy */
    struct MHD_Daemon *mhd;
    struct metrics *metrics; /* owned */
    int port;
    double t_start;
    atomic_bool ready;
    atomic_bool draining;
    atomic_int n_exchanges; /* requests alive (idle keep-alive connections hold none) */

    pthread_mutex_t mu;       /* guards the fields below */
    pthread_cond_t cond;      /* pending list shrank, or stopping */
    struct exchange *pending; /* exchanges whose job has not sent DONE */
    int n_pending;
    bool stopping; /* ticker exits */
    pthread_t ticker;
    bool ticker_started;
    bool shut; /* server_shutdown ran */
};

/* front.c: the listening socket, header deadline and accept policy */
struct front;
/* Binds and listens on host:port (a busy port fails here); no thread yet. */
struct front *front_init(struct server *s, struct strata_error *err);
int front_start(struct front *f, struct strata_error *err); /* after MHD started */
int front_port(const struct front *f);
/* Stops accepting (new clients are refused from here on) and closes what the
 * front holds; connections MHD holds stay until MHD_stop_daemon. */
void front_stop(struct front *f);
void front_free(struct front *f);         /* after MHD_stop_daemon; NULL is a no-op */
int front_n_connections(struct front *f); /* open connections (waiting, idle, busy) */
void front_counters(struct front *f, uint64_t *n_evicted, uint64_t *n_header_timeout);
/* MHD_OPTION_NOTIFY_CONNECTION (cls: the front) */
void front_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                         enum MHD_ConnectionNotificationCode code);
void front_conn_busy(struct front *f, struct MHD_Connection *conn); /* a request began */
void front_conn_idle(struct front *f, struct MHD_Connection *conn); /* it completed */

/* Request framing headers (Content-Length, Transfer-Encoding), checked by
 * the front on a connection's first request and by the access handler on
 * the later ones: anything a proxy could read differently is refused. */
struct framing {
    int n_cl, n_te;
    uint64_t cl;
    bool cl_bad, cl_conflict, te_chunked, name_ws;
};
void framing_add(struct framing *fr, const char *name, size_t name_len, const char *value,
                 size_t value_len);
const char *framing_error(const struct framing *fr); /* NULL: fine; else why (400) */

/* http.c: the MHD callbacks */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                       enum MHD_RequestTerminationCode toe);

/* respond.c: responses and request-body checks */
/* OpenAI error body {"error":{"message","type","param","code"}}. owned: free() */
char *http_error_json(int code, const char *message, const char *param);
/* The same with error.code oa_code instead of the table's ("invalid_json"); NULL: the table's. */
char *http_error_json_as(int code, const char *oa_code, const char *message, const char *param);
/* Queues an error response with the table's status (+ Allow for 405). */
/* 204 to OPTIONS on a route whose method is `allow`: Allow, and for an
 * allowed Origin the CORS preflight answer (methods, the requested headers,
 * max-age 600 s); an Origin outside --cors-origin gets no CORS headers, so
 * the browser refuses the real request. */
enum MHD_Result http_respond_options(struct exchange *ex, const char *allow);
enum MHD_Result http_respond_error(struct exchange *ex, int code, const char *message,
                                   const char *param, const char *allow);
enum MHD_Result http_respond_error_as(struct exchange *ex, int code, const char *oa_code,
                                      const char *message, const char *param, const char *allow);
/* Queues `body` (steals: malloc'd) as application/json with `status`. */
enum MHD_Result http_respond_json(struct exchange *ex, int status, char *body);
/* Queues r (released here) with the common headers, marks the exchange
 * answered and counts it. */
enum MHD_Result http_respond_raw(struct exchange *ex, int status, struct MHD_Response *r);
/* Adds Connection: close to r when the exchange must not keep its connection
 * (draining, refused framing). */
void http_close_if_draining(struct exchange *ex, struct MHD_Response *r);
/* Headers every response of an exchange carries: X-Request-Id, the CORS
 * headers for an allowed Origin, Connection: close while draining. */
void http_common_headers(struct exchange *ex, struct MHD_Response *r);
/* 1 when origin (NUL-terminated) is in the --cors-origin list (or it is "*"). */
bool http_cors_allowed(const char *list, const char *origin);
bool http_utf8_valid(const char *s, size_t n, size_t *bad_offset);
bool http_content_type_is_json(const char *ct);
/* The Content-Types a JSON body is accepted with (respond.c: none, JSON,
 * application/x-www-form-urlencoded, text/plain). */
bool http_content_type_accepts_json(const char *ct);

/* stream.c: SSE, the gen sink, the keep-alive ticker */
void stream_on_event(void *ctx, const struct gen_event *ev);
enum MHD_Result stream_start(struct exchange *ex); /* queues the SSE response */
void exchange_unref(struct exchange *ex);          /* drops one reference */
void *stream_ticker_main(void *arg);

/* status.c: GET handlers */
enum MHD_Result status_health(struct exchange *ex);
enum MHD_Result status_status(struct exchange *ex);
enum MHD_Result status_metrics(struct exchange *ex);
enum MHD_Result status_models(struct exchange *ex, const char *id); /* id NULL: the list */
/* server/web.c: one embedded file (ETag, 304 on If-None-Match, CSP). */
struct web_file;
enum MHD_Result web_respond(struct exchange *ex, const struct web_file *f);

#endif
