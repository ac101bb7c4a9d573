/* server/sched-embed.c: POST /v1/embeddings, /tokenize and /detokenize on
 * the scheduler (see sched.h and sched-impl.h).
 *
 * Embeddings: the request is parsed on the HTTP thread (OpenAI's shapes:
 * input a string, an array of strings, an array of token ids or an array of
 * arrays of ids; encoding_format "float" or "base64"; dimensions), its text
 * inputs tokenized on a prep thread (add_special: BOS/EOS as the GGUF's
 * add_bos_token / add_eos_token say; special-token text is not recognised,
 * as for completions), then on the scheduler thread each input becomes a job
 * of its own (sched_aux_take): it waits, is admitted into a KV sequence and
 * is prefilled like any prompt, in the same steps as the running streams, so
 * several inputs of one request and of concurrent requests share a step
 * (one each per free sequence, `--parallel`). Its pooled positions are
 * marked for model_forward_hidden; their hidden rows are pooled
 * (engine/model/embed.h) and, once the input is in, normalised into the
 * request's result. The request answers when its last input is done; the
 * first failing input fails it (the others are dropped at the next step).
 * LAST pooling may reuse cached prefix blocks (the last position is always
 * computed); MEAN and CLS never do.
 *
 * A model without <arch>.pooling_type is refused (400 unsupported, param
 * "model"): pooling a generative model's states would give vectors nobody
 * trained for. `dimensions` keeps the first N components and normalises
 * again (what OpenAI's text-embedding-3 models do).
 *
 * /tokenize {content, add_special = false, parse_special = true,
 * with_pieces = false} and /detokenize {tokens}: llama-server's shapes, done
 * on a prep thread; the answer is sent from the scheduler thread (gen.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/model/embed.h"
#include "server/sched-impl.h"

#define AUX_MAX_INPUTS 2048 /* OpenAI's limit of inputs per embeddings request */

struct sched_aux {
    struct sched *s; /* borrowed: the owner */
    enum gen_route route;
    int n_inputs;
    char **texts;              /* (n_inputs) owned; NULL entries for id inputs */
    size_t *text_len;          /* (n_inputs) bytes */
    struct tokenizer_ids *ids; /* (n_inputs) token ids (given, or from prep) */
    bool base64;
    int dims; /* components returned (n_embd, or `dimensions`) */
    bool add_special, parse_special, with_pieces; /* /tokenize */
    char *body;                                   /* prep's answer (tokenize/detokenize) */
    char param[64];                               /* the failing field */
    float *out;                                   /* (n_inputs, n_embd) results */
    int n_left;                                   /* inputs not finished */
    int64_t n_tokens;                             /* tokens of every input */
    int err_code;                                 /* first input's failure, 0 = none */
    struct strata_error err;
};

static int fail(struct strata_error *err, char *param, size_t cap, int code, const char *field,
                const char *msg) {
    snprintf(param, cap, "%s", field);
    return strata_error_set(err, code, "%s", msg);
}

static void aux_free(struct sched_aux *a) {
    if (!a)
        return;
    for (int i = 0; i < a->n_inputs; i++) {
        if (a->texts)
            free(a->texts[i]);
        if (a->ids)
            tokenizer_ids_free(&a->ids[i]);
    }
    free(a->texts);
    free(a->text_len);
    free(a->ids);
    free(a->body);
    free(a->out);
    free(a);
}

void sched_aux_clear(struct gen_job *j) {
    aux_free(j->aux);
    j->aux = NULL;
    free(j->emb_acc);
    j->emb_acc = NULL;
}

