/* server/metrics.h: counters and histograms for GET /metrics (Prometheus
 * text format 0.0.4).
 *
 *   struct metrics *m = metrics_init();
 *   metrics_count_request(m, METRICS_ROUTE_CHAT, 200);
 *   metrics_observe_ttft(m, 0.125);
 *   char *text = metrics_render(m, &gen_stats);  // free()
 *
 * Threading: every recorder is lock-free (relaxed atomics) and safe from any
 * thread; render reads a consistent-enough snapshot without locking.
 */
#ifndef STRATA_SERVER_METRICS_H
#define STRATA_SERVER_METRICS_H

#include <stdint.h>

#include "server/gen.h"

enum metrics_route {
    METRICS_ROUTE_CHAT,
    METRICS_ROUTE_COMPLETION,
    METRICS_ROUTE_MODELS,
    METRICS_ROUTE_HEALTH,
    METRICS_ROUTE_STATUS,
    METRICS_ROUTE_METRICS,
    METRICS_ROUTE_EMBEDDINGS, /* /v1/embeddings */
    METRICS_ROUTE_TOKENIZE,   /* /tokenize */
    METRICS_ROUTE_DETOKENIZE, /* /detokenize */
    METRICS_ROUTE_WEB,        /* the page: /, /app.js, /style.css */
    METRICS_ROUTE_OTHER,      /* unknown routes (404) */
    METRICS_ROUTE_N,
};

struct metrics;

struct metrics *metrics_init(void); /* owned: free with metrics_free(); NULL on OOM */
void metrics_free(struct metrics *m);

void metrics_count_request(struct metrics *m, enum metrics_route route, int status);
void metrics_observe_ttft(struct metrics *m, double seconds);
/* dt seconds for n tokens: records n samples of dt / n. */
void metrics_observe_itl(struct metrics *m, double seconds, int n);
void metrics_add_tokens(struct metrics *m, int64_t prompt, int64_t completion);
void metrics_count_disconnect(struct metrics *m);
uint64_t metrics_requests_total(const struct metrics *m);

/* Prometheus text; stats may be NULL (no generation layer). owned: free() */
char *metrics_render(const struct metrics *m, const struct gen_stats *stats, int connections);

#endif
