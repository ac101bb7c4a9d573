/* server/stream.c: the gen sink (scheduler thread), the SSE writer (MHD
 * thread) and the keep-alive ticker (its own persistent thread).
 *
 * Suspend/resume protocol: only the side that finds `suspended` true and
 * flips it to false (under exchange.mu) calls MHD_resume_connection, after
 * unlocking. A suspended connection is never closed by MHD, so the
 * connection and the exchange stay alive until that resume. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/errors.h"
#include "server/server-impl.h"

static void exchange_free(struct exchange *ex) {
    struct server *s = ex->srv;
    if (ex->job)
        s->p.gen.ops->release(s->p.gen.self, ex->job);
    sbuf_free(&ex->body);
    sbuf_free(&ex->out);
    free(ex->final_body);
    pthread_mutex_destroy(&ex->mu);
    free(ex);
    atomic_fetch_sub(&s->n_exchanges, 1);
}

void exchange_unref(struct exchange *ex) {
    pthread_mutex_lock(&ex->mu);
    bool last = --ex->refs == 0;
    pthread_mutex_unlock(&ex->mu);
    if (last)
        exchange_free(ex);
}

/* Appends one SSE event `data: <json>\n\n`; caller holds ex->mu. */
static void put_event(struct exchange *ex, const char *json, size_t len) {
    if (sbuf_append(&ex->out, "data: ", 6) || sbuf_append(&ex->out, json, len) ||
        sbuf_append(&ex->out, "\n\n", 2))
        ex->aborted = true; /* out of memory: end the stream */
}

static void unlink_pending(struct exchange *ex) {
    struct server *s = ex->srv;
    pthread_mutex_lock(&s->mu);
    if (ex->prev)
        ex->prev->next = ex->next;
    else
        s->pending = ex->next;
    if (ex->next)
        ex->next->prev = ex->prev;
    ex->prev = ex->next = NULL;
    s->n_pending--;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

void stream_on_event(void *ctx, const struct gen_event *ev) {
    struct exchange *ex = ctx;
    struct server *s = ex->srv;
    double now = strata_now();
    bool done = ev->type == GEN_EV_DONE;

    pthread_mutex_lock(&ex->mu);
    if (ev->type == GEN_EV_DELTA) {
        if (!ex->got_token)
            metrics_observe_ttft(s->metrics, now - ex->t_submit);
        else
            metrics_observe_itl(s->metrics, now - ex->t_last_token,
                                ev->n_tokens > 0 ? ev->n_tokens : 1);
        if (!ex->got_token)
            ex->t_first_token = now;
        ex->got_token = true;
        ex->t_last_token = now;
    } else if (ev->type == GEN_EV_USAGE) {
        metrics_add_tokens(s->metrics, ev->n_prompt_tokens, ev->n_completion_tokens);
        ex->n_prompt = ev->n_prompt_tokens;
        ex->n_cached = ev->n_cached_tokens;
        ex->n_completion = ev->n_completion_tokens;
    } else if (ev->type == GEN_EV_ERROR && !ex->log_error) {
        ex->log_error = ev->error_code;
    }
    /* A stream that fails before its SSE response started answers like a
     * non-stream request (status + error body; see on_resumed in http.c). */
    bool sse = ex->stream && (ex->sse_started || (ev->type != GEN_EV_ERROR && !ex->error_seen));
    /* A job server_shutdown cancelled (queued or running past the drain
     * deadline) is refused for shutdown, 503 as the README promises, not
     * 499 "cancelled" (which is for a client that left). */
    struct gen_event shut_ev;
    if (ev->type == GEN_EV_ERROR && ev->error_code == STRATA_E_CANCELLED && ex->shutdown_cancel) {
        shut_ev = *ev;
        shut_ev.error_code = STRATA_E_UNAVAILABLE;
        shut_ev.error_message = "server is shutting down";
        shut_ev.error_param = NULL;
        ev = &shut_ev;
    }
    if (!ex->conn_gone) {
        if (sse) {
            if (ev->type == GEN_EV_ERROR) {
                char *e = http_error_json(ev->error_code, ev->error_message, ev->error_param);
                if (e)
                    put_event(ex, e, strlen(e));
                free(e);
            } else if (done) {
                put_event(ex, "[DONE]", 6);
            } else if (ev->json) {
                put_event(ex, ev->json, ev->json_len);
            }
            ex->next_keepalive = now + s->p.keepalive_ms / 1000.0;
        } else if (ev->type == GEN_EV_ERROR && !ex->error_seen) {
            ex->error_seen = true;
            ex->final_status = http_error_status(ev->error_code);
            ex->final_body = http_error_json(ev->error_code, ev->error_message, ev->error_param);
        } else if (done) {
            if (!ex->error_seen) {
                ex->final_status = 200;
                ex->final_body = ev->json ? strndup(ev->json, ev->json_len) : NULL;
                if (!ex->final_body) {
                    ex->final_status = 500;
                    ex->final_body =
                        http_error_json(STRATA_E_INTERNAL, "generation produced no response", NULL);
                }
            }
            ex->final_ready = true;
        }
    }
    if (done)
        ex->gen_done = true;
    pthread_mutex_unlock(&ex->mu);

    if (done)
        unlink_pending(ex);

    pthread_mutex_lock(&ex->mu);
    bool resume = ex->suspended && !ex->conn_gone &&
                  (ex->out.len > ex->out_off || ex->final_ready || ex->gen_done || ex->aborted);
    if (resume)
        ex->suspended = false;
    struct MHD_Connection *conn = ex->conn;
    bool last = done && --ex->refs == 0;
    pthread_mutex_unlock(&ex->mu);
    if (last)
        exchange_free(ex); /* the connection is gone, so nothing to resume */
    else if (resume)
        MHD_resume_connection(conn);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct exchange *ex = cls;
    ssize_t n = 0;
    pthread_mutex_lock(&ex->mu);
    if (ex->out.len > ex->out_off) {
        size_t avail = ex->out.len - ex->out_off;
        size_t k = avail < max ? avail : max;
        memcpy(buf, ex->out.p + ex->out_off, k);
        ex->out_off += k;
        if (ex->out_off == ex->out.len)
            ex->out.len = ex->out_off = 0;
        n = (ssize_t)k;
    } else if (ex->aborted) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (ex->gen_done) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* Nothing to send: park the connection until an event or a keep-alive. */
        ex->suspended = true;
        MHD_suspend_connection(ex->conn);
    }
    pthread_mutex_unlock(&ex->mu);
    return n;
}