static json_t *field(const json_t *body, const char *key) {
    json_t *v = json_object_get(body, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int opt_bool(const json_t *body, const char *key, bool def, bool *out,
                    struct strata_error *err, char *param, size_t cap) {
    json_t *v = field(body, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        char msg[96];
        snprintf(msg, sizeof msg, "'%s' must be a boolean", key);
        return fail(err, param, cap, STRATA_E_INVALID, key, msg);
    }
    *out = json_is_true(v);
    return 0;
}

/* An array of token ids into ids; where names the array ("input[2]"). */
static int parse_ids(const json_t *arr, int n_vocab, const char *where, struct tokenizer_ids *ids,
                     struct strata_error *err, char *param, size_t cap) {
    size_t n = json_array_size(arr);
    if (n == 0) {
        snprintf(param, cap, "%s", where);
        return strata_error_set(err, STRATA_E_INVALID, "'%s' must not be empty", where);
    }
    if (!(ids->ids = malloc(n * sizeof *ids->ids)))
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    ids->cap = n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        json_int_t t = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || t < 0 || t >= n_vocab) {
            snprintf(param, cap, "%s[%zu]", where, i);
            return strata_error_set(err, json_is_integer(v) ? STRATA_E_RANGE : STRATA_E_INVALID,
                                    "'%s[%zu]' must be a token id in [0, %d)", where, i, n_vocab);
        }
        ids->ids[ids->n++] = (int32_t)t;
    }
    return 0;
}

static int context_error(const struct sched *s, size_t n, const char *where,
                         struct strata_error *err, char *param, size_t cap) {
    snprintf(param, cap, "%s", where);
    return strata_error_set(err, STRATA_E_CONTEXT_LENGTH,
                            "This model's maximum context length is %d tokens, however you "
                            "requested %zu tokens (%zu in your input). Please reduce your input.",
                            s->n_ctx, n, n);
}

static int parse_embeddings(struct sched *s, const json_t *body, struct sched_aux *a,
                            struct strata_error *err, char *param, size_t cap) {
    json_t *in = field(body, "input");
    if (!in)
        return fail(err, param, cap, STRATA_E_INVALID, "input", "'input' is required");
    size_t n = 1;
    bool one_list = false; /* input is one array of ids */
    if (json_is_array(in)) {
        n = json_array_size(in);
        if (n == 0)
            return fail(err, param, cap, STRATA_E_INVALID, "input", "'input' must not be empty");
        one_list = json_is_integer(json_array_get(in, 0));
        if (one_list)
            n = 1;
    } else if (!json_is_string(in)) {
        return fail(err, param, cap, STRATA_E_INVALID, "input",
                    "'input' must be a string, an array of strings, an array of token ids or an "
                    "array of arrays of token ids");
    }
    if (n > AUX_MAX_INPUTS) {
        snprintf(param, cap, "input");
        return strata_error_set(err, STRATA_E_INVALID, "'input' has %zu entries (at most %d)", n,
                                AUX_MAX_INPUTS);
    }
    a->n_inputs = (int)n;
    a->texts = calloc(n, sizeof *a->texts);
    a->text_len = calloc(n, sizeof *a->text_len);
    a->ids = calloc(n, sizeof *a->ids);
    if (!a->texts || !a->text_len || !a->ids)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    char where[48];
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_array(in) && !one_list ? json_array_get(in, i) : in;
        snprintf(where, sizeof where, json_is_array(in) && !one_list ? "input[%zu]" : "input", i);
        const json_t *first = json_is_array(in) && !one_list ? json_array_get(in, 0) : v;
        if (json_is_string(v) && json_is_string(first)) {
            if (json_string_length(v) == 0) {
                snprintf(param, cap, "%s", where);
                return strata_error_set(err, STRATA_E_INVALID, "'%s' must not be empty", where);
            }
            a->text_len[i] = json_string_length(v);
            if (!(a->texts[i] = malloc(a->text_len[i] + 1)))
                return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
            memcpy(a->texts[i], json_string_value(v), a->text_len[i] + 1);
            a->text_len[i] = json_string_length(v);
        } else if (json_is_array(v) && json_is_array(first)) {
            int rc = parse_ids(v, s->n_vocab, where, &a->ids[i], err, param, cap);
            if (rc < 0)
                return rc;
            if (a->ids[i].n > (size_t)s->n_ctx)
                return context_error(s, a->ids[i].n, where, err, param, cap);
        } else {
            snprintf(param, cap, "%s", where);
            return strata_error_set(
                err, STRATA_E_INVALID, "'%s' must be %s like the first entry", where,
                json_is_string(json_array_get(in, 0)) ? "a string" : "an array of token ids");
        }
    }
    json_t *fmt = field(body, "encoding_format");
    if (fmt && (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "float") &&
                                         strcmp(json_string_value(fmt), "base64"))))
        return fail(err, param, cap, STRATA_E_INVALID, "encoding_format",
                    "'encoding_format' must be \"float\" or \"base64\"");
    a->base64 = fmt && !strcmp(json_string_value(fmt), "base64");
    a->dims = s->n_embd;
    json_t *d = field(body, "dimensions");
    if (d) {
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > s->n_embd) {
            snprintf(param, cap, "dimensions");
            return strata_error_set(err, json_is_integer(d) ? STRATA_E_RANGE : STRATA_E_INVALID,
                                    "'dimensions' must be an integer in [1, %d]", s->n_embd);
        }
        a->dims = (int)json_integer_value(d);
    }
    json_t *user = field(body, "user");
    if (user && !json_is_string(user))
        return fail(err, param, cap, STRATA_E_INVALID, "user", "'user' must be a string");
    if (!(a->out = calloc((size_t)n * (size_t)s->n_embd, sizeof *a->out)))
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    return 0;
}

