/* engine/experts/xstore.c: the expert store (xstore.h): the index of the
 * experts' byte ranges, the slots and their replacement, the batch of a
 * layer's cold experts, the checks that turn a bad read into an error. */
#include "engine/experts/xstore.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/experts/profile.h"
#include "engine/experts/xstore-impl.h"
#include "engine/experts/xstore-io.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

#define ALIGN_DOWN(x) ((x) & ~(uint64_t)(XSTORE_ALIGN - 1))
#define ALIGN_UP(x) (((x) + XSTORE_ALIGN - 1) & ~(uint64_t)(XSTORE_ALIGN - 1))
#define XSTORE_HUGE ((size_t)2 << 20) /* the slots' start: a huge-page boundary */

/* One (layer, which) tensor: expert e's bytes are [base + e * bytes, + bytes). */
struct xs_mat {
    uint64_t base, bytes; /* bytes 0: the layer has no such tensor */
    enum quant_type type;
    int64_t rows, cols;
    size_t row_bytes;
    bool packed; /* slots hold it in the CPU kernels' 16-row layout (xstore_params.pack) */
};

struct xs_slot {
    int32_t layer, expert; /* -1: empty */
    int32_t prev, next;    /* the layer's LRU list: head most recent */
    uint64_t last;         /* tick of the last use */
    uint64_t hold_step;    /* valid while held */
    bool held;
    uint32_t data_off[EXPERTS_WHICH_COUNT]; /* matrix start inside its widened range */
};

struct xstore {
    const struct gguf_file *f;
    const struct xstore_sysops *sys;
    int fd;
    bool direct;
    struct stat st0; /* the file at init: a change fails the reads */
    struct xs_io *io;
    char mode[32];
    int queue_depth;
    char queue_rule[96]; /* "device 254:0 nr_requests 256, rotational", "--expert-queue" */
    int n_layer, n_expert, floor;
    struct xs_mat *mat; /* (n_layer, EXPERTS_WHICH_COUNT) */
    uint64_t sub_off[EXPERTS_WHICH_COUNT], slot_bytes;
    uint8_t *mem; /* n_slots * slot_bytes, 2 MiB aligned (huge pages) */
    uint8_t *raw; /* the mapping mem lies in */
    size_t raw_bytes;
    uint8_t *pack_scratch; /* 16 rows of the widest packed matrix; NULL: nothing packed */
    struct xs_slot *slot;
    int n_slots, n_free;
    int32_t *free_list;           /* (n_slots) */
    int32_t *map;                 /* (n_layer * n_expert): slot or -1 */
    uint64_t *over_step;          /* (n_layer * n_expert): step + 1 it overflowed in */
    int32_t *count, *head, *tail; /* (n_layer) slots of each layer, its LRU ends */
    int32_t *pinned;              /* (n_slots) held slots */
    int n_pinned;
    uint64_t tick;
    struct xs_req *req; /* (n_expert * 3) one batch */
    int32_t *req_slot;
    int pend_layer, pend_nreq; /* the batch in flight (nreq 0: none) */
    /* counters, read by xstore_stats from any thread */
    _Atomic uint64_t *layer_hits, *layer_misses; /* (n_layer) */
    _Atomic uint64_t overflow, evictions, read_errors, bytes_read, reads, batches, lat_sum;
    _Atomic uint64_t lat[XSTORE_LAT_BUCKETS];
    _Atomic uint64_t prefetch_dropped;
    _Atomic int slots_used;
    uint64_t warm_bytes; /* written at init only */
};

static const char *const which_name[EXPERTS_WHICH_COUNT] = {"ffn_gate_exps", "ffn_up_exps",
                                                            "ffn_down_exps"};

