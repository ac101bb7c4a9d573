/* server/status-xstore.c: the expert store's counters as /status JSON and
 * Prometheus text (status-xstore.h). */
#include "server/status-xstore.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAT_BUCKETS 16 /* gen_xstore.lat: reads under 16 us << i; the last one: the rest */

json_t *status_xstore_json(const struct gen_stats *st) {
    const struct gen_xstore *x = &st->xstore;
    if (!x->on)
        return NULL;
    json_t *buckets = json_array();
    for (int b = 0; b < LAT_BUCKETS && buckets; b++)
        json_array_append_new(
            buckets,
            json_pack("{s:o, s:I}", "le_us",
                      b < LAT_BUCKETS - 1 ? json_integer((json_int_t)(16ll << b)) : json_null(),
                      "count", (json_int_t)x->lat[b]));
    json_t *layers = json_array();
    for (int l = 0; l < x->n_layer && layers; l++)
        json_array_append_new(layers, json_pack("{s:I, s:I}", "hits", (json_int_t)x->layer_hits[l],
                                                "misses", (json_int_t)x->layer_misses[l]));
    const uint64_t picks = x->hits + x->misses;
    json_t *o = json_pack(
        "{s:b, s:s, s:s, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
        "on", 1, "mode", x->mode, "rule", x->rule, "capacity_bytes", (json_int_t)x->capacity_bytes,
        "used_bytes", (json_int_t)x->used_bytes, "slots", x->n_slots, "slots_used", x->slots_used,
        "slot_bytes", (json_int_t)x->slot_bytes, "hits", (json_int_t)x->hits, "misses",
        (json_int_t)x->misses, "hit_rate", picks ? (double)x->hits / (double)picks : 0.0,
        "overflow", (json_int_t)x->overflow, "evictions", (json_int_t)x->evictions, "read_errors",
        (json_int_t)x->read_errors, "bytes_read", (json_int_t)x->bytes_read, "reads",
        (json_int_t)x->reads, "batches", (json_int_t)x->batches);
    if (!o) {
        json_decref(buckets);
        json_decref(layers);
        return NULL;
    }
    json_object_set_new(o, "read_latency_us",
                        json_pack("{s:f, s:o}", "mean",
                                  x->reads ? (double)x->lat_sum_us / (double)x->reads : 0.0,
                                  "buckets", buckets ? buckets : json_array()));
    /* router lookahead (--expert-prefetch): reads ahead, and how the
     * predictions compared with the needs that followed */
    json_object_set_new(
        o, "prefetch",
        json_pack("{s:I, s:I, s:I, s:I, s:f, s:f}", "issued", (json_int_t)x->prefetch_issued,
                  "useful", (json_int_t)x->prefetch_useful, "wasted",
                  (json_int_t)x->prefetch_wasted, "dropped", (json_int_t)x->prefetch_dropped,
                  "recall", x->pred_used ? (double)x->pred_hit / (double)x->pred_used : 0.0,
                  "precision", x->pred_n ? (double)x->pred_hit / (double)x->pred_n : 0.0));
    json_object_set_new(o, "warm_bytes", json_integer((json_int_t)x->warm_bytes));
    json_object_set_new(o, "queue_depth", json_integer(x->queue_depth));
    json_object_set_new(o, "queue_rule", json_string(x->queue_rule));
    json_object_set_new(o, "fixed_buffers", json_boolean(x->fixed));
    json_object_set_new(o, "fixed_rule", json_string(x->fixed_rule));
    json_object_set_new(o, "layers", layers ? layers : json_array());
    return o;
}

struct buf {
    char *p;
    size_t n, cap;
    bool failed;
};

__attribute__((format(printf, 2, 3))) static void put(struct buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        char *q = realloc(b->p, b->cap * 2 + (size_t)k);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = b->cap * 2 + (size_t)k;
    }
}

