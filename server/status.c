/* server/status.c: GET /health, /status, /metrics, /v1/models[/{id}].
 *
 * /status is one JSON object; a field nobody can fill yet is null and
 * "notes" says why (expert_store: the rule that left it off; arena; quant_mix and model.path until
 * the generation layer reports them; expert_profile without --expert-profile). Handlers run on the
 * MHD thread and never block: gen stats are a snapshot, NUMA topology is loaded once. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu/kernels.h"
#include "engine/host/numa.h"
#include "server/server-impl.h"
#include "server/status-gpu.h"
#include "server/status-xstore.h"

static void gen_stats_of(struct server *s, struct gen_stats *st) {
    memset(st, 0, sizeof(*st));
    if (atomic_load(&s->ready) && s->p.gen.ops) /* ready publishes p.gen */
        s->p.gen.ops->stats(s->p.gen.self, st);
}

/* Open connections: those the front still holds (request headers on their
 * way) and those MHD serves. */
static int connections_of(struct server *s) {
    return front_n_connections(s->front);
}

enum MHD_Result status_health(struct exchange *ex) {
    struct server *s = ex->srv;
    if (atomic_load(&s->draining))
        return http_respond_error(ex, STRATA_E_UNAVAILABLE, "server is shutting down", NULL, NULL);
    if (!atomic_load(&s->ready))
        return http_respond_error(ex, STRATA_E_UNAVAILABLE, "model is loading", NULL, NULL);
    return http_respond_json(ex, 200, strdup("{\"status\":\"ok\"}"));
}

/* ---- NUMA (engine/host/numa.h) --------------------------------------------- */

static json_t *nodes_json(const struct host_numa_nodes *n) {
    if (n->n < 0)
        return json_null();
    json_t *a = json_array();
    for (int i = 0; a && i < n->n; i++)
        json_array_append_new(a, json_integer(n->ids[i]));
    return a;
}

/* The topology and what --numa chose (engine/model/model-numa.h): "topology",
 * "mode", "decision" (the why line), "groups" [{node, threads, cpus}],
 * "placement" {how, bytes_first_touched, bytes_moved, bytes_filled, shares,
 * note}. */
static void numa_plan_json(json_t *o) {
    const struct host_numa_topo *t = host_numa_topo();
    if (t) {
        json_t *g = json_array();
        for (int i = 0; g && i < t->n_gpus; i++)
            json_array_append_new(
                g, json_pack("{s:s, s:i}", "name", t->gpus[i].name, "node",
                             t->gpus[i].node >= 0 ? t->nodes[t->gpus[i].node].os_index : -1));
        json_object_set_new(o, "topology",
                            json_pack("{s:i, s:i, s:i, s:b, s:o}", "packages", t->n_packages,
                                      "cores", t->n_cores, "cpus", t->n_pus, "smt", t->smt, "gpus",
                                      g ? g : json_array()));
    }
    struct host_numa_report r;
    if (!host_numa_report_get(&r))
        return;
    json_object_set_new(o, "mode", json_string(host_numa_mode_name(r.plan.mode.kind)));
    json_object_set_new(o, "decision", json_string(r.plan.why));
    json_t *groups = json_array();
    for (int g = 0; groups && g < r.plan.n_groups; g++) {
        char cl[256] = "";
        if (!r.plan.logical)
            host_cpuset_format(&r.plan.cpus[g], cl, sizeof cl);
        json_array_append_new(groups,
                              json_pack("{s:i, s:i, s:s, s:b}", "node", r.plan.node[g], "threads",
                                        r.plan.threads[g], "cpus", cl, "logical", r.plan.logical));
    }
    json_object_set_new(o, "groups", groups);
    json_t *sh = json_array();
    for (int g = 0; sh && g < 2; g++)
        if (r.share[g] >= 0)
            json_array_append_new(sh, json_real(r.share[g]));
    json_object_set_new(o, "placement",
                        json_pack("{s:s, s:I, s:I, s:I, s:o, s:f, s:s}", "how", r.placement,
                                  "bytes_first_touched", (json_int_t)r.bytes_first_touched,
                                  "bytes_moved", (json_int_t)r.bytes_moved, "bytes_filled",
                                  (json_int_t)r.bytes_filled, "shares", sh ? sh : json_array(),
                                  "ms", r.place_ms, "note", r.note));
}

