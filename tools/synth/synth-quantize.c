/* tools/synth/synth-quantize.c: the parallel row streamer shared by synth and
 * requantize, and synth_quantize_file (llama-quantize's job for strata's
 * recipes). */
#include "tools/synth/synth-impl.h"
#include "engine/quant/quant.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_BATCH_BYTES (8u << 20) /* output bytes per batch, all threads together */

struct stream_job {
    synth_row_fn fn;
    void *ctx;
    int64_t first, n; /* rows of this worker: [first, first + n) */
    int64_t batch0;   /* first row of the batch */
    size_t row_bytes; /* output bytes per row */
    int64_t ne0;      /* elements per row */
    uint8_t *out;     /* (batch rows, row_bytes) */
    float *scratch;   /* (ne0) f32 */
    int rc;
};

static void *stream_worker(void *arg) {
    struct stream_job *j = arg;
    for (int64_t r = j->first; r < j->first + j->n && j->rc == 0; r++)
        j->rc = j->fn(j->ctx, r, j->scratch, j->out + (size_t)(r - j->batch0) * j->row_bytes);
    return NULL;
}

int synth_stream_rows(struct gguf_writer *w, int64_t n_rows, int64_t ne0, size_t row_bytes,
                      synth_row_fn fn, void *ctx, int n_threads, struct strata_error *err) {
    if (row_bytes == 0)
        return strata_error_set(err, STRATA_E_INVALID, "row of %lld elements has no byte size",
                                (long long)ne0);
    int64_t batch = (int64_t)(STREAM_BATCH_BYTES / row_bytes);
    if (batch < n_threads)
        batch = n_threads;
    if (batch > n_rows)
        batch = n_rows;
    int nt = n_threads < 1 ? 1 : n_threads;
    uint8_t *out = malloc((size_t)batch * row_bytes);
    float *scratch = malloc((size_t)nt * (size_t)ne0 * sizeof(float));
    struct stream_job *jobs = calloc((size_t)nt, sizeof(*jobs));
    pthread_t *tids = calloc((size_t)nt, sizeof(*tids));
    int rc = 0;
    if (!out || !scratch || !jobs || !tids) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory for a batch of %lld rows",
                              (long long)batch);
        goto out;
    }
    for (int64_t b0 = 0; b0 < n_rows && rc == 0; b0 += batch) {
        int64_t nb = n_rows - b0 < batch ? n_rows - b0 : batch;
        int64_t per = (nb + nt - 1) / nt;
        for (int t = 0; t < nt; t++) {
            int64_t first = b0 + t * per;
            int64_t n = first >= b0 + nb ? 0 : (b0 + nb - first < per ? b0 + nb - first : per);
            jobs[t] = (struct stream_job){
                fn, ctx, first, n, b0, row_bytes, ne0, out, scratch + (size_t)t * (size_t)ne0, 0};
        }
        for (int t = 1; t < nt; t++) {
            if (jobs[t].n == 0 || pthread_create(&tids[t], NULL, stream_worker, &jobs[t])) {
                stream_worker(&jobs[t]); /* no thread: run it here */
                tids[t] = 0;
                continue;
            }
        }
        stream_worker(&jobs[0]);
        for (int t = 1; t < nt; t++)
            if (tids[t]) {
                pthread_join(tids[t], NULL);
                tids[t] = 0;
            }
        for (int t = 0; t < nt && rc == 0; t++)
            if (jobs[t].rc)
                rc = strata_error_set(err, jobs[t].rc, "row conversion failed (%s)",
                                      strata_error_text(jobs[t].rc));
        if (rc == 0)
            rc = gguf_writer_write(w, out, (size_t)nb * row_bytes, err);
    }
out:
    free(tids);
    free(jobs);
    free(scratch);
    free(out);
    return rc;
}

/* ---- requantize ------------------------------------------------------------ */
struct requant_ctx {
    const struct gguf_tensor_info *src;
    uint32_t dst_type;
    size_t src_row_bytes;
};

static int requant_row(void *vctx, int64_t row, float *x, void *dst) {
    const struct requant_ctx *c = vctx;
    const uint8_t *s = (const uint8_t *)c->src->data + (size_t)row * c->src_row_bytes;
    int64_t n = c->src->ne[0];
    int rc;
    if (c->src->type == QUANT_F32)
        memcpy(x, s, (size_t)n * sizeof(float));
    else if ((rc = quant_dequantize_row(c->src->type, s, x, n)))
        return rc;
    return quant_quantize_row(c->dst_type, x, dst, n);
}

static void tensor_name(const struct gguf_tensor_info *t, char *buf, size_t cap) {
    snprintf(buf, cap, "%.*s", (int)t->name.len, t->name.ptr);
}