static inline uint64_t ld(_Atomic uint64_t *a) {
    return atomic_load_explicit(a, memory_order_relaxed);
}
static inline void add(_Atomic uint64_t *a, uint64_t v) {
    atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

/* ---- slots: the per-layer LRU lists, holds ------------------------------------ */

static void list_remove(struct xstore *s, int i) {
    struct xs_slot *x = &s->slot[i];
    const int l = x->layer;
    if (x->prev >= 0)
        s->slot[x->prev].next = x->next;
    else
        s->head[l] = x->next;
    if (x->next >= 0)
        s->slot[x->next].prev = x->prev;
    else
        s->tail[l] = x->prev;
    x->prev = x->next = -1;
}

static void list_push_head(struct xstore *s, int i) {
    struct xs_slot *x = &s->slot[i];
    const int l = x->layer;
    x->prev = -1;
    x->next = s->head[l];
    if (x->next >= 0)
        s->slot[x->next].prev = i;
    else
        s->tail[l] = i;
    s->head[l] = i;
}

static void touch(struct xstore *s, int i) {
    s->slot[i].last = ++s->tick;
    if (s->head[s->slot[i].layer] != i) {
        list_remove(s, i);
        list_push_head(s, i);
    }
}

static void pin(struct xstore *s, int i, uint64_t step) {
    struct xs_slot *x = &s->slot[i];
    if (!x->held) {
        x->held = true;
        x->hold_step = step;
        s->pinned[s->n_pinned++] = i;
    } else if (step > x->hold_step) {
        x->hold_step = step; /* the later step's release ends it */
    }
}

/* Ends holds of `step` (every layer but keep_layer; -1: all). */
static void unpin(struct xstore *s, uint64_t step, int keep_layer) {
    int k = 0;
    for (int j = 0; j < s->n_pinned; j++) {
        const int i = s->pinned[j];
        struct xs_slot *x = &s->slot[i];
        if (x->hold_step == step && x->layer != keep_layer)
            x->held = false;
        else
            s->pinned[k++] = i;
    }
    s->n_pinned = k;
}

/* Forgets slot i's expert (it goes back to the free list). */
static void slot_empty(struct xstore *s, int i) {
    struct xs_slot *x = &s->slot[i];
    if (x->layer < 0)
        return;
    s->map[(size_t)x->layer * s->n_expert + x->expert] = -1;
    list_remove(s, i);
    s->count[x->layer]--;
    if (x->held) {
        x->held = false;
        for (int j = 0; j < s->n_pinned; j++)
            if (s->pinned[j] == i) {
                s->pinned[j] = s->pinned[--s->n_pinned];
                break;
            }
    }
    x->layer = x->expert = -1;
    s->free_list[s->n_free++] = i;
    atomic_fetch_sub_explicit(&s->slots_used, 1, memory_order_relaxed);
}

/* The oldest slot not held, from the tail of layer l's list, or -1. */
static int oldest_free_of(const struct xstore *s, int l) {
    for (int i = s->tail[l]; i >= 0; i = s->slot[i].prev)
        if (!s->slot[i].held)
            return i;
    return -1;
}

/* A slot to fill: a free one, else the victim (xstore.h "Replacement"),
 * emptied; -1 when every slot is held. */
static int take_slot(struct xstore *s) {
    if (s->n_free > 0)
        return s->free_list[--s->n_free];
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int l = 0; l < s->n_layer; l++) {
            if (s->count[l] <= (pass == 0 ? s->floor : 0))
                continue;
            const int i = oldest_free_of(s, l);
            if (i >= 0 && (best < 0 || s->slot[i].last < s->slot[best].last))
                best = i;
        }
    }
    if (best < 0)
        return -1;
    add(&s->evictions, 1);
    slot_empty(s, best);
    return s->free_list[--s->n_free];
}

/* ---- the batch of a layer ----------------------------------------------------- */

static int file_changed(struct xstore *s, struct strata_error *err) {
    struct stat st;
    if (fstat(s->fd, &st) != 0)
        return strata_error_set(err, STRATA_E_IO, "expert store: fstat of %s: %s", gguf_path(s->f),
                                strerror(errno));
    if (st.st_size != s->st0.st_size || st.st_ino != s->st0.st_ino ||
        st.st_mtim.tv_sec != s->st0.st_mtim.tv_sec || st.st_mtim.tv_nsec != s->st0.st_mtim.tv_nsec)
        return strata_error_set(err, STRATA_E_IO,
                                "expert store: the model file %s changed under the daemon (size "
                                "%lld -> %lld bytes, modified after load): reload the model",
                                gguf_path(s->f), (long long)s->st0.st_size, (long long)st.st_size);
    return 0;
}

static void count_latency(struct xstore *s, uint32_t us) {
    int b = 0;
    while (b < XSTORE_LAT_BUCKETS - 1 && us >= (16u << b))
        b++;
    add(&s->lat[b], 1);
    add(&s->lat_sum, us);
}

static void pack_filled(struct xstore *s, int layer, int nreq);

/* Starts the batch of nreq reads of layer (s->req): they are in flight
 * until batch_finish. A file found changed fails it at once. */
static int batch_submit(struct xstore *s, int layer, int nreq, struct strata_error *err) {
    int rc = file_changed(s, err);
    if (rc) {
        for (int r = 0; r < nreq; r++)
            if (s->slot[s->req_slot[r]].layer >= 0)
                slot_empty(s, s->req_slot[r]);
        add(&s->read_errors, 1);
        return rc;
    }
    xs_io_submit(s->io, s->req, nreq);
    s->pend_layer = layer;
    s->pend_nreq = nreq;
    return 0;
}