/* {"nodes", "bound", "binding", "cpubind_nodes", "threads_on_nodes",
 * "membind":{"policy","nodes"}} or NULL (note filled). */
static json_t *numa_json(char *note, size_t cap) {
    struct host_numa n;
    if (host_numa_query(&n, note, cap) < 0)
        return NULL;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "nodes", json_integer(n.n_nodes));
    json_object_set_new(o, "cpubind_nodes", nodes_json(&n.cpubind));
    json_object_set_new(o, "threads_on_nodes", nodes_json(&n.threads_on));
    json_object_set_new(o, "membind",
                        n.membind_policy ? json_pack("{s:s, s:o}", "policy", n.membind_policy,
                                                     "nodes", nodes_json(&n.membind))
                                         : json_null());
    json_object_set_new(o, "bound", json_boolean(n.cpu_bound || n.mem_bound));
    json_object_set_new(o, "binding", json_string(n.binding));
    numa_plan_json(o);
    return o;
}

/* ---- GET /status ------------------------------------------------------------ */

/* Sets o[key] to value, or to null with notes[note_key] = note when value
 * is NULL (note_key NULL: key). */
static void set_or_note(json_t *o, json_t *notes, const char *key, const char *note_key,
                        json_t *value, const char *note) {
    if (value) {
        json_object_set_new(o, key, value);
        return;
    }
    json_object_set_new(o, key, json_null());
    json_object_set_new(notes, note_key ? note_key : key, json_string(note));
}

static json_t *quant_mix_json(const struct gen_stats *st) {
    if (st->n_weight_types <= 0)
        return NULL;
    json_t *o = json_object();
    int n = st->n_weight_types < GEN_WEIGHT_TYPES_MAX ? st->n_weight_types : GEN_WEIGHT_TYPES_MAX;
    for (int i = 0; i < n; i++) {
        const struct gen_weight_type *w = &st->weight_types[i];
        json_object_set_new(o, w->type[0] ? w->type : "?",
                            json_pack("{s:I, s:I}", "tensors", (json_int_t)w->n_tensors, "bytes",
                                      (json_int_t)w->n_bytes));
    }
    return o;
}

static json_t *kv_json(const struct gen_stats *st) {
    json_t *o = json_pack("{s:I, s:I, s:I}", "used", (json_int_t)st->kv_used, "total",
                          (json_int_t)st->kv_total, "capacity", (json_int_t)st->kv_total);
    if (!o)
        return NULL;
    /* bytes: blocks not free are held by sessions or by the prefix cache */
    if (st->kv_block_bytes) {
        int64_t held = st->kv_blocks_total - st->kv_blocks_free;
        json_object_set_new(o, "bytes_used",
                            json_integer((json_int_t)(held * (int64_t)st->kv_block_bytes)));
        json_object_set_new(
            o, "bytes_total",
            json_integer((json_int_t)(st->kv_blocks_total * (int64_t)st->kv_block_bytes)));
    } else {
        json_object_set_new(o, "bytes_used", json_null());
        json_object_set_new(o, "bytes_total", json_null());
    }
    return o;
}

/* The routing profile (--expert-profile): {path, active, state, picks,
 * tokens, loaded_picks, saves, last_save (Unix s or null), last_save_age_s,
 * save_error}; NULL without the option. */
static json_t *profile_json(const struct gen_stats *st) {
    if (!st->profile_path[0])
        return NULL;
    json_t *o = json_pack("{s:s, s:b, s:s, s:I, s:I, s:I, s:I}", "path", st->profile_path, "active",
                          (int)st->profile_active, "state", st->profile_state, "picks",
                          (json_int_t)st->profile_picks, "tokens", (json_int_t)st->profile_tokens,
                          "loaded_picks", (json_int_t)st->profile_loaded_picks, "saves",
                          (json_int_t)st->profile_saves);
    if (!o)
        return NULL;
    if (st->profile_last_save > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        json_object_set_new(o, "last_save", json_real(st->profile_last_save));
        json_object_set_new(o, "last_save_age_s", json_real(now - st->profile_last_save));
    } else {
        json_object_set_new(o, "last_save", json_null());
        json_object_set_new(o, "last_save_age_s", json_null());
    }
    json_object_set_new(o, "save_error",
                        st->profile_save_error[0] ? json_string(st->profile_save_error)
                                                  : json_null());
    return o;
}

