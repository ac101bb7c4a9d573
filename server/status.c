/* server/status.c: GET /health, /status, /metrics, /v1/models[/{id}]. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/server-impl.h"

static void gen_stats_of(struct server *s, struct gen_stats *st) {
    memset(st, 0, sizeof(*st));
    if (atomic_load(&s->ready) && s->p.gen.ops) /* ready publishes p.gen */
        s->p.gen.ops->stats(s->p.gen.self, st);
}

static int connections_of(struct server *s) {
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? (int)info->num_connections : -1;
}

enum MHD_Result status_health(struct exchange *ex) {
    struct server *s = ex->srv;
    if (atomic_load(&s->draining))
        return http_respond_error(ex, STRATA_E_UNAVAILABLE, "server is shutting down", NULL, NULL);
    if (!atomic_load(&s->ready))
        return http_respond_error(ex, STRATA_E_UNAVAILABLE, "model is loading", NULL, NULL);
    return http_respond_json(ex, 200, strdup("{\"status\":\"ok\"}"));
}

enum MHD_Result status_status(struct exchange *ex) {
    struct server *s = ex->srv;
    struct gen_stats st;
    gen_stats_of(s, &st);
    pthread_mutex_lock(&s->mu);
    int n_pending = s->n_pending;
    pthread_mutex_unlock(&s->mu);
    json_t *o = json_pack(
        "{s:s, s:b, s:b, s:s, s:s, s:s, s:I, s:{s:i, s:s}, s:I, s:{s:I, s:I}, s:{s:i, s:i, "
        "s:i}, s:{s:I, s:I}, s:f, s:{s:I, s:I}, s:{s:i, s:I, s:f}}",
        "status", st.ready && atomic_load(&s->ready) ? "ok" : "loading", "ready",
        (int)atomic_load(&s->ready), "draining", (int)atomic_load(&s->draining), "model",
        st.model_id, "architecture", st.architecture, "quant_mix", st.quant_mix, "n_ctx",
        (json_int_t)st.n_ctx, "threads", "effective", st.n_threads, "source", st.threads_source,
        "pool_dispatches", (json_int_t)st.pool_dispatches, "kv", "used", (json_int_t)st.kv_used,
        "total", (json_int_t)st.kv_total, "sessions", "active", st.n_active, "queued", st.n_queued,
        "http_pending", n_pending, "tokens", "prompt", (json_int_t)st.tokens_prompt, "generated",
        (json_int_t)st.tokens_generated, "recent_tok_s", st.recent_tok_s, "prefix_cache", "hits",
        (json_int_t)st.cache_hits, "misses", (json_int_t)st.cache_misses, "http", "connections",
        connections_of(s), "requests", (json_int_t)metrics_requests_total(s->metrics), "uptime_s",
        server_now() - s->t_start);
    if (!o)
        return http_respond_error(ex, STRATA_E_NOMEM, NULL, NULL, NULL);
    /* paged KV pool and prefix cache (generation layer, engineer s) */
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
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
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
    enum MHD_Result rc = MHD_queue_response(ex->conn, 200, r);
    MHD_destroy_response(r);
    ex->phase = PHASE_RESPONDED;
    return rc;
}

static json_t *model_object(const struct gen_stats *st, double created) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", st->model_id, "object", "model", "created",
                     (json_int_t)created, "owned_by", "strata");
}

enum MHD_Result status_models(struct exchange *ex, const char *id) {
    struct server *s = ex->srv;
    struct gen_stats st;
    gen_stats_of(s, &st);
    /* created: process start in Unix seconds would need the wall clock; the
     * model file's age is not known here, so 0 like llama.cpp's /v1/models. */
    json_t *o;
    if (id) {
        if (!*st.model_id || strcmp(id, st.model_id)) {
            char msg[256];
            snprintf(msg, sizeof(msg), "model '%.128s' does not exist", id);
            return http_respond_error(ex, STRATA_E_NOT_FOUND, msg, "model", NULL);
        }
        o = model_object(&st, 0);
    } else {
        json_t *data = json_array();
        if (data && *st.model_id)
            json_array_append_new(data, model_object(&st, 0));
        o = json_pack("{s:s, s:o}", "object", "list", "data", data);
    }
    if (!o)
        return http_respond_error(ex, STRATA_E_NOMEM, NULL, NULL, NULL);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return http_respond_json(ex, 200, text);
}