/* Waits for the batch in flight, if any; a failed expert's slot is emptied,
 * the others packed (xstore_params.pack). 0, or the first read's error. */
static int batch_finish(struct xstore *s, struct strata_error *err) {
    const int layer = s->pend_layer, nreq = s->pend_nreq;
    int rc = 0;
    if (nreq <= 0)
        return 0;
    s->pend_nreq = 0;
    xs_io_wait(s->io);
    add(&s->batches, 1);
    for (int r = 0; r < nreq; r++) {
        const struct xs_req *q = &s->req[r];
        const int i = s->req_slot[r];
        count_latency(s, q->lat_us);
        add(&s->reads, 1);
        if (q->res > 0)
            add(&s->bytes_read, (uint64_t)q->res);
        if (!s->direct && q->res > 0) /* the copy is ours: the page cache's can go */
            (void)posix_fadvise(s->fd, (off_t)q->off, (off_t)q->res, POSIX_FADV_DONTNEED);
        if (q->res >= (int64_t)q->need)
            continue;
        add(&s->read_errors, 1);
        if (!rc) {
            const int e = s->slot[i].expert;
            const int64_t c = q->res < 0 ? -q->res : ENODATA;
            rc = strata_error_set(err, STRATA_E_IO,
                                  "expert store: reading layer %d expert %d (%u bytes at offset "
                                  "%llu of %s) failed: %s",
                                  layer, e, q->need, (unsigned long long)q->off, gguf_path(s->f),
                                  q->res < 0 ? strerror((int)c) : "the file ends before it");
        }
        slot_empty(s, i); /* its other matrices' reads are ignored: the slot is free */
    }
    pack_filled(s, layer, nreq);
    return rc;
}

/* The slots the batch filled (those its errors did not empty), their
 * matrices put in the kernels' layout where the store packs (xstore-pack.c). */
static void pack_filled(struct xstore *s, int layer, int nreq) {
    if (!s->pack_scratch)
        return;
    for (int r = 0; r < nreq; r++) {
        const int i = s->req_slot[r];
        if ((r > 0 && s->req_slot[r - 1] == i) || s->slot[i].layer != layer)
            continue; /* the slot's second matrix, or emptied by a failed read */
        uint8_t *base = s->mem + (size_t)i * s->slot_bytes;
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            const struct xs_mat *m = &s->mat[(size_t)layer * EXPERTS_WHICH_COUNT + w];
            if (m->bytes && m->packed)
                (void)xs_pack_inplace(base + s->sub_off[w] + s->slot[i].data_off[w], m->type,
                                      m->rows, m->cols, m->row_bytes, s->pack_scratch);
        }
    }
}

/* Makes (layer, ids) resident where slots can be had, holding them for
 * step; reads the cold ones in one batch. late NULL: returns when they are
 * read; else late[e] = 1 for each expert whose reads are left in flight
 * (batch_finish completes them). */
static int load(struct xstore *s, int layer, const int32_t *ids, int n, uint64_t step,
                uint8_t *late, struct strata_error *err) {
    int rc = batch_finish(s, err); /* the batch before, if its wait never came */
    if (rc)
        return rc;
    int nreq = 0;
    bool over = false;
    for (int k = 0; k < n; k++) { /* the hits first: held, no miss of the batch takes them */
        const int i = s->map[(size_t)layer * s->n_expert + ids[k]];
        if (i >= 0) {
            add(&s->layer_hits[layer], 1);
            pin(s, i, step);
            touch(s, i);
        }
    }
    for (int k = 0; k < n; k++) {
        const int e = ids[k];
        const size_t key = (size_t)layer * s->n_expert + e;
        int i = s->map[key];
        if (i >= 0 && s->slot[i].held && s->slot[i].hold_step >= step)
            continue; /* a hit of this batch */
        add(&s->layer_misses[layer], 1);
        if ((i = take_slot(s)) < 0) {
            add(&s->overflow, 1);
            s->over_step[key] = step + 1;
            over = true;
            continue;
        }
        struct xs_slot *x = &s->slot[i];
        x->layer = layer;
        x->expert = e;
        s->map[key] = i;
        s->count[layer]++;
        list_push_head(s, i);
        touch(s, i);
        pin(s, i, step);
        atomic_fetch_add_explicit(&s->slots_used, 1, memory_order_relaxed);
        uint8_t *base = s->mem + (size_t)i * s->slot_bytes;
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            const struct xs_mat *m = &s->mat[(size_t)layer * EXPERTS_WHICH_COUNT + w];
            if (!m->bytes)
                continue;
            const uint64_t off = m->base + (uint64_t)e * m->bytes;
            const uint64_t a0 = ALIGN_DOWN(off), a1 = ALIGN_UP(off + m->bytes);
            x->data_off[w] = (uint32_t)(off - a0);
            s->req[nreq] = (struct xs_req){.buf = base + s->sub_off[w],
                                           .off = a0,
                                           .len = (uint32_t)(a1 - a0),
                                           .need = (uint32_t)(off + m->bytes - a0)};
            s->req_slot[nreq++] = i;
        }
    }
    if (nreq) {
        if ((rc = batch_submit(s, layer, nreq, err)))
            return rc;
        if (!late)
            return batch_finish(s, err);
        for (int r = 0; r < nreq; r++)
            late[s->slot[s->req_slot[r]].expert] = 1;
        return 0;
    }
    /* the overflow is read from the mapping, where a truncated file faults:
     * check it first */
    return over ? file_changed(s, err) : 0;
}