enum MHD_Result status_status(struct exchange *ex) {
    struct server *s = ex->srv;
    struct gen_stats st;
    gen_stats_of(s, &st);
    pthread_mutex_lock(&s->mu);
    int n_pending = s->n_pending;
    pthread_mutex_unlock(&s->mu);
    json_t *o = json_pack(
        "{s:s, s:b, s:b, s:{s:s}, s:s, s:I, s:{s:i, s:s}, s:I, s:{s:i, s:i, "
        "s:i}, s:{s:I, s:I}, s:f, s:{s:I, s:I}, s:{s:i, s:I, s:f}}",
        "status", st.ready && atomic_load(&s->ready) ? "ok" : "loading", "ready",
        (int)atomic_load(&s->ready), "draining", (int)atomic_load(&s->draining), "model", "id",
        st.model_id, "architecture", st.architecture, "n_ctx", (json_int_t)st.n_ctx, "threads",
        "effective", st.n_threads, "source", st.threads_source, "pool_dispatches",
        (json_int_t)st.pool_dispatches, "sessions", "active", st.n_active, "queued", st.n_queued,
        "http_pending", n_pending, "tokens", "prompt", (json_int_t)st.tokens_prompt, "generated",
        (json_int_t)st.tokens_generated, "recent_tok_s", st.recent_tok_s, "prefix_cache", "hits",
        (json_int_t)st.cache_hits, "misses", (json_int_t)st.cache_misses, "http", "connections",
        connections_of(s), "requests", (json_int_t)metrics_requests_total(s->metrics), "uptime_s",
        strata_now() - s->t_start);
    json_t *notes = json_object();
    if (!o || !notes) {
        json_decref(o);
        json_decref(notes);
        return http_respond_error(ex, STRATA_E_NOMEM, NULL, NULL, NULL);
    }
    /* the front's accept policy: idle connections dropped to make room, and
     * connections whose request headers did not arrive within --timeout */
    uint64_t n_evicted = 0, n_header_timeout = 0;
    front_counters(s->front, &n_evicted, &n_header_timeout);
    json_t *http = json_object_get(o, "http");
    json_object_set_new(http, "evicted", json_integer((json_int_t)n_evicted));
    json_object_set_new(http, "header_timeouts", json_integer((json_int_t)n_header_timeout));
    json_t *model = json_object_get(o, "model");
    set_or_note(model, notes, "path", "model.path",
                st.model_path[0] ? json_string(st.model_path) : NULL,
                "not reported by the generation layer");
    set_or_note(o, notes, "quant_mix", NULL, quant_mix_json(&st),
                "not reported by the generation layer (gen_stats.weight_types empty)");
    json_object_set_new(o, "kv", kv_json(&st));
    if (!st.kv_block_bytes)
        json_object_set_new(notes, "kv.bytes", json_string("gen_stats.kv_block_bytes not set"));
    /* paged KV pool and prefix cache (generation layer) */
    uint64_t lookups = st.cache_hits + st.cache_misses;
    json_object_set_new(
        o, "kv_blocks",
        json_pack("{s:i, s:I, s:I, s:I, s:I}", "block_size", st.kv_block_size, "total",
                  (json_int_t)st.kv_blocks_total, "used", (json_int_t)st.kv_blocks_used, "free",
                  (json_int_t)st.kv_blocks_free, "cached", (json_int_t)st.kv_blocks_cached));
    json_t *pcj = json_object_get(o, "prefix_cache");
    if (pcj) {
        json_object_set_new(pcj, "hit_rate",
                            json_real(lookups ? (double)st.cache_hits / (double)lookups : 0.0));
        json_object_set_new(pcj, "cached_tokens", json_integer((json_int_t)st.cached_tokens));
    }
    /* n > 1: prompt positions later choices shared from the first's KV */
    json_object_set_new(o, "shared_prompt_tokens", json_integer((json_int_t)st.shared_tokens));
    /* the kernel table every matmul dispatches through (process-wide) */
    json_t *kj = json_pack("{s:s, s:s}", "isa", kernels_isa_name(kernels_isa_active()), "detected",
                           kernels_isa_name(kernels_isa_detected()));
    if (kj && st.weights_layout[0]) {
        /* what the weights were laid out for at load (the ISA active then) */
        json_object_set_new(kj, "isa_at_load", json_string(st.isa));
        json_object_set_new(kj, "weights_layout", json_string(st.weights_layout));
        json_object_set_new(kj, "weights_copied_bytes",
                            json_integer((json_int_t)st.weights_copied_bytes));
        json_object_set_new(kj, "weights_packed_bytes",
                            json_integer((json_int_t)st.weights_packed_bytes));
    }
    json_object_set_new(o, "kernels", kj);
    char numa_note[128] = "";
    set_or_note(o, notes, "numa", NULL, numa_json(numa_note, sizeof(numa_note)), numa_note);
    set_or_note(o, notes, "expert_store", NULL, status_xstore_json(&st),
                st.xstore.rule[0] ? st.xstore.rule : "the expert store is off");
    set_or_note(o, notes, "gpu", NULL, status_gpu_json(&st),
                st.gpu.rule[0] ? st.gpu.rule : "the CPU computes");
    set_or_note(o, notes, "arena", NULL, NULL, "no arena module yet");
    set_or_note(o, notes, "expert_profile", NULL, profile_json(&st),
                "no --expert-profile (the routing profile is not recorded)");
    json_object_set_new(o, "notes", notes);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return http_respond_error(ex, STRATA_E_NOMEM, NULL, NULL, NULL);
    return http_respond_json(ex, 200, text);
}