static int parse_tokenize(const struct sched *s, const json_t *body, struct sched_aux *a,
                          struct strata_error *err, char *param, size_t cap) {
    int rc;
    if (a->route == GEN_ROUTE_TOKENIZE) {
        json_t *c = field(body, "content");
        if (!json_is_string(c))
            return fail(err, param, cap, STRATA_E_INVALID, "content",
                        "'content' is required and must be a string");
        a->n_inputs = 1;
        a->texts = calloc(1, sizeof *a->texts);
        a->text_len = calloc(1, sizeof *a->text_len);
        a->ids = calloc(1, sizeof *a->ids);
        if (!a->texts || !a->text_len || !a->ids ||
            !(a->texts[0] = malloc(json_string_length(c) + 1)))
            return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        a->text_len[0] = json_string_length(c);
        memcpy(a->texts[0], json_string_value(c), a->text_len[0] + 1);
        if ((rc = opt_bool(body, "add_special", false, &a->add_special, err, param, cap)) < 0 ||
            (rc = opt_bool(body, "parse_special", true, &a->parse_special, err, param, cap)) < 0 ||
            (rc = opt_bool(body, "with_pieces", false, &a->with_pieces, err, param, cap)) < 0)
            return rc;
        return 0;
    }
    json_t *t = field(body, "tokens");
    if (!json_is_array(t))
        return fail(err, param, cap, STRATA_E_INVALID, "tokens",
                    "'tokens' is required and must be an array of token ids");
    a->n_inputs = 1;
    if (!(a->ids = calloc(1, sizeof *a->ids)))
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    if (json_array_size(t) == 0)
        return 0; /* "" */
    return parse_ids(t, s->n_vocab, "tokens", &a->ids[0], err, param, cap);
}