/* ---- the tier's ops --------------------------------------------------------------- */

static int xs_need(void *ctx, int layer, const int32_t *ids, int n, uint64_t step,
                   struct strata_error *err) {
    struct xstore *s = ctx;
    const int rc = batch_finish(s, err);
    if (rc)
        return rc;
    unpin(s, step, layer); /* the step's other layers are done (experts.h ops.need) */
    return load(s, layer, ids, n, step, NULL, err);
}

/* Overlap (xstore.h): the cold experts' reads are left in flight, marked in
 * late; their gets hand out the slots now, the bytes are there after
 * xs_need_wait. */
static int xs_need_start(void *ctx, int layer, const int32_t *ids, int n, uint64_t step,
                         uint8_t *late, struct strata_error *err) {
    struct xstore *s = ctx;
    const int rc = batch_finish(s, err);
    if (rc)
        return rc;
    unpin(s, step, layer);
    return load(s, layer, ids, n, step, late, err);
}

static int xs_need_wait(void *ctx, struct strata_error *err) {
    return batch_finish(ctx, err);
}

static int xs_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                  struct experts_ref *out, struct strata_error *err) {
    struct xstore *s = ctx;
    const struct xs_mat *m = &s->mat[(size_t)layer * EXPERTS_WHICH_COUNT + which];
    if (!m->bytes)
        return strata_error_set(err, STRATA_E_NOT_FOUND, "experts: layer %d has no %s", layer,
                                which_name[which]);
    const size_t key = (size_t)layer * s->n_expert + expert;
    if (s->over_step[key] == step + 1)
        return EXPERTS_MISS; /* no slot this step: the next tier serves it */
    if (s->map[key] < 0) {   /* a get without a need: a batch of one */
        const int32_t id = expert;
        const int rc = load(s, layer, &id, 1, step, NULL, err);
        if (rc)
            return rc;
        if (s->map[key] < 0)
            return EXPERTS_MISS;
    }
    const int i = s->map[key];
    pin(s, i, step);
    const struct xs_slot *x = &s->slot[i];
    out->tier = EXPERTS_TIER_RAM;
    out->mat = (struct backend_mat){
        .w = NULL,
        .index = 0,
        .host = {s->mem + (size_t)i * s->slot_bytes + s->sub_off[which] + x->data_off[which],
                 m->type, m->rows, m->cols, m->row_bytes,
                 m->packed ? BACKEND_LAYOUT_PACK16 : BACKEND_LAYOUT_ROWS},
    };
    return 0;
}

static void xs_release(void *ctx, uint64_t step) {
    /* reads still in flight write into slots this unpins: they end first (an
     * error of theirs already failed the step, or fails none: the slots are
     * emptied either way) */
    (void)batch_finish(ctx, NULL);
    unpin(ctx, step, -1);
}

/* No prefetch queue (yet): every id is dropped, counted, and not passed to
 * the file tier, whose MADV_WILLNEED would fill the page cache the store
 * keeps out of. */
static int xs_prefetch(void *ctx, int layer, const int32_t *ids, int n, int32_t *miss) {
    struct xstore *s = ctx;
    add(&s->prefetch_dropped, (uint64_t)n);
    return 0;
}

static void xs_stats_op(void *ctx, struct experts_stats *acc) {
    struct xstore *s = ctx;
    acc->prefetch_dropped += ld(&s->prefetch_dropped);
}