enum MHD_Result status_metrics(struct exchange *ex) {
    struct server *s = ex->srv;
    struct gen_stats st;
    gen_stats_of(s, &st);
    /* Counted before rendering so the scrape sees itself. */
    metrics_count_request(s->metrics, METRICS_ROUTE_METRICS, 200);
    char *text = metrics_render(s->metrics, &st, connections_of(s));
    if (!text)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4");
    http_common_headers(ex, r);
    ex->log_status = 200;
    enum MHD_Result rc = MHD_queue_response(ex->conn, 200, r);
    MHD_destroy_response(r);
    ex->phase = PHASE_RESPONDED;
    return rc;
}

/* OpenAI's model object; created is the GGUF file's modification time (Unix
 * seconds; 0 when unknown). "meta" (llama-server's name for it) says what
 * is served: architecture, the serving and trained context, parameters,
 * file bytes, the quantisation (the type holding most tensor bytes; the
 * start-up log prints each type's byte share) and the quant mix
 * (gen_stats.quant_mix: tensors of each type, "q4_k:193,f32:65"). */
static json_t *model_object(const struct gen_stats *st) {
    json_t *meta = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:s, s:s}", "architecture", st->architecture, "n_ctx",
        (json_int_t)st->n_ctx, "n_ctx_train", (json_int_t)st->n_ctx_train, "n_params",
        (json_int_t)st->n_params, "size", (json_int_t)st->file_bytes, "quantization",
        st->n_weight_types > 0 ? st->weight_types[0].type : "", "quant_mix", st->quant_mix);
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", st->model_id, "object", "model", "created",
                     (json_int_t)st->file_mtime, "owned_by", "strata", "meta", meta);
}

enum MHD_Result status_models(struct exchange *ex, const char *id) {
    struct server *s = ex->srv;
    struct gen_stats st;
    gen_stats_of(s, &st);
    json_t *o;
    if (id) {
        if (!*st.model_id || strcmp(id, st.model_id)) {
            char msg[256];
            /* cut at a character boundary: the id is any bytes of the URL */
            snprintf(msg, sizeof(msg), "model '%.*s' does not exist", strata_utf8_cut(id, 128), id);
            return http_respond_error(ex, STRATA_E_NOT_FOUND, msg, "model", NULL);
        }
        o = model_object(&st);
    } else {
        json_t *data = json_array();
        if (data && *st.model_id)
            json_array_append_new(data, model_object(&st));
        o = json_pack("{s:s, s:o}", "object", "list", "data", data);
    }
    if (!o)
        return http_respond_error(ex, STRATA_E_NOMEM, NULL, NULL, NULL);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return http_respond_json(ex, 200, text);
}
