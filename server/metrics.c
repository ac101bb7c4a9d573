/* server/metrics.c: Prometheus counters and histograms (see metrics.h). */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "server/status-xstore.h"

static const char *const route_names[METRICS_ROUTE_N] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models",  "/health", "/status", "/metrics",
    "/v1/embeddings",       "/tokenize",       "/detokenize", "web",     "other",
};

/* Status codes the server answers with; anything else counts as "other". */
static const int statuses[] = {200, 204, 304, 400, 401, 404, 405, 413, 429, 499, 500, 503, 504};
#define N_STATUS (sizeof(statuses) / sizeof(statuses[0]) + 1)

/* Bucket upper bounds in seconds. TTFT spans queueing plus prefill (ms to
 * minutes); inter-token latency spans ~1 ms (small models) to ~1 s (MoE
 * from disk), so both are log-spaced. */
static const double ttft_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                    0.1,   0.25,   0.5,   1,    2.5};
#define N_TTFT (sizeof(ttft_bounds) / sizeof(ttft_bounds[0]))
#define N_ITL (sizeof(itl_bounds) / sizeof(itl_bounds[0]))

struct histogram {
    _Atomic uint64_t bucket[16]; /* per-bound counts (not cumulative); last = +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us; /* sum of observations, microseconds */
};

struct metrics {
    _Atomic uint64_t requests[METRICS_ROUTE_N][N_STATUS];
    _Atomic uint64_t tokens_prompt, tokens_completion;
    _Atomic uint64_t disconnects;
    struct histogram ttft, itl;
};

_Static_assert(N_TTFT < 16 && N_ITL < 16, "histogram bucket array too small");

struct metrics *metrics_init(void) {
    return calloc(1, sizeof(struct metrics));
}

void metrics_free(struct metrics *m) {
    free(m);
}

void metrics_count_request(struct metrics *m, enum metrics_route route, int status) {
    if (!m || route < 0 || route >= METRICS_ROUTE_N)
        return;
    size_t i = 0;
    while (i < N_STATUS - 1 && statuses[i] != status)
        i++;
    atomic_fetch_add_explicit(&m->requests[route][i], 1, memory_order_relaxed);
}

static void observe(struct histogram *h, const double *bounds, size_t n, double v, uint64_t k) {
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], k, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, k, memory_order_relaxed);
    double us = v * 1e6 * (double)k;
    atomic_fetch_add_explicit(&h->sum_us, us > 0 ? (uint64_t)us : 0, memory_order_relaxed);
}

void metrics_observe_ttft(struct metrics *m, double seconds) {
    if (m)
        observe(&m->ttft, ttft_bounds, N_TTFT, seconds, 1);
}

void metrics_observe_itl(struct metrics *m, double seconds, int n) {
    if (m && n > 0)
        observe(&m->itl, itl_bounds, N_ITL, seconds / n, (uint64_t)n);
}

void metrics_add_tokens(struct metrics *m, int64_t prompt, int64_t completion) {
    if (!m)
        return;
    if (prompt > 0)
        atomic_fetch_add_explicit(&m->tokens_prompt, (uint64_t)prompt, memory_order_relaxed);
    if (completion > 0)
        atomic_fetch_add_explicit(&m->tokens_completion, (uint64_t)completion,
                                  memory_order_relaxed);
}

void metrics_count_disconnect(struct metrics *m) {
    if (m)
        atomic_fetch_add_explicit(&m->disconnects, 1, memory_order_relaxed);
}

uint64_t metrics_requests_total(const struct metrics *m) {
    uint64_t t = 0;
    for (int r = 0; r < METRICS_ROUTE_N; r++)
        for (size_t i = 0; i < N_STATUS; i++)
            t += atomic_load_explicit(&m->requests[r][i], memory_order_relaxed);
    return t;
}

/* Growable text buffer; on OOM it stays failed and render returns NULL. */
struct text {
    char *p;
    size_t len, cap;
    int failed;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...) {
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        if (strata_grow((void **)&t->p, &t->cap, t->len + (size_t)n + 1, 1) < 0) {
            t->failed = 1;
            return;
        }
    }
}