int sched_aux_submit(struct sched *s, const struct gen_submit *req, struct gen_sink sink,
                     struct gen_submit_out *out, struct strata_error *err) {
    char *param = out->error_param;
    const size_t cap = sizeof out->error_param;
    json_t *body = req->body;
    if (req->stream)
        return fail(err, param, cap, STRATA_E_INVALID, "stream",
                    "'stream' is not supported on this route");
    if (req->route == GEN_ROUTE_EMBEDDINGS) {
        json_t *model = field(body, "model");
        if (!json_is_string(model))
            return fail(err, param, cap, STRATA_E_INVALID, "model",
                        "'model' is required and must be a string");
        if (strcmp(json_string_value(model), s->model_id)) {
            snprintf(param, cap, "model");
            return strata_error_set(err, STRATA_E_NOT_FOUND,
                                    "The model '%.100s' does not exist; this server serves '%s'",
                                    json_string_value(model), s->model_id);
        }
        struct strata_error perr = {0};
        if (embed_pooling_check(s->pooling, &perr) < 0) {
            snprintf(param, cap, "model");
            return strata_error_set(err, perr.code, "model '%s': %s", s->model_id, perr.message);
        }
    }
    struct gen_job *j = calloc(1, sizeof *j);
    struct sched_aux *a = calloc(1, sizeof *a);
    if (!j || !a) {
        free(j), free(a);
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    }
    a->s = s;
    a->route = req->route;
    j->aux = a;
    j->t_submit = strata_now();
    int rc = req->route == GEN_ROUTE_EMBEDDINGS ? parse_embeddings(s, body, a, err, param, cap)
                                                : parse_tokenize(s, body, a, err, param, cap);
    if (rc < 0) {
        sched_aux_clear(j);
        free(j);
        return rc;
    }
    const int limit = s->p.parallel + s->p.queue;
    int cur = atomic_load(&s->n_inflight);
    do {
        if (cur >= limit) {
            sched_aux_clear(j);
            free(j);
            return strata_error_set(err, STRATA_E_QUEUE_FULL,
                                    "server busy: %d requests in flight (parallel %d + queue %d)",
                                    cur, s->p.parallel, s->p.queue);
        }
    } while (!atomic_compare_exchange_weak(&s->n_inflight, &cur, cur + 1));
    for (int i = 0; i < a->n_inputs; i++) /* the prep lane a request takes */
        j->rq.prompt_len += a->text_len ? a->text_len[i] : 0;
    j->rq.route = req->route;
    j->sink = sink;
    j->seq = -1;
    j->part = req->cache_partition;
    if (s->p.request_timeout > 0)
        j->t_deadline = j->t_submit + s->p.request_timeout;
    atomic_init(&j->cancelled, false);
    out->job = j;
    sched_prep_submit(s, j);
    return 0;
}

/* ---- prep thread ------------------------------------------------------------- */

static const struct tokenizer *tok_of(const struct sched *s) {
    return session_base_tokenizer(s->sb);
}

/* The /detokenize answer: the tokens' text as llama-server's tokens_to_str
 * spells it (special tokens as their text, no space stripped), complete
 * UTF-8 (a stream: an incomplete or invalid sequence becomes U+FFFD). */
static char *detokenize_body(const struct sched *s, const struct tokenizer_ids *ids,
                             struct strata_error *err) {
    struct tokenizer_decode_opts o = tokenizer_decode_opts_default();
    o.skip_special = false;
    o.strip_leading_space = false;
    struct tokenizer_stream *st = tokenizer_stream_init(tok_of(s), &o, err);
    char *text = NULL, *res = NULL;
    size_t len = 0, cap = 0;
    if (!st)
        return NULL;
    for (size_t i = 0; i <= ids->n; i++) {
        size_t n = 0;
        const char *p = i < ids->n ? tokenizer_stream_feed(st, ids->ids[i], &n)
                                   : tokenizer_stream_flush(st, &n);
        if (!p && i < ids->n) {
            strata_error_set(err, STRATA_E_NOMEM, "out of memory");
            goto out;
        }
        if (len + n + 1 > cap) {
            size_t nc = (len + n + 1) * 2;
            char *t = realloc(text, nc);
            if (!t) {
                strata_error_set(err, STRATA_E_NOMEM, "out of memory");
                goto out;
            }
            text = t, cap = nc;
        }
        memcpy(text + len, p, n);
        len += n;
    }
    json_t *o2 = json_pack("{s:s%}", "content", text ? text : "", len);
    res = o2 ? json_dumps(o2, JSON_COMPACT) : NULL;
    json_decref(o2);
    if (!res)
        strata_error_set(err, STRATA_E_NOMEM, "out of memory");
out:
    free(text);
    tokenizer_stream_free(st);
    return res;
}

/* The /tokenize answer: {tokens: [ids]}, or with_pieces [{id, piece}] where
 * piece is the token's text (special tokens included), or its bytes as an
 * array of integers when they are not valid UTF-8 on their own. */
