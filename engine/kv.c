/* engine/kv.c: per-sequence F16 KV slabs (see kv.h). */
#include "engine/kv.h"

#include <stdlib.h>
#include <string.h>

struct kv_seq {
    uint16_t *k; /* (n_layer, n_ctx, n_embd_k) f16, NULL until first use */
    uint16_t *v; /* (n_layer, n_ctx, n_embd_v) f16 */
    int len;     /* positions filled */
};

struct kv_cache {
    struct kv_params p;
    struct kv_seq *seqs; /* (n_seq_max) */
    size_t bytes;        /* allocated slab bytes */
};

/* 2^40 bytes per sequence: far above any real model, low enough that size
 * arithmetic below cannot overflow size_t. */
#define KV_MAX_SEQ_BYTES ((uint64_t)1 << 40)

struct kv_cache *kv_init(const struct kv_params *params, struct strata_error *err) {
    if (!params || params->n_layer < 1 || params->n_seq_max < 1 || params->n_ctx < 1 ||
        params->n_embd_k < 1 || params->n_embd_v < 1) {
        strata_error_set(err, STRATA_E_INVALID, "kv_init: every count must be >= 1");
        return NULL;
    }
    uint64_t per = (uint64_t)params->n_layer * (uint64_t)params->n_ctx *
                   ((uint64_t)params->n_embd_k + (uint64_t)params->n_embd_v) * 2u;
    if (per >= KV_MAX_SEQ_BYTES || params->n_seq_max > (1 << 20)) {
        strata_error_set(err, STRATA_E_LIMIT, "kv_init: %llu bytes per sequence is too large",
                         (unsigned long long)per);
        return NULL;
    }
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        goto fail;
    kv->p = *params;
    kv->seqs = calloc((size_t)params->n_seq_max, sizeof *kv->seqs);
    if (!kv->seqs)
        goto fail;
    return kv;
fail:
    kv_free(kv);
    strata_error_set(err, STRATA_E_NOMEM, "kv_init: out of memory");
    return NULL;
}

void kv_free(struct kv_cache *kv) {
    if (!kv)
        return;
    if (kv->seqs) {
        for (int s = 0; s < kv->p.n_seq_max; s++) {
            free(kv->seqs[s].k);
            free(kv->seqs[s].v);
        }
        free(kv->seqs);
    }
    free(kv);
}

const struct kv_params *kv_get_params(const struct kv_cache *kv) {
    return &kv->p;
}

static int check_seq(const struct kv_cache *kv, int seq_id, struct strata_error *err) {
    if (seq_id < 0 || seq_id >= kv->p.n_seq_max)
        return strata_error_set(err, STRATA_E_INVALID, "kv: sequence id %d out of range [0, %d)",
                                seq_id, kv->p.n_seq_max);
    return 0;
}

int kv_seq_len(const struct kv_cache *kv, int seq_id) {
    if (seq_id < 0 || seq_id >= kv->p.n_seq_max)
        return -1;
    return kv->seqs[seq_id].len;
}

int kv_seq_clear(struct kv_cache *kv, int seq_id, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc == 0)
        kv->seqs[seq_id].len = 0;
    return rc;
}

int kv_seq_truncate(struct kv_cache *kv, int seq_id, int len, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    if (len < 0 || len > kv->seqs[seq_id].len)
        return strata_error_set(err, STRATA_E_RANGE, "kv: truncate to %d outside [0, %d]", len,
                                kv->seqs[seq_id].len);
    kv->seqs[seq_id].len = len;
    return 0;
}

static size_t slab_elems(const struct kv_cache *kv, int n_embd) {
    return (size_t)kv->p.n_layer * (size_t)kv->p.n_ctx * (size_t)n_embd;
}

int kv_seq_free(struct kv_cache *kv, int seq_id, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    struct kv_seq *s = &kv->seqs[seq_id];
    if (s->k)
        kv->bytes -= (slab_elems(kv, kv->p.n_embd_k) + slab_elems(kv, kv->p.n_embd_v)) * 2;
    free(s->k);
    free(s->v);
    s->k = s->v = NULL;
    s->len = 0;
    return 0;
}

int kv_seq_reserve(struct kv_cache *kv, int seq_id, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    struct kv_seq *s = &kv->seqs[seq_id];
    if (s->k)
        return 0;
    /* Uninitialised memory is fine: attention reads only positions < len or
     * rows written earlier in the same step. */
    s->k = malloc(slab_elems(kv, kv->p.n_embd_k) * 2);
    s->v = malloc(slab_elems(kv, kv->p.n_embd_v) * 2);
    if (!s->k || !s->v) {
        free(s->k);
        free(s->v);
        s->k = s->v = NULL;
        return strata_error_set(err, STRATA_E_NOMEM, "kv: out of memory for sequence %d", seq_id);
    }
    kv->bytes += (slab_elems(kv, kv->p.n_embd_k) + slab_elems(kv, kv->p.n_embd_v)) * 2;
    return 0;
}

int kv_seq_copy(struct kv_cache *kv, int dst_seq, int src_seq, int len, struct strata_error *err) {
    int rc = check_seq(kv, dst_seq, err);
    if (rc == 0)
        rc = check_seq(kv, src_seq, err);
    if (rc)
        return rc;
    if (len < 0 || len > kv->seqs[src_seq].len)
        return strata_error_set(err, STRATA_E_RANGE, "kv: copy of %d positions outside [0, %d]",
                                len, kv->seqs[src_seq].len);
    if (dst_seq == src_seq)
        return kv_seq_truncate(kv, dst_seq, len, err);
    if ((rc = kv_seq_reserve(kv, dst_seq, err)))
        return rc;
    struct kv_seq *d = &kv->seqs[dst_seq], *s = &kv->seqs[src_seq];
    for (int l = 0; l < kv->p.n_layer; l++) {
        size_t ok = (size_t)l * kv->p.n_ctx * kv->p.n_embd_k;
        size_t ov = (size_t)l * kv->p.n_ctx * kv->p.n_embd_v;
        if (len > 0) {
            memcpy(d->k + ok, s->k + ok, (size_t)len * kv->p.n_embd_k * 2);
            memcpy(d->v + ov, s->v + ov, (size_t)len * kv->p.n_embd_v * 2);
        }
    }
    d->len = len;
    return 0;
}

size_t kv_bytes_allocated(const struct kv_cache *kv) {
    return kv->bytes;
}

void kv_seq_set_len(struct kv_cache *kv, int seq_id, int len) {
    STRATA_ASSERT(seq_id >= 0 && seq_id < kv->p.n_seq_max && len >= 0 && len <= kv->p.n_ctx);
    kv->seqs[seq_id].len = len;
}

uint16_t *kv_k_row(struct kv_cache *kv, int layer, int seq_id, int pos) {
    const struct kv_seq *s = &kv->seqs[seq_id];
    STRATA_ASSERT(s->k && layer >= 0 && layer < kv->p.n_layer && pos >= 0 && pos < kv->p.n_ctx);
    return s->k + ((size_t)layer * kv->p.n_ctx + (size_t)pos) * kv->p.n_embd_k;
}

uint16_t *kv_v_row(struct kv_cache *kv, int layer, int seq_id, int pos) {
    const struct kv_seq *s = &kv->seqs[seq_id];
    STRATA_ASSERT(s->v && layer >= 0 && layer < kv->p.n_layer && pos >= 0 && pos < kv->p.n_ctx);
    return s->v + ((size_t)layer * kv->p.n_ctx + (size_t)pos) * kv->p.n_embd_v;
}