enum MHD_Result stream_start(struct exchange *ex) {
    /* 4 KiB blocks: one token's chunk is ~200 bytes, so MHD rarely needs two reads. */
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, ex, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    http_common_headers(ex, r);
    ex->log_status = 200;
    enum MHD_Result rc = MHD_queue_response(ex->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    ex->phase = PHASE_STREAMING;
    metrics_count_request(ex->srv->metrics, ex->route, 200);
    return rc;
}

/* A suspended connection is not polled by MHD, so a client that leaves
 * while its request waits (non-stream, or a quiet stream) would go unnoticed
 * until the answer is written. While suspended MHD does not touch the
 * socket, so the ticker may peek at it: EOF or an error means the peer is
 * gone. Pipelined bytes read as "still there". */
static bool peer_closed(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    char b;
    ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Writes ": keep-alive" into streams that have been quiet for keepalive_ms
 * (a request waiting in the queue, a slow prefill) and resumes them; this
 * also makes a vanished client visible (the write fails, MHD closes the
 * connection, the completed callback cancels the job). Wakes every 100 ms. */
void *stream_ticker_main(void *arg) {
    struct server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cond, &s->mu, &ts);
        double now = strata_now();
        for (struct exchange *ex = s->pending; ex; ex = ex->next) {
            pthread_mutex_lock(&ex->mu);
            bool resume = false;
            if (ex->stream && !ex->conn_gone && now >= ex->next_keepalive) {
                static const char ka[] = ": keep-alive\n\n";
                if (sbuf_append(&ex->out, ka, sizeof(ka) - 1))
                    ex->aborted = true;
                ex->next_keepalive = now + s->p.keepalive_ms / 1000.0;
                resume = ex->suspended;
                ex->suspended = false;
            }
            struct gen_job *cancel = NULL;
            if (!resume && ex->suspended && !ex->conn_gone && !ex->peer_gone && ex->job &&
                peer_closed(ex->conn)) {
                ex->peer_gone = true;
                cancel = ex->job;
            }
            pthread_mutex_unlock(&ex->mu);
            if (cancel) { /* listed, so not released; cancel never blocks (gen.h) */
                metrics_count_disconnect(s->metrics);
                s->p.gen.ops->cancel(s->p.gen.self, cancel);
            }
            if (resume) /* ex stays listed (alive) while we hold s->mu */
                MHD_resume_connection(ex->conn);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