int synth_pooling_parse(const char *name) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    for (int i = 0; name && i < 5; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

int synth_quantize_file(const char *in_path, const char *out_path, const char *recipe,
                        int n_threads, struct synth_report *rep, struct strata_error *err) {
    return synth_quantize_file_pooling(in_path, out_path, recipe, n_threads, -1, rep, err);
}

int synth_quantize_file_pooling(const char *in_path, const char *out_path, const char *recipe,
                                int n_threads, int pooling, struct synth_report *rep,
                                struct strata_error *err) {
    struct gguf_writer *w = NULL;
    uint32_t *types = NULL;
    int rc;
    struct gguf_file *f = gguf_open(in_path, err);
    if (!f)
        return err ? err->code : STRATA_E_IO;
    char arch[64] = "", key[128];
    uint64_t n_layer = 0, n_expert = 0;
    if ((rc = gguf_get_str_buf(f, "general.architecture", arch, sizeof(arch), err)))
        goto out;
    snprintf(key, sizeof(key), "%s.block_count", arch);
    if ((rc = gguf_get_uint(f, key, &n_layer, err)))
        goto out;
    snprintf(key, sizeof(key), "%s.expert_count", arch);
    if (gguf_get_uint(f, key, &n_expert, NULL))
        n_expert = 0;
    struct synth_mix mix;
    if ((rc = synth_mix_init(&mix, recipe, (int64_t)n_layer, (int64_t)n_expert, err)))
        goto out;
    int64_t nt = gguf_n_tensors(f);
    types = calloc((size_t)(nt ? nt : 1), sizeof(*types));
    if (!types) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "quantize: out of memory");
        goto out;
    }
    char name[128];
    for (int64_t i = 0; i < nt; i++) {
        tensor_name(gguf_tensor_at(f, i), name, sizeof(name));
        synth_mix_count(&mix, name);
    }
    for (int64_t i = 0; i < nt; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        tensor_name(t, name, sizeof(name));
        types[i] = synth_mix_type(&mix, name, t->n_dims, t->ne, t->type);
        const struct quant_traits *st = quant_type_traits(t->type);
        const struct quant_traits *dt = quant_type_traits(types[i]);
        if (types[i] != t->type &&
            ((!st->can_dequantize && t->type != QUANT_F32) || !dt || !dt->can_quantize)) {
            rc =
                strata_error_set(err, STRATA_E_UNSUPPORTED, "quantize: %s: cannot convert %s to %s",
                                 name, st->name, dt ? dt->name : "?");
            goto out;
        }
    }
    if (!(w = gguf_writer_init(out_path, err))) {
        rc = err ? err->code : STRATA_E_IO;
        goto out;
    }
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        if ((rc = gguf_writer_copy_kv(w, f, i, err)))
            goto out;
    if ((rc = gguf_writer_set_u32(w, "general.quantization_version", 2, err)) ||
        (rc = gguf_writer_set_u32(w, "general.file_type", (uint32_t)mix.ftype, err)))
        goto out;
    snprintf(key, sizeof(key), "%s.pooling_type", arch);
    if (pooling >= 0 && (rc = gguf_writer_set_u32(w, key, (uint32_t)pooling, err)))
        goto out;
    for (int64_t i = 0; i < nt; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        tensor_name(t, name, sizeof(name));
        if ((rc = gguf_writer_add_tensor(w, name, types[i], t->n_dims, t->ne, err)))
            goto out;
    }
    if ((rc = gguf_writer_begin(w, err)))
        goto out;
    int64_t n_params = 0;
    for (int64_t i = 0; i < nt; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
        n_params += rows * t->ne[0];
        if (types[i] == t->type) {
            rc = gguf_writer_write(w, t->data, (size_t)t->n_bytes, err);
        } else {
            struct requant_ctx c = {t, types[i], quant_row_size(t->type, t->ne[0])};
            rc = synth_stream_rows(w, rows, t->ne[0], quant_row_size(types[i], t->ne[0]),
                                   requant_row, &c, n_threads < 1 ? 1 : n_threads, err);
        }
        if (rc) {
            tensor_name(t, name, sizeof(name));
            strata_error_prefix(err, "%s", name);
            goto out;
        }
    }
    if ((rc = gguf_writer_finish(w, err)))
        goto out;
    if (rep) {
        rep->n_bytes = gguf_writer_bytes(w);
        rep->n_tensors = nt;
        rep->n_params = n_params;
        rep->n_fallback = mix.n_fallback;
    }
out:
    gguf_writer_free(w);
    free(types);
    gguf_close(f);
    return rc;
}