static void xs_free(void *ctx) {
    struct xstore *s = ctx;
    if (!s)
        return;
    if (s->io)
        (void)batch_finish(s, NULL);
    xs_io_free(s->io);
    if (s->fd >= 0)
        close(s->fd);
    if (s->raw)
        munmap(s->raw, s->raw_bytes);
    free(s->pack_scratch);
    free(s->mat);
    free(s->slot);
    free(s->free_list);
    free(s->map);
    free(s->over_step);
    free(s->count);
    free(s->head);
    free(s->tail);
    free(s->pinned);
    free(s->req);
    free(s->req_slot);
    free((void *)s->layer_hits);
    free((void *)s->layer_misses);
    free(s);
}

static const struct experts_ops xstore_ops = {
    .name = "xstore",
    .get = xs_get,
    .release = xs_release,
    .prefetch = xs_prefetch,
    .resident = NULL, /* it evicts: the forward gets per pick */
    .stats = xs_stats_op,
    .free = xs_free,
    .need = xs_need,
    .need_start = xs_need_start,
    .need_wait = xs_need_wait,
};

/* ---- init ---------------------------------------------------------------------------- */

static int queue_depth(struct xstore *s, const struct xstore_params *p) {
    if (p->queue_depth > 0) {
        s->queue_depth = p->queue_depth;
        snprintf(s->queue_rule, sizeof s->queue_rule, "asked");
    } else {
        s->queue_depth = xs_dev_queue_depth(s->fd, s->queue_rule, sizeof s->queue_rule);
    }
    return s->queue_depth;
}

/* xstore_params.warm: each MoE layer's share of the slots, its most picked
 * experts of prof first (NULL: by id), one batch a layer; then the counters
 * start from zero. */
struct warm_pick {
    uint64_t count;
    int32_t id;
};

/* Most picked first, then by id. */
static int by_count(const void *a, const void *b) {
    const struct warm_pick *x = a, *y = b;
    return x->count != y->count ? (x->count < y->count ? 1 : -1)
                                : (x->id > y->id) - (x->id < y->id);
}

static int warm(struct xstore *s, const struct profile *prof, struct strata_error *err) {
    int n_moe = 0;
    for (int l = 0; l < s->n_layer; l++)
        n_moe += s->mat[(size_t)l * EXPERTS_WHICH_COUNT].bytes > 0;
    int32_t *ids = malloc((size_t)s->n_expert * sizeof *ids);
    struct warm_pick *picks = malloc((size_t)s->n_expert * sizeof *picks);
    if (!ids || !picks) {
        free(ids);
        free(picks);
        return strata_error_set(err, STRATA_E_NOMEM, "expert store: out of memory");
    }
    int rc = 0, left = s->n_slots, moe_left = n_moe;
    for (int l = 0; l < s->n_layer && rc == 0 && moe_left > 0; l++) {
        if (!s->mat[(size_t)l * EXPERTS_WHICH_COUNT].bytes)
            continue;
        int k = (left + moe_left - 1) / moe_left; /* the remainder to the first layers */
        k = k > s->n_expert ? s->n_expert : k;
        for (int e = 0; e < s->n_expert; e++)
            picks[e] = (struct warm_pick){prof ? profile_count(prof, l, e) : 0, e};
        qsort(picks, (size_t)s->n_expert, sizeof *picks, by_count);
        for (int e = 0; e < s->n_expert; e++)
            ids[e] = picks[e].id;
        rc = load(s, l, ids, k, 0, NULL, err);
        unpin(s, 0, -1);
        left -= k;
        moe_left--;
    }
    free(ids);
    free(picks);
    if (rc)
        return rc;
    s->warm_bytes = ld(&s->bytes_read);
    for (int l = 0; l < s->n_layer; l++) {
        atomic_store(&s->layer_hits[l], 0);
        atomic_store(&s->layer_misses[l], 0);
    }
    atomic_store(&s->bytes_read, 0);
    atomic_store(&s->reads, 0);
    atomic_store(&s->batches, 0);
    atomic_store(&s->lat_sum, 0);
    for (int b = 0; b < XSTORE_LAT_BUCKETS; b++)
        atomic_store(&s->lat[b], 0);
    return 0;
}

struct xstore_params xstore_params_default(void) {
    return (struct xstore_params){.ram_bytes = 0,
                                  .io = XSTORE_IO_AUTO,
                                  .direct = XSTORE_DIRECT_AUTO,
                                  .floor = -1,
                                  .queue_depth = 0,
                                  .n_threads = 4,
                                  .sys = NULL,
                                  .warm = false};
}

