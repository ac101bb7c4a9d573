/* server/sched-xstore.c: the expert store's part of the scheduler: the
 * start-up decision (--expert-store auto|on|off, --expert-ram, --expert-io,
 * --expert-direct over engine/experts/xstore.h xstore_plan) from the file's
 * header, the KV plan and the memory budget, before the model loads; and its
 * counters for /status and /metrics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/experts/profile.h"
#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"
#include "server/sched-impl.h"

int sched_xstore_plan(struct sched *s, const struct sched_params *p, struct strata_error *err) {
    if (!(s->xs = calloc(1, sizeof *s->xs)))
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    struct model_probe mp;
    if (model_probe(p->model_path, &mp, err))
        return err && err->code ? err->code : STRATA_E_FORMAT;
    struct xstore_plan_in in = {
        .mode = p->expert_store ? p->expert_store : "auto",
        .io = p->expert_io ? p->expert_io : "auto",
        .direct = p->expert_direct ? p->expert_direct : "auto",
        .fixed = p->expert_fixed ? p->expert_fixed : "auto",
        .ram = p->expert_ram,
        .prefetch = p->expert_prefetch,
        .model_bytes = mp.n_bytes,
        .mem_budget = p->mem_budget,
    };
    if (mp.hp.n_expert > 0) { /* the experts' share, from the tensor table alone */
        struct gguf_file *f = gguf_open(p->model_path, err);
        if (!f)
            return err && err->code ? err->code : STRATA_E_FORMAT;
        in.expert_bytes = xstore_expert_bytes(f);
        gguf_close(f);
    }
    struct sched_plan pl; /* the KV pool the plan will make (512: model_params' batch) */
    if (sched_plan(p, &mp.hp, 512, &pl, NULL) == 0)
        in.kv_bytes = pl.kv_bytes;
    int rc = xstore_plan(&in, s->xs, err);
    if (rc == 0 && s->xs->on && p->expert_profile && *p->expert_profile)
        /* the hottest experts first into the slots; a missing or bad file is
         * the profile owner's to report (sched-profile.c), here it is none */
        s->xs->params.warm_profile = profile_load(p->expert_profile, NULL);
    return rc;
}

void sched_xstore_loaded(struct sched *s) {
    if (!s->xs)
        return;
    const bool from_profile = s->xs->params.warm_profile != NULL;
    profile_free((struct profile *)s->xs->params.warm_profile);
    s->xs->params.warm_profile = NULL;
    struct xstore *x = s->model ? xstore_of(model_experts(s->model)) : NULL;
    if (!x || s->xs_logged)
        return;
    s->xs_logged = true;
    struct xstore_stats st;
    xstore_stats(x, &st);
    fprintf(stderr,
            "strata: expert store: %s; %s, queue depth %d (%s), registered buffers %s, %d slots "
            "of %.2f MiB, %.1f MiB read at load (%s)\n",
            s->xs->rule, xstore_mode(x), st.queue_depth, st.queue_rule ? st.queue_rule : "",
            st.fixed_rule ? st.fixed_rule : "", st.n_slots,
            (double)st.slot_bytes / (1024.0 * 1024.0), (double)st.warm_bytes / (1024.0 * 1024.0),
            from_profile ? "hottest experts of --expert-profile first" : "experts by id");
    xstore_stats_free(&st);
}

void sched_xstore_stats(const struct sched *s, struct gen_stats *st) {
    struct gen_xstore *g = &st->xstore;
    if (s->xs)
        snprintf(g->rule, sizeof g->rule, "%s", s->xs->rule);
    struct xstore *x = s->model ? xstore_of(model_experts(s->model)) : NULL;
    g->on = x != NULL;
    if (!x)
        return;
    struct xstore_stats xs;
    xstore_stats(x, &xs);
    snprintf(g->mode, sizeof g->mode, "%s", xstore_mode(x));
    g->n_slots = xs.n_slots;
    g->slots_used = xs.slots_used;
    g->n_layer = xs.n_layer < GEN_XSTORE_LAYERS_MAX ? xs.n_layer : GEN_XSTORE_LAYERS_MAX;
    g->slot_bytes = xs.slot_bytes;
    g->capacity_bytes = xs.capacity_bytes;
    g->used_bytes = xs.used_bytes;
    g->hits = xs.hits;
    g->misses = xs.misses;
    g->overflow = xs.overflow;
    g->evictions = xs.evictions;
    g->read_errors = xs.read_errors;
    g->bytes_read = xs.bytes_read;
    g->reads = xs.reads;
    g->batches = xs.batches;
    g->warm_bytes = xs.warm_bytes;
    g->lat_sum_us = xs.lat_sum_us;
    g->prefetch_dropped = xs.prefetch_dropped;
    g->queue_depth = xs.queue_depth;
    g->prefetch_issued = xs.prefetch_issued;
    g->prefetch_useful = xs.prefetch_useful;
    g->prefetch_wasted = xs.prefetch_wasted;
    g->pred_hit = xs.pred_hit;
    g->pred_used = xs.pred_used;
    g->pred_n = xs.pred_n;
    snprintf(g->queue_rule, sizeof g->queue_rule, "%s", xs.queue_rule ? xs.queue_rule : "");
    g->fixed = xs.fixed;
    snprintf(g->fixed_rule, sizeof g->fixed_rule, "%s", xs.fixed_rule ? xs.fixed_rule : "");
    _Static_assert(sizeof g->lat / sizeof g->lat[0] == XSTORE_LAT_BUCKETS, "histogram buckets");
    memcpy(g->lat, xs.lat, sizeof g->lat);
    for (int l = 0; l < g->n_layer && xs.layer_hits && xs.layer_misses; l++) {
        g->layer_hits[l] = xs.layer_hits[l];
        g->layer_misses[l] = xs.layer_misses[l];
    }
    xstore_stats_free(&xs);
}