static char *tokenize_body(const struct sched *s, const struct sched_aux *a,
                           struct strata_error *err) {
    const struct tokenizer_ids *ids = &a->ids[0];
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < ids->n; i++) {
        json_t *e;
        if (!a->with_pieces) {
            e = json_integer(ids->ids[i]);
        } else {
            char buf[256];
            int n = tokenizer_token_to_piece(tok_of(s), ids->ids[i], true, buf, sizeof buf);
            if (n < 0)
                n = 0;
            char *big = n > (int)sizeof buf ? malloc((size_t)n) : NULL;
            if (big)
                tokenizer_token_to_piece(tok_of(s), ids->ids[i], true, big, (size_t)n);
            const char *p = big ? big : buf;
            size_t len = big || n <= (int)sizeof buf ? (size_t)n : sizeof buf;
            json_t *piece = json_stringn(p, len); /* NULL when not valid UTF-8 */
            if (!piece) {
                piece = json_array();
                for (size_t k = 0; piece && k < len; k++)
                    json_array_append_new(piece, json_integer((unsigned char)p[k]));
            }
            free(big);
            e = json_pack("{s:i,s:o}", "id", ids->ids[i], "piece", piece);
        }
        if (!e || json_array_append_new(arr, e) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    json_t *o = arr ? json_pack("{s:o}", "tokens", arr) : NULL;
    char *res = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!res)
        strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    return res;
}

void sched_aux_prep(const struct sched *s, struct gen_job *j) {
    struct sched_aux *a = j->aux;
    j->tok_rc = 0;
    for (int i = 0; i < a->n_inputs && a->texts; i++) {
        if (!a->texts[i])
            continue; /* given as ids */
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        eo.add_special = a->route == GEN_ROUTE_TOKENIZE ? a->add_special : true;
        eo.parse_special = a->route == GEN_ROUTE_TOKENIZE && a->parse_special;
        int rc =
            tokenizer_encode(tok_of(s), a->texts[i], a->text_len[i], &eo, &a->ids[i], &j->tok_err);
        free(a->texts[i]);
        a->texts[i] = NULL;
        char where[32];
        snprintf(where, sizeof where, a->n_inputs > 1 ? "input[%d]" : "input", i);
        if (rc < 0) {
            j->tok_rc = rc;
            snprintf(a->param, sizeof a->param, "%s", where);
            return;
        }
        if (a->route != GEN_ROUTE_EMBEDDINGS)
            continue;
        if (a->ids[i].n == 0) {
            j->tok_rc =
                strata_error_set(&j->tok_err, STRATA_E_INVALID, "'%s' has no tokens", where);
            snprintf(a->param, sizeof a->param, "%s", where);
            return;
        }
        if (a->ids[i].n > (size_t)s->n_ctx) {
            j->tok_rc =
                context_error(s, a->ids[i].n, where, &j->tok_err, a->param, sizeof a->param);
            return;
        }
    }
    if (a->route == GEN_ROUTE_TOKENIZE || a->route == GEN_ROUTE_DETOKENIZE) {
        a->body = a->route == GEN_ROUTE_TOKENIZE ? tokenize_body(s, a, &j->tok_err)
                                                 : detokenize_body(s, &a->ids[0], &j->tok_err);
        if (!a->body)
            j->tok_rc = j->tok_err.code ? j->tok_err.code : STRATA_E_NOMEM;
    }
}

/* ---- scheduler thread ---------------------------------------------------------- */