/* The index: every (layer, which) tensor's place in the file, the slot layout. */
static int index_tensors(struct xstore *s, struct strata_error *err) {
    uint64_t cap[EXPERTS_WHICH_COUNT] = {0};
    const uint64_t data = gguf_data_offset(s->f);
    for (int l = 0; l < s->n_layer; l++)
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, which_name[w]);
            const struct gguf_tensor_info *t = gguf_find_tensor(s->f, name);
            if (!t)
                continue;
            const size_t rb = quant_row_size((enum quant_type)t->type, t->ne[0]);
            if (t->n_dims != 3 || rb == 0 || t->ne[2] < 1 || t->ne[2] > 65536 ||
                (s->n_expert && t->ne[2] != s->n_expert) ||
                (uint64_t)t->ne[1] * rb * (uint64_t)t->ne[2] != t->n_bytes ||
                (uint64_t)t->ne[1] * rb > (1u << 30))
                return strata_error_set(err, STRATA_E_FORMAT,
                                        "expert store: %s has a bad shape or type", name);
            s->n_expert = (int)t->ne[2];
            struct xs_mat *m = &s->mat[(size_t)l * EXPERTS_WHICH_COUNT + w];
            *m = (struct xs_mat){.base = data + t->offset,
                                 .bytes = (uint64_t)t->ne[1] * rb,
                                 .type = (enum quant_type)t->type,
                                 .rows = t->ne[1],
                                 .cols = t->ne[0],
                                 .row_bytes = rb};
            /* widened to the alignment on both ends: at most one block more */
            const uint64_t c = ALIGN_UP(m->bytes) + XSTORE_ALIGN;
            cap[w] = c > cap[w] ? c : cap[w];
        }
    if (!s->n_expert)
        return strata_error_set(err, STRATA_E_NOT_FOUND, "expert store: %s has no expert tensors",
                                gguf_path(s->f));
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
        s->sub_off[w] = s->slot_bytes;
        s->slot_bytes += cap[w];
    }
    return 0;
}

/* Opens the file for the reads: O_DIRECT when asked or auto and a first
 * aligned read takes it. */
static int open_file(struct xstore *s, enum xstore_direct d, struct strata_error *err) {
    const char *path = gguf_path(s->f);
    if (d != XSTORE_DIRECT_OFF) {
        s->fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        int why = s->fd < 0 ? errno : 0;
        if (s->fd >= 0) {
            void *probe = NULL;
            uint64_t first = 0; /* the first expert tensor (a layer may have none) */
            for (int i = 0; i < s->n_layer * EXPERTS_WHICH_COUNT && !first; i++)
                first = s->mat[i].bytes ? s->mat[i].base : 0;
            if (posix_memalign(&probe, XSTORE_ALIGN, XSTORE_ALIGN) == 0) {
                if (pread(s->fd, probe, XSTORE_ALIGN, (off_t)ALIGN_DOWN(first)) < 0)
                    why = errno;
                free(probe);
            }
            if (why) {
                close(s->fd);
                s->fd = -1;
            }
        }
        if (s->fd >= 0) {
            s->direct = true;
        } else if (d == XSTORE_DIRECT_ON || (why != EINVAL && why != EOPNOTSUPP)) {
            return strata_error_set(err, STRATA_E_IO, "expert store: open %s with O_DIRECT: %s",
                                    path, strerror(why));
        }
    }
    if (s->fd < 0) {
        if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return strata_error_set(err, STRATA_E_IO, "expert store: open %s: %s", path,
                                    strerror(errno));
        /* no readahead: it would fill the page cache with the neighbouring
         * experts, the second copy the store exists to avoid (the
         * DONTNEED after each read drops only what was asked) */
        (void)posix_fadvise(s->fd, 0, 0, POSIX_FADV_RANDOM);
    }
    if (fstat(s->fd, &s->st0) != 0)
        return strata_error_set(err, STRATA_E_IO, "expert store: fstat %s: %s", path,
                                strerror(errno));
    if ((uint64_t)s->st0.st_size != gguf_file_size(s->f))
        return strata_error_set(
            err, STRATA_E_IO, "expert store: %s is %lld bytes, %llu when it was mapped", path,
            (long long)s->st0.st_size, (unsigned long long)gguf_file_size(s->f));
    return 0;
}