static void put_histogram(struct text *t, const char *name, const char *help,
                          const struct histogram *h, const double *bounds, size_t n) {
    put(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i <= n; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < n)
            put(t, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
        else
            put(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    put(t, "%s_sum %.6f\n", name,
        (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) / 1e6);
    /* count equals the +Inf bucket by construction (same relaxed adds) */
    put(t, "%s_count %llu\n", name, (unsigned long long)cum);
}

char *metrics_render(const struct metrics *m, const struct gen_stats *st, int connections) {
    struct text t = {malloc(4096), 0, 4096, 0};
    if (!t.p)
        return NULL;
    t.p[0] = '\0';
    put(&t, "# HELP strata_http_requests_total HTTP requests answered, by route and status.\n"
            "# TYPE strata_http_requests_total counter\n");
    for (int r = 0; r < METRICS_ROUTE_N; r++)
        for (size_t i = 0; i < N_STATUS; i++) {
            uint64_t v = atomic_load_explicit(&m->requests[r][i], memory_order_relaxed);
            if (!v)
                continue;
            char code[16];
            if (i < N_STATUS - 1)
                snprintf(code, sizeof(code), "%d", statuses[i]);
            else
                snprintf(code, sizeof(code), "other");
            put(&t, "strata_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n", route_names[r],
                code, (unsigned long long)v);
        }
    put(&t,
        "# HELP strata_tokens_prompt_total Prompt tokens of finished requests.\n"
        "# TYPE strata_tokens_prompt_total counter\nstrata_tokens_prompt_total %llu\n"
        "# HELP strata_tokens_completion_total Generated tokens of finished requests.\n"
        "# TYPE strata_tokens_completion_total counter\nstrata_tokens_completion_total %llu\n"
        "# HELP strata_client_disconnects_total Requests whose client left before the end.\n"
        "# TYPE strata_client_disconnects_total counter\nstrata_client_disconnects_total %llu\n"
        "# HELP strata_http_connections Open HTTP connections.\n"
        "# TYPE strata_http_connections gauge\nstrata_http_connections %d\n",
        (unsigned long long)atomic_load_explicit(&m->tokens_prompt, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&m->tokens_completion, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&m->disconnects, memory_order_relaxed),
        connections);
    struct gen_stats zero = {0};
    if (!st)
        st = &zero;
    put(&t,
        "# HELP strata_queue_depth Requests waiting for a decode slot.\n"
        "# TYPE strata_queue_depth gauge\nstrata_queue_depth %d\n"
        "# HELP strata_sessions_active Sessions decoding.\n"
        "# TYPE strata_sessions_active gauge\nstrata_sessions_active %d\n"
        "# HELP strata_prefix_cache_hits_total Prefix-cache lookups that reused KV.\n"
        "# TYPE strata_prefix_cache_hits_total counter\nstrata_prefix_cache_hits_total %llu\n"
        "# HELP strata_prefix_cache_misses_total Prefix-cache lookups that missed.\n"
        "# TYPE strata_prefix_cache_misses_total counter\nstrata_prefix_cache_misses_total %llu\n",
        st->n_queued, st->n_active, (unsigned long long)st->cache_hits,
        (unsigned long long)st->cache_misses);
    /* from the generation layer's snapshot: work done by the engine itself */
    put(&t,
        "# HELP strata_prefix_cache_tokens_total Prompt tokens served from the prefix cache.\n"
        "# TYPE strata_prefix_cache_tokens_total counter\nstrata_prefix_cache_tokens_total %llu\n"
        "# HELP strata_pool_dispatches_total Worker-pool dispatches since start.\n"
        "# TYPE strata_pool_dispatches_total counter\nstrata_pool_dispatches_total %llu\n"
        "# HELP strata_engine_prompt_tokens_total Prompt tokens prefilled by the scheduler.\n"
        "# TYPE strata_engine_prompt_tokens_total counter\nstrata_engine_prompt_tokens_total %llu\n"
        "# HELP strata_engine_generated_tokens_total Tokens generated by the scheduler.\n"
        "# TYPE strata_engine_generated_tokens_total counter\n"
        "strata_engine_generated_tokens_total %llu\n"
        "# HELP strata_kv_positions_used KV positions held by running sessions.\n"
        "# TYPE strata_kv_positions_used gauge\nstrata_kv_positions_used %lld\n"
        "# HELP strata_kv_positions_capacity KV positions the pool holds.\n"
        "# TYPE strata_kv_positions_capacity gauge\nstrata_kv_positions_capacity %lld\n"
        "# HELP strata_ready 1 when the weights are resident and the warm-up step ran.\n"
        "# TYPE strata_ready gauge\nstrata_ready %d\n",
        (unsigned long long)st->cached_tokens, (unsigned long long)st->pool_dispatches,
        (unsigned long long)st->tokens_prompt, (unsigned long long)st->tokens_generated,
        (long long)st->kv_used, (long long)st->kv_total, st->ready ? 1 : 0);
    /* the paged KV pool and the scheduler's steps (zero from a generation
     * layer that reports neither) */
    put(&t,
        "# HELP strata_kv_blocks KV blocks of the paged pool by state (used: held by running "
        "sessions; free: referenced by nobody; cached: held by the prefix cache, some of them "
        "also in use).\n"
        "# TYPE strata_kv_blocks gauge\nstrata_kv_blocks{state=\"used\"} %lld\n"
        "strata_kv_blocks{state=\"free\"} %lld\nstrata_kv_blocks{state=\"cached\"} %lld\n"
        "# HELP strata_kv_blocks_total KV blocks in the pool.\n"
        "# TYPE strata_kv_blocks_total gauge\nstrata_kv_blocks_total %lld\n"
        "# HELP strata_prefix_cache_lookups_total Prefix-cache lookups (admitted requests).\n"
        "# TYPE strata_prefix_cache_lookups_total counter\nstrata_prefix_cache_lookups_total %llu\n"
        "# HELP strata_sessions_waiting Requests queued for a session or KV blocks.\n"
        "# TYPE strata_sessions_waiting gauge\nstrata_sessions_waiting %d\n"
        "# HELP strata_sched_steps_total Scheduler forward steps.\n"
        "# TYPE strata_sched_steps_total counter\nstrata_sched_steps_total %llu\n"
        "# HELP strata_sched_step_tokens_total Tokens evaluated by scheduler steps, by kind.\n"
        "# TYPE strata_sched_step_tokens_total counter\n"
        "strata_sched_step_tokens_total{kind=\"decode\"} %llu\n"
        "strata_sched_step_tokens_total{kind=\"prefill\"} %llu\n"
        "# HELP strata_sched_tokens_per_step Tokens (decode + prefill) of the latest step.\n"
        "# TYPE strata_sched_tokens_per_step gauge\nstrata_sched_tokens_per_step %d\n"
        "# HELP strata_sched_seconds_total Scheduler thread wall time by phase (forward: the "
        "model's forward pass; sample: picking tokens; emit: detokenizing, stop matching, "
        "events; other: reaping, admission, building the batch; idle: no work).\n"
        "# TYPE strata_sched_seconds_total counter\n"
        "strata_sched_seconds_total{phase=\"forward\"} %.6f\n"
        "strata_sched_seconds_total{phase=\"sample\"} %.6f\n"
        "strata_sched_seconds_total{phase=\"emit\"} %.6f\n"
        "strata_sched_seconds_total{phase=\"other\"} %.6f\n"
        "strata_sched_seconds_total{phase=\"idle\"} %.6f\n",
        (long long)st->kv_blocks_used, (long long)st->kv_blocks_free,
        (long long)st->kv_blocks_cached, (long long)st->kv_blocks_total,
        (unsigned long long)(st->cache_hits + st->cache_misses), st->n_queued,
        (unsigned long long)st->steps, (unsigned long long)st->step_decode,
        (unsigned long long)st->step_prefill, st->last_step_tokens, st->step_forward_s,
        st->step_sample_s, st->step_emit_s, st->step_other_s, st->step_idle_s);
    char *xs = status_xstore_metrics(st); /* "" when the store is off */
    if (xs)
        put(&t, "%s", xs);
    else
        t.failed = 1;
    free(xs);
    put_histogram(&t, "strata_time_to_first_token_seconds",
                  "Seconds from request accepted to first generated token.", &m->ttft, ttft_bounds,
                  N_TTFT);
    put_histogram(&t, "strata_inter_token_seconds", "Seconds between generated tokens.", &m->itl,
                  itl_bounds, N_ITL);
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