static void emit(struct gen_job *j, const struct gen_event *ev) {
    j->sink.on_event(j->sink.ctx, ev);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 (with padding) of n bytes; owned: free(). */
static char *base64_encode(const uint8_t *p, size_t n) {
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = b64[v >> 18 & 63];
        *o++ = b64[v >> 12 & 63];
        *o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* One result as OpenAI sends it: an array of floats, or base64 of the
 * little-endian f32 bytes (what the SDKs decode). */
static json_t *vector_json(const float *v, int n, bool base64) {
    if (!base64) {
        json_t *arr = json_array();
        for (int i = 0; arr && i < n; i++)
            if (json_array_append_new(arr, json_real(v[i])) < 0) {
                json_decref(arr);
                arr = NULL;
            }
        return arr;
    }
    uint8_t *bytes = malloc((size_t)n * 4);
    if (!bytes)
        return NULL;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            bytes[(size_t)i * 4 + (size_t)k] = (uint8_t)(u >> (8 * k));
    }
    char *s = base64_encode(bytes, (size_t)n * 4);
    free(bytes);
    json_t *r = s ? json_string(s) : NULL;
    free(s);
    return r;
}

static char *embeddings_body(const struct sched *s, const struct sched_aux *a) {
    json_t *data = json_array();
    float *tmp = malloc((size_t)s->n_embd * sizeof *tmp);
    for (int i = 0; data && tmp && i < a->n_inputs; i++) {
        const float *v = a->out + (size_t)i * (size_t)s->n_embd;
        if (a->dims < s->n_embd) { /* truncated, then unit length again */
            embed_normalize(v, a->dims, tmp);
            v = tmp;
        }
        json_t *vec = vector_json(v, a->dims, a->base64);
        json_t *e =
            vec ? json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", vec)
                : NULL;
        if (!e || json_array_append_new(data, e) < 0) {
            json_decref(data);
            data = NULL;
        }
    }
    free(tmp);
    json_t *o = data ? json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data,
                                 "model", s->model_id, "usage", "prompt_tokens",
                                 (json_int_t)a->n_tokens, "total_tokens", (json_int_t)a->n_tokens)
                     : NULL;
    /* 9 significant digits: enough to round-trip every f32 */
    char *res = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return res;
}

/* Answers a request job (its inputs, if any, are all done): USAGE (for the
 * log line and metrics), ERROR or the body, DONE. j may be released from
 * inside DONE: nothing touches it after. */
static void finish_request(struct sched *s, struct gen_job *j, int code, const char *msg,
                           const char *param) {
    struct sched_aux *a = j->aux;
    char *body = NULL;
    if (!code && a->route == GEN_ROUTE_EMBEDDINGS) {
        if (!(body = embeddings_body(s, a))) {
            code = STRATA_E_NOMEM;
            msg = "out of memory";
        }
    } else if (!code) {
        body = a->body;
        a->body = NULL;
    }
    if (a->route == GEN_ROUTE_EMBEDDINGS && !code) {
        struct gen_event u = {.type = GEN_EV_USAGE, .n_prompt_tokens = a->n_tokens};
        emit(j, &u);
    }
    if (code) {
        struct gen_event e = {.type = GEN_EV_ERROR,
                              .error_code = code,
                              .error_message = msg,
                              .error_param = param && *param ? param : NULL};
        emit(j, &e);
    }
    sched_aux_clear(j);
    atomic_fetch_sub(&s->n_inflight, 1);
    struct gen_event d = {.type = GEN_EV_DONE, .json = body, .json_len = body ? strlen(body) : 0};
    emit(j, &d);
    free(body);
}

/* An input's events (scheduler thread): the first error becomes the
 * request's; its DONE frees it and, for the last one, answers the request. */
static void on_input_event(void *ctx, const struct gen_event *ev) {
    struct gen_job *in = ctx;
    struct gen_job *rq = in->parent;
    struct sched_aux *a = rq->aux;
    if (ev->type == GEN_EV_ERROR && !a->err_code) {
        a->err_code = ev->error_code ? ev->error_code : STRATA_E_INTERNAL;
        strata_error_set(&a->err, a->err_code, "%s",
                         ev->error_message ? ev->error_message : "embedding failed");
        snprintf(a->param, sizeof a->param, "%s", ev->error_param ? ev->error_param : "");
    }
    if (ev->type != GEN_EV_DONE)
        return;
    free(in->emb_acc);
    free(in);
    if (--a->n_left == 0)
        finish_request(a->s, rq, a->err_code, a->err.message, a->param);
}