static struct xstore *alloc_tables(int n_layer, int n_expert, int n_slots) {
    struct xstore *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->fd = -1;
    const size_t ke = (size_t)n_layer * n_expert;
    bool ok = (s->slot = calloc((size_t)n_slots, sizeof *s->slot)) &&
              (s->free_list = calloc((size_t)n_slots, sizeof *s->free_list)) &&
              (s->pinned = calloc((size_t)n_slots, sizeof *s->pinned)) &&
              (s->map = malloc(ke * sizeof *s->map)) &&
              (s->over_step = calloc(ke, sizeof *s->over_step)) &&
              (s->count = calloc((size_t)n_layer, sizeof *s->count)) &&
              (s->head = malloc((size_t)n_layer * sizeof *s->head)) &&
              (s->tail = malloc((size_t)n_layer * sizeof *s->tail)) &&
              (s->req = calloc((size_t)n_expert * EXPERTS_WHICH_COUNT, sizeof *s->req)) &&
              (s->req_slot = calloc((size_t)n_expert * EXPERTS_WHICH_COUNT, sizeof *s->req_slot)) &&
              (s->layer_hits = calloc((size_t)n_layer, sizeof *s->layer_hits)) &&
              (s->layer_misses = calloc((size_t)n_layer, sizeof *s->layer_misses));
    if (!ok) {
        xs_free(s);
        return NULL;
    }
    for (size_t i = 0; i < ke; i++)
        s->map[i] = -1;
    for (int l = 0; l < n_layer; l++)
        s->head[l] = s->tail[l] = -1;
    for (int i = 0; i < n_slots; i++) {
        s->slot[i] = (struct xs_slot){.layer = -1, .expert = -1, .prev = -1, .next = -1};
        s->free_list[i] = n_slots - 1 - i; /* slot 0 first */
    }
    s->n_free = n_slots;
    s->n_slots = n_slots;
    return s;
}

struct experts_source *xstore_init(const struct gguf_file *f, int n_layer, int n_expert_used,
                                   struct experts_source *next, const struct xstore_params *params,
                                   struct strata_error *err) {
    const struct xstore_params p = params ? *params : xstore_params_default();
    struct xstore probe = {.f = f, .n_layer = n_layer};
    if (!f || n_layer < 1 || n_expert_used < 1 || !gguf_path(f)[0]) {
        experts_free(next);
        strata_error_set(err, STRATA_E_INVALID, "expert store: needs a model file, %d layers",
                         n_layer);
        return NULL;
    }
    if (!(probe.mat = calloc((size_t)n_layer * EXPERTS_WHICH_COUNT, sizeof *probe.mat))) {
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "expert store: out of memory");
        return NULL;
    }
    if (index_tensors(&probe, err)) {
        free(probe.mat);
        experts_free(next);
        return NULL;
    }
    const uint64_t all = (uint64_t)n_layer * (uint64_t)probe.n_expert;
    uint64_t n_slots = p.ram_bytes ? p.ram_bytes / probe.slot_bytes : all;
    n_slots = n_slots > all ? all : n_slots;
    if (n_slots < (uint64_t)n_expert_used || n_expert_used > probe.n_expert) {
        free(probe.mat);
        experts_free(next);
        strata_error_set(err, STRATA_E_RANGE,
                         "expert store: --expert-ram %llu bytes holds %llu experts; one token "
                         "needs %d (at least %llu bytes)",
                         (unsigned long long)p.ram_bytes, (unsigned long long)n_slots,
                         n_expert_used, (unsigned long long)n_expert_used * probe.slot_bytes);
        return NULL;
    }
    struct xstore *s = alloc_tables(n_layer, probe.n_expert, (int)n_slots);
    if (!s) {
        free(probe.mat);
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "expert store: out of memory");
        return NULL;
    }
    s->f = f;
    s->sys = p.sys;
    s->n_layer = n_layer;
    s->n_expert = probe.n_expert;
    s->mat = probe.mat;
    memcpy(s->sub_off, probe.sub_off, sizeof s->sub_off);
    s->slot_bytes = probe.slot_bytes;
    s->floor = p.floor < 0 ? n_expert_used : p.floor;
    /* a floor the budget cannot give every MoE layer would never bind (every
     * layer at or under it: plain LRU, the sweep's collapse): cap it at the
     * layers' fair share, so each layer keeps its latest experts */
    int n_moe = 0;
    for (int l = 0; l < n_layer; l++)
        n_moe += s->mat[(size_t)l * EXPERTS_WHICH_COUNT].bytes > 0;
    if (n_moe > 0 && s->floor > (int)n_slots / n_moe)
        s->floor = (int)n_slots / n_moe;
    /* Huge pages, as the weight arena has (cpu-weights.c): a decode step
     * streams every picked expert's ~0.9 MB, and from 4 KiB pages that is
     * a TLB miss every 4 KiB (figures: xstore_params.pack in xstore.h). */
    s->raw_bytes = (size_t)n_slots * s->slot_bytes + XSTORE_HUGE;
    s->raw = mmap(NULL, s->raw_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->raw == MAP_FAILED) {
        s->raw = NULL;
        xs_free(s);
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "expert store: cannot map %zu bytes of slots",
                         (size_t)n_slots * probe.slot_bytes);
        return NULL;
    }
    s->mem = (uint8_t *)(((uintptr_t)s->raw + XSTORE_HUGE - 1) & ~(uintptr_t)(XSTORE_HUGE - 1));
