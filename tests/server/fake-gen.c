/* tests/server/fake-gen.c: FAKE generation layer for HTTP tests (see fake-gen.h). */
#include "tests/server/fake-gen.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gen_job {
    struct gen_sink sink;
    bool chat, stream, usage;
    int n_tokens, n_done, delay_ms;
    double next_due;
    bool started;
    atomic_bool cancelled;
    atomic_int refs; /* worker + HTTP layer (release) */
    struct gen_job *next;
};

struct fake_gen {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct gen_job *jobs; /* FIFO: the first `parallel` are active */
    int n_jobs, parallel, queue;
    bool stop;
    pthread_t thread;
    atomic_uint_fast64_t tokens_generated, tokens_prompt;
    atomic_int n_active, n_queued;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void job_unref(struct gen_job *j) {
    if (atomic_fetch_sub(&j->refs, 1) == 1)
        free(j);
}

static void emit(struct gen_job *j, enum gen_event_type t, const char *json) {
    struct gen_event ev = {.type = t, .json = json, .json_len = json ? strlen(json) : 0};
    if (t == GEN_EV_DELTA)
        ev.n_tokens = 1;
    if (t == GEN_EV_FINISH)
        ev.finish_reason = "length";
    if (t == GEN_EV_USAGE) {
        ev.n_prompt_tokens = 3;
        ev.n_completion_tokens = j->n_done;
    }
    j->sink.on_event(j->sink.ctx, &ev);
}

/* One step of job j; returns true when it finished (DONE sent). */
static bool job_step(struct fake_gen *g, struct gen_job *j) {
    char buf[512];
    const char *obj = j->chat ? "chat.completion.chunk" : "text_completion";
    if (atomic_load(&j->cancelled)) {
        emit(j, GEN_EV_DONE, NULL);
        return true;
    }
    if (!j->started) {
        j->started = true;
        if (j->stream && j->chat) {
            snprintf(buf, sizeof(buf),
                     "{\"object\":\"%s\",\"model\":\"fake-model\",\"choices\":[{\"index\":0,"
                     "\"delta\":{\"role\":\"assistant\"}}]}",
                     obj);
            emit(j, GEN_EV_ROLE, buf);
        }
        return false;
    }
    if (j->n_done < j->n_tokens) {
        if (j->stream)
            snprintf(buf, sizeof(buf),
                     j->chat ? "{\"object\":\"%s\",\"model\":\"fake-model\",\"choices\":[{"
                               "\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}"
                             : "{\"object\":\"%s\",\"model\":\"fake-model\",\"choices\":[{"
                               "\"index\":0,\"text\":\"tok%d \"}]}",
                     obj, j->n_done);
        j->n_done++;
        atomic_fetch_add(&g->tokens_generated, 1);
        emit(j, GEN_EV_DELTA, j->stream ? buf : NULL);
        return false;
    }
    if (j->stream) {
        snprintf(buf, sizeof(buf),
                 "{\"object\":\"%s\",\"model\":\"fake-model\",\"choices\":[{\"index\":0,"
                 "\"finish_reason\":\"length\"}]}",
                 obj);
        emit(j, GEN_EV_FINISH, buf);
        snprintf(buf, sizeof(buf),
                 "{\"object\":\"%s\",\"model\":\"fake-model\",\"choices\":[],\"usage\":{"
                 "\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%d}}",
                 obj, j->n_done, j->n_done + 3);
        emit(j, GEN_EV_USAGE, j->usage ? buf : NULL);
        emit(j, GEN_EV_DONE, NULL);
        return true;
    }
    emit(j, GEN_EV_FINISH, NULL);
    emit(j, GEN_EV_USAGE, NULL);
    /* the whole response: the deltas concatenated */
    size_t cap = 256 + (size_t)j->n_tokens * 16;
    char *body = malloc(cap), *text = malloc(cap);
    if (!body || !text) {
        free(body);
        free(text);
        struct gen_event ev = {.type = GEN_EV_ERROR, .error_code = STRATA_E_NOMEM};
        j->sink.on_event(j->sink.ctx, &ev);
        emit(j, GEN_EV_DONE, NULL);
        return true;
    }
    size_t off = 0;
    text[0] = '\0';
    for (int i = 0; i < j->n_done; i++)
        off += (size_t)snprintf(text + off, cap - off, "tok%d ", i);
    if (j->chat)
        snprintf(body, cap,
                 "{\"object\":\"chat.completion\",\"model\":\"fake-model\",\"choices\":[{"
                 "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"%s\"},"
                 "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,"
                 "\"completion_tokens\":%d,\"total_tokens\":%d}}",
                 text, j->n_done, j->n_done + 3);
    else
        snprintf(body, cap,
                 "{\"object\":\"text_completion\",\"model\":\"fake-model\",\"choices\":[{"
                 "\"index\":0,\"text\":\"%s\",\"finish_reason\":\"length\"}],\"usage\":{"
                 "\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%d}}",
                 text, j->n_done, j->n_done + 3);
    emit(j, GEN_EV_DONE, body);
    free(body);
    free(text);
    return true;
}

static void *worker_main(void *arg) {
    struct fake_gen *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        if (g->stop && !g->jobs)
            break;
        if (!g->jobs) {
            pthread_cond_wait(&g->cond, &g->mu);
            continue;
        }
        /* Pick the first due active job; sinks are called without g->mu. */
        double now = now_s();
        struct gen_job *due = NULL;
        int k = 0;
        for (struct gen_job *j = g->jobs; j && k < g->parallel; j = j->next, k++) {
            if (g->stop)
                atomic_store(&j->cancelled, true);
            if (j->next_due <= now || atomic_load(&j->cancelled)) {
                due = j;
                break;
            }
        }
        atomic_store(&g->n_active, g->n_jobs < g->parallel ? g->n_jobs : g->parallel);
        atomic_store(&g->n_queued, g->n_jobs > g->parallel ? g->n_jobs - g->parallel : 0);
        if (!due) {
            pthread_mutex_unlock(&g->mu);
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&g->mu);
            continue;
        }
        pthread_mutex_unlock(&g->mu);
        bool finished = job_step(g, due);
        due->next_due = now_s() + due->delay_ms / 1000.0;
        pthread_mutex_lock(&g->mu);
        if (finished) {
            struct gen_job **pp = &g->jobs;
            while (*pp != due)
                pp = &(*pp)->next;
            *pp = due->next;
            g->n_jobs--;
            atomic_store(&g->n_active, g->n_jobs < g->parallel ? g->n_jobs : g->parallel);
            atomic_store(&g->n_queued, g->n_jobs > g->parallel ? g->n_jobs - g->parallel : 0);
            job_unref(due);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static int fake_submit(void *self, const struct gen_submit *req, struct gen_sink sink,
                       struct gen_submit_out *out, struct strata_error *err) {
    struct fake_gen *g = self;
    json_t *b = req->body;
    json_t *stream = json_object_get(b, "stream");
    if (stream && !json_is_boolean(stream)) {
        snprintf(out->error_param, sizeof(out->error_param), "stream");
        return strata_error_set(err, STRATA_E_INVALID, "'stream' must be a boolean");
    }
    if (req->route == GEN_ROUTE_CHAT && !json_is_array(json_object_get(b, "messages"))) {
        snprintf(out->error_param, sizeof(out->error_param), "messages");
        return strata_error_set(err, STRATA_E_INVALID, "'messages' must be an array");
    }
    if (req->route == GEN_ROUTE_COMPLETION && !json_is_string(json_object_get(b, "prompt"))) {
        snprintf(out->error_param, sizeof(out->error_param), "prompt");
        return strata_error_set(err, STRATA_E_INVALID, "'prompt' must be a string");
    }
    json_t *mt = json_object_get(b, "max_tokens"), *dl = json_object_get(b, "fake_delay_ms");
    json_t *so = json_object_get(b, "stream_options");
    struct gen_job *j = calloc(1, sizeof(*j));
    if (!j)
        return strata_error_set(err, STRATA_E_NOMEM, NULL);
    j->sink = sink;
    j->chat = req->route == GEN_ROUTE_CHAT;
    j->stream = req->stream;
    j->usage = req->always_usage || json_is_true(json_object_get(so, "include_usage"));
    j->n_tokens = json_is_integer(mt) ? (int)json_integer_value(mt) : 8;
    j->n_tokens = j->n_tokens < 1 ? 1 : j->n_tokens > 256 ? 256 : j->n_tokens;
    j->delay_ms = json_is_integer(dl) ? (int)json_integer_value(dl) : 5;
    j->delay_ms = j->delay_ms < 0 ? 0 : j->delay_ms > 5000 ? 5000 : j->delay_ms;
    atomic_init(&j->refs, 2);
    pthread_mutex_lock(&g->mu);
    if (g->stop || g->n_jobs >= g->parallel + g->queue) {
        pthread_mutex_unlock(&g->mu);
        free(j);
        return strata_error_set(err, STRATA_E_QUEUE_FULL, "fake backend: queue full");
    }
    struct gen_job **pp = &g->jobs;
    while (*pp)
        pp = &(*pp)->next;
    *pp = j;
    g->n_jobs++;
    atomic_fetch_add(&g->tokens_prompt, 3);
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->mu);
    out->job = j;
    return 0;
}

static void fake_cancel(void *self, struct gen_job *job) {
    atomic_store(&job->cancelled, true);
}

static void fake_release(void *self, struct gen_job *job) {
    job_unref(job);
}

static void fake_stats(void *self, struct gen_stats *st) {
    struct fake_gen *g = self;
    st->ready = true;
    snprintf(st->model_id, sizeof(st->model_id), "fake-model");
    snprintf(st->architecture, sizeof(st->architecture), "fake");
    snprintf(st->quant_mix, sizeof(st->quant_mix), "F32:1");
    st->n_ctx = 256;
    st->n_threads = 1;
    snprintf(st->threads_source, sizeof(st->threads_source), "fake");
    st->n_active = atomic_load(&g->n_active);
    st->n_queued = atomic_load(&g->n_queued);
    st->tokens_generated = atomic_load(&g->tokens_generated);
    st->tokens_prompt = atomic_load(&g->tokens_prompt);
}

static const struct gen_ops fake_ops = {fake_submit, fake_cancel, fake_release, fake_stats};

struct fake_gen *fake_gen_init(int parallel, int queue) {
    struct fake_gen *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->parallel = parallel < 1 ? 1 : parallel;
    g->queue = queue < 0 ? 0 : queue;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cond, NULL);
    if (pthread_create(&g->thread, NULL, worker_main, g)) {
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void fake_gen_free(struct fake_gen *g) {
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

struct gen_backend fake_gen_backend(struct fake_gen *g) {
    return (struct gen_backend){&fake_ops, g};
}