/* The inputs' jobs of request j, in input order (NULL with *err on no memory). */
static struct gen_job *make_inputs(struct sched *s, struct gen_job *j, struct gen_job **tail) {
    struct sched_aux *a = j->aux;
    struct gen_job *head = NULL, **pp = &head;
    for (int i = 0; i < a->n_inputs; i++) {
        struct gen_job *c = calloc(1, sizeof *c);
        double *acc = calloc((size_t)s->n_embd, sizeof *acc);
        if (!c || !acc) {
            free(c), free(acc);
            while (head) {
                struct gen_job *n = head->next;
                free(head->prompt), free(head->emb_acc), free(head);
                head = n;
            }
            return NULL;
        }
        c->rq.route = GEN_ROUTE_EMBEDDINGS;
        c->sink = (struct gen_sink){on_input_event, c};
        atomic_init(&c->cancelled, false);
        c->seq = -1;
        c->part = j->part;
        c->t_deadline = j->t_deadline;
        c->t_submit = j->t_submit;
        c->tokenized = c->prepared = true;
        c->prompt = a->ids[i].ids; /* stolen */
        c->n_prompt = (int)a->ids[i].n;
        a->ids[i] = (struct tokenizer_ids){0};
        c->max_tokens = 0;
        c->parent = j;
        c->emb_index = i;
        c->emb_acc = acc;
        a->n_tokens += c->n_prompt;
        *pp = c;
        *tail = c;
        pp = &c->next;
    }
    a->n_left = a->n_inputs;
    return head;
}

void sched_aux_take(struct sched *s) {
    for (struct gen_job **pp = &s->waiting; *pp;) {
        struct gen_job *j = *pp;
        if (!j->aux) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        j->next = NULL;
        if (!j->tokenized) { /* shutdown handed it over before its prep */
            finish_request(s, j, STRATA_E_CANCELLED, "server shutting down", NULL);
            continue;
        }
        if (j->tok_rc < 0 || atomic_load(&j->cancelled)) {
            const bool c = j->tok_rc >= 0;
            finish_request(s, j, c ? STRATA_E_CANCELLED : j->tok_rc,
                           c ? "request cancelled" : j->tok_err.message, c ? NULL : j->aux->param);
            continue;
        }
        if (j->aux->route != GEN_ROUTE_EMBEDDINGS) {
            finish_request(s, j, 0, NULL, NULL);
            continue;
        }
        struct gen_job *tail = NULL, *head = make_inputs(s, j, &tail);
        if (!head) {
            finish_request(s, j, STRATA_E_NOMEM, "out of memory", NULL);
            continue;
        }
        tail->next = *pp; /* the inputs take the request's place in the FIFO */
        *pp = head;
        pp = &tail->next;
    }
}

bool sched_aux_dropped(const struct gen_job *j) {
    return j->parent && (atomic_load(&j->parent->cancelled) || j->parent->aux->err_code);
}

bool sched_aux_wants(const struct sched *s, const struct gen_job *j, int pos) {
    return j->parent && embed_wants((enum embed_pooling)s->pooling, pos, j->n_prompt);
}

bool sched_aux_prefix_ok(const struct sched *s, const struct gen_job *j) {
    return !j->parent || s->pooling == EMBED_POOLING_LAST;
}

void sched_aux_after_step(struct sched *s, int n_hid) {
    for (int r = 0; r < n_hid; r++)
        embed_add((enum embed_pooling)s->pooling, s->hid_job[r]->emb_acc,
                  s->hidden + (size_t)r * (size_t)s->n_embd, s->n_embd);
}

bool sched_aux_input_done(struct sched *s, struct gen_job *j) {
    if (!j->parent || j->n_past < j->n_prompt)
        return false;
    struct sched_aux *a = j->parent->aux;
    struct strata_error err = {0};
    if (embed_finish((enum embed_pooling)s->pooling, j->emb_acc, j->n_prompt, s->n_embd,
                     a->out + (size_t)j->emb_index * (size_t)s->n_embd, &err) < 0)
        job_error(j, err.code, err.message, "input");
    return true;
}
