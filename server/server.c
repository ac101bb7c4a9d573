/* server/server.c: daemon lifecycle: start, ready, drain, stop (see server.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/server-impl.h"

struct server_params server_params_default(void) {
    return (struct server_params){
        .host = "127.0.0.1",
        .port = 8080,
        .max_body = 2u << 20, /* see CONFIG_OPTIONS in config/config.h */
        .timeout_s = 30,
        .max_connections = 256,
        .keepalive_ms = 5000, /* well under the 60 s idle cut of common proxies */
        .always_usage = false,
        .web_ui = true,
        .log_level = 2,
        .auth = NULL,
        .gen = {NULL, NULL},
    };
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    /* MHD's own diagnostics (e.g. a client reset) go to stderr as they are. */
    vfprintf(stderr, fmt, ap);
}

struct server *server_init(const struct server_params *params, struct strata_error *err) {
    struct server *s = calloc(1, sizeof(*s));
    bool mu_ok = false, cond_ok = false;
    if (!s) {
        strata_error_set(err, STRATA_E_NOMEM, "server: out of memory");
        return NULL;
    }
    s->p = *params;
    if (s->p.gen.ops && (!s->p.gen.ops->submit || !s->p.gen.ops->cancel || !s->p.gen.ops->release ||
                         !s->p.gen.ops->stats)) {
        strata_error_set(err, STRATA_E_INVALID, "server: generation backend lacks an op");
        goto fail;
    }
    if (s->p.keepalive_ms <= 0)
        s->p.keepalive_ms = 5000;
    s->host = strdup(params->host ? params->host : "127.0.0.1");
    s->metrics = metrics_init();
    if (!s->host || !s->metrics) {
        strata_error_set(err, STRATA_E_NOMEM, "server: out of memory");
        goto fail;
    }
    s->p.host = s->host;
    if (pthread_mutex_init(&s->mu, NULL) == 0)
        mu_ok = true;
    if (pthread_cond_init(&s->cond, NULL) == 0)
        cond_ok = true;
    if (!mu_ok || !cond_ok) {
        strata_error_set(err, STRATA_E_INTERNAL, "server: mutex init failed");
        goto fail;
    }
    s->t_start = strata_now();

    /* The front binds first (a busy port fails here, with its own message)
     * and hands MHD every connection whose request headers are in. */
    if (!(s->front = front_init(s, err)))
        goto fail;
    s->port = front_port(s->front);
    /* MHD's limit leaves room for connections the front has shut down and MHD
     * has not closed yet; the front keeps --max-connections. */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET;
    s->mhd =
        MHD_start_daemon(flags, 0, NULL, NULL, http_on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                         log_mhd, NULL, MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, s,
                         MHD_OPTION_NOTIFY_CONNECTION, front_on_connection, s->front,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections + 64u,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.timeout_s, MHD_OPTION_END);
    if (!s->mhd) {
        strata_error_set(err, STRATA_E_INTERNAL, "server: libmicrohttpd refused to start");
        goto fail;
    }
    if (front_start(s->front, err))
        goto fail;
    if (pthread_create(&s->ticker, NULL, stream_ticker_main, s)) {
        strata_error_set(err, STRATA_E_INTERNAL, "server: cannot start the ticker thread");
        goto fail;
    }
    s->ticker_started = true;
    return s;
fail:
    front_stop(s->front);
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    front_free(s->front);
    if (cond_ok)
        pthread_cond_destroy(&s->cond);
    if (mu_ok)
        pthread_mutex_destroy(&s->mu);
    metrics_free(s->metrics);
    free(s->host);
    free(s);
    return NULL;
}

int server_port(const struct server *s) {
    return s->port;
}

void server_set_gen(struct server *s, struct gen_backend gen) {
    STRATA_ASSERT(!atomic_load(&s->ready));
    s->p.gen = gen; /* published to the MHD thread by the atomic store of ready */
}

void server_set_ready(struct server *s, bool ready) {
    atomic_store(&s->ready, ready);
}

/* Waits on s->cond (s->mu held) until nothing is pending or `until` passes. */
static void wait_pending(struct server *s, double until) {
    while (s->n_pending > 0 && strata_now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    }
}

int server_shutdown(struct server *s, int deadline_ms) {
    if (!s || s->shut)
        return 0;
    s->shut = true;
    /* Draining: new connections are still accepted and answered at once
     * (/health and completions 503, with Connection: close) until the end
     * of the drain, so a probe gets its 503 instead of hanging in the
     * backlog until it is reset at exit. */
    atomic_store(&s->draining, true);

    pthread_mutex_lock(&s->mu);
    wait_pending(s, strata_now() + deadline_ms / 1000.0);
    int n_cancelled = s->n_pending;
    for (struct exchange *ex = s->pending; ex; ex = ex->next) {
        pthread_mutex_lock(&ex->mu);
        struct gen_job *job = ex->job;
        ex->shutdown_cancel = true; /* its "cancelled" error is answered as 503 */
        pthread_mutex_unlock(&ex->mu);
        if (job) /* listed, so not yet released; cancel never blocks (gen.h) */
            s->p.gen.ops->cancel(s->p.gen.self, job);
    }
    /* A cancelled job sends DONE at the scheduler's next step: 2 s is plenty. */
    wait_pending(s, strata_now() + 2.0);
    for (struct exchange *ex = s->pending; ex; ex = ex->next) {
        pthread_mutex_lock(&ex->mu);
        ex->aborted = true; /* the generation layer did not answer: give up */
        bool resume = ex->suspended && !ex->conn_gone;
        ex->suspended = false;
        pthread_mutex_unlock(&ex->mu);
        if (resume)
            MHD_resume_connection(ex->conn);
    }
    s->stopping = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
    if (s->ticker_started)
        pthread_join(s->ticker, NULL);
    s->ticker_started = false;
    front_stop(s->front); /* new clients are refused from here on */
    /* Let finished and resumed requests flush their last bytes (a stream's
     * `data: [DONE]`) before MHD closes every connection: up to 1 s. */
    for (int i = 0; i < 100 && atomic_load(&s->n_exchanges) > 0; i++)
        usleep(10 * 1000);
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    front_free(s->front);
    s->front = NULL;
    return n_cancelled;
}

void server_free(struct server *s) {
    if (!s)
        return;
    server_shutdown(s, 0);
    /* Exchanges still held by an unresponsive generation layer stay with it. */
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    metrics_free(s->metrics);
    free(s->host);
    free(s);
}