#ifdef MADV_HUGEPAGE
    (void)madvise(s->mem, (size_t)n_slots * s->slot_bytes, MADV_HUGEPAGE);
#endif
    size_t scratch = 0;
    for (int i = 0; p.pack && i < n_layer * EXPERTS_WHICH_COUNT; i++) {
        struct xs_mat *m = &s->mat[i];
        m->packed = m->bytes && xs_pack_wanted(m->type, m->rows, m->cols);
        if (m->packed && xs_pack_scratch_bytes(m->row_bytes) > scratch)
            scratch = xs_pack_scratch_bytes(m->row_bytes);
    }
    if (scratch && !(s->pack_scratch = malloc(scratch))) {
        xs_free(s);
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "expert store: out of memory");
        return NULL;
    }
    if (open_file(s, p.direct, err) ||
        !(s->io = xs_io_init(s->fd, p.io, queue_depth(s, &p), p.n_threads, p.sys, err))) {
        xs_free(s);
        experts_free(next);
        return NULL;
    }
    snprintf(s->mode, sizeof s->mode, "%s+%s", xs_io_name(s->io),
             s->direct ? "direct" : "buffered");
    const struct profile *wp = p.warm_profile;
    if (wp && (profile_n_layer(wp) != n_layer || profile_n_expert(wp) != s->n_expert))
        wp = NULL; /* recorded for another model */
    if (p.warm && warm(s, wp, err)) {
        xs_free(s);
        experts_free(next);
        return NULL;
    }
    return experts_source_init(&xstore_ops, s, next, n_layer, s->n_expert, err);
}

struct xstore *xstore_of(struct experts_source *chain) {
    for (; chain; chain = chain->next)
        if (chain->ops == &xstore_ops)
            return chain->ctx;
    return NULL;
}

const char *xstore_mode(const struct xstore *s) {
    return s ? s->mode : "off";
}

void xstore_stats(const struct xstore *cs, struct xstore_stats *out) {
    memset(out, 0, sizeof *out);
    out->io = "off";
    out->direct = "off";
    if (!cs)
        return;
    struct xstore *s = (struct xstore *)cs; /* the counters are atomics */
    out->io = xs_io_name(s->io);
    out->direct = s->direct ? "direct" : "buffered";
    out->n_layer = s->n_layer;
    out->n_slots = s->n_slots;
    out->slots_used = atomic_load_explicit(&s->slots_used, memory_order_relaxed);
    out->slot_bytes = s->slot_bytes;
    out->capacity_bytes = (uint64_t)s->n_slots * s->slot_bytes;
    out->used_bytes = (uint64_t)out->slots_used * s->slot_bytes;
    out->layer_hits = calloc((size_t)s->n_layer, sizeof *out->layer_hits);
    out->layer_misses = calloc((size_t)s->n_layer, sizeof *out->layer_misses);
    for (int l = 0; l < s->n_layer; l++) {
        const uint64_t h = ld(&s->layer_hits[l]), m = ld(&s->layer_misses[l]);
        out->hits += h;
        out->misses += m;
        if (out->layer_hits && out->layer_misses) {
            out->layer_hits[l] = h;
            out->layer_misses[l] = m;
        }
    }
    out->overflow = ld(&s->overflow);
    out->evictions = ld(&s->evictions);
    out->read_errors = ld(&s->read_errors);
    out->bytes_read = ld(&s->bytes_read);
    out->reads = ld(&s->reads);
    out->batches = ld(&s->batches);
    out->warm_bytes = s->warm_bytes;
    out->lat_sum_us = ld(&s->lat_sum);
    for (int b = 0; b < XSTORE_LAT_BUCKETS; b++)
        out->lat[b] = ld(&s->lat[b]);
    out->prefetch_dropped = ld(&s->prefetch_dropped);
    out->queue_depth = s->queue_depth;
    out->queue_rule = s->queue_rule;
}

void xstore_stats_free(struct xstore_stats *st) {
    if (!st)
        return;
    free(st->layer_hits);
    free(st->layer_misses);
    st->layer_hits = st->layer_misses = NULL;
}