char *status_xstore_metrics(const struct gen_stats *st) {
    const struct gen_xstore *x = &st->xstore;
    struct buf b = {malloc(2048), 0, 2048, false};
    if (!b.p)
        return NULL;
    b.p[0] = '\0';
    if (!x->on)
        return b.p;
    put(&b,
        "# HELP strata_expert_store_capacity_bytes Expert store RAM tier budget (slots x slot "
        "bytes).\n"
        "# TYPE strata_expert_store_capacity_bytes gauge\n"
        "strata_expert_store_capacity_bytes{mode=\"%s\"} %llu\n"
        "# HELP strata_expert_store_used_bytes Expert store slots holding an expert.\n"
        "# TYPE strata_expert_store_used_bytes gauge\nstrata_expert_store_used_bytes %llu\n"
        "# HELP strata_expert_store_bytes_read_total Bytes read from the model file.\n"
        "# TYPE strata_expert_store_bytes_read_total counter\n"
        "strata_expert_store_bytes_read_total %llu\n"
        "# HELP strata_expert_store_evictions_total Experts evicted for another.\n"
        "# TYPE strata_expert_store_evictions_total counter\n"
        "strata_expert_store_evictions_total %llu\n"
        "# HELP strata_expert_store_overflow_total Picks served from the file mapping (no slot "
        "free in the step).\n"
        "# TYPE strata_expert_store_overflow_total counter\n"
        "strata_expert_store_overflow_total %llu\n"
        "# HELP strata_expert_store_read_errors_total Failed or short reads.\n"
        "# TYPE strata_expert_store_read_errors_total counter\n"
        "strata_expert_store_read_errors_total %llu\n"
        "# HELP strata_expert_store_prefetch_dropped_total Prefetch ids dropped (queue full or "
        "busy, no slot).\n"
        "# TYPE strata_expert_store_prefetch_dropped_total counter\n"
        "strata_expert_store_prefetch_dropped_total %llu\n",
        x->mode, (unsigned long long)x->capacity_bytes, (unsigned long long)x->used_bytes,
        (unsigned long long)x->bytes_read, (unsigned long long)x->evictions,
        (unsigned long long)x->overflow, (unsigned long long)x->read_errors,
        (unsigned long long)x->prefetch_dropped);
    put(&b,
        "# HELP strata_expert_store_prefetch_total Experts read ahead by the router lookahead, "
        "by outcome.\n"
        "# TYPE strata_expert_store_prefetch_total counter\n"
        "strata_expert_store_prefetch_total{result=\"issued\"} %llu\n"
        "strata_expert_store_prefetch_total{result=\"useful\"} %llu\n"
        "strata_expert_store_prefetch_total{result=\"wasted\"} %llu\n",
        (unsigned long long)x->prefetch_issued, (unsigned long long)x->prefetch_useful,
        (unsigned long long)x->prefetch_wasted);
    put(&b,
        "# HELP strata_expert_store_queue_depth Reads in flight at most (io_uring entries).\n"
        "# TYPE strata_expert_store_queue_depth gauge\nstrata_expert_store_queue_depth %d\n",
        x->queue_depth);
    put(&b, "# HELP strata_expert_store_picks_total Expert picks by layer and result.\n"
            "# TYPE strata_expert_store_picks_total counter\n");
    for (int l = 0; l < x->n_layer; l++)
        put(&b,
            "strata_expert_store_picks_total{layer=\"%d\",result=\"hit\"} %llu\n"
            "strata_expert_store_picks_total{layer=\"%d\",result=\"miss\"} %llu\n",
            l, (unsigned long long)x->layer_hits[l], l, (unsigned long long)x->layer_misses[l]);
    put(&b, "# HELP strata_expert_store_read_seconds Read latency, submission to completion.\n"
            "# TYPE strata_expert_store_read_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < LAT_BUCKETS; i++) {
        cum += x->lat[i];
        if (i < LAT_BUCKETS - 1)
            put(&b, "strata_expert_store_read_seconds_bucket{le=\"%g\"} %llu\n",
                (double)(16ll << i) / 1e6, (unsigned long long)cum);
        else
            put(&b, "strata_expert_store_read_seconds_bucket{le=\"+Inf\"} %llu\n",
                (unsigned long long)cum);
    }
    put(&b,
        "strata_expert_store_read_seconds_sum %.6f\n"
        "strata_expert_store_read_seconds_count %llu\n",
        (double)x->lat_sum_us / 1e6, (unsigned long long)x->reads);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
