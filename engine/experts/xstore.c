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
#include "engine/experts/xstore-numa.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

const char *const xs_which_name[EXPERTS_WHICH_COUNT] = {"ffn_gate_exps", "ffn_up_exps",
                                                        "ffn_down_exps"};

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
void xs_unpin(struct xstore *s, uint64_t step, int keep_layer) {
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

/* The oldest slot not held (nor reading) of region r (< 0: any), from the
 * tail of layer l's list, or -1. */
static int oldest_free_of(const struct xstore *s, int l, int r, bool take_prefetched) {
    for (int i = s->tail[l]; i >= 0; i = s->slot[i].prev)
        if (!s->slot[i].held && !s->slot[i].reading &&
            (take_prefetched || !s->slot[i].prefetched) &&
            (r < 0 || xs_numa_region_of_slot(s->numa, i) == r))
            return i;
    return -1;
}

/* A slot to fill for expert e (-1: any region): a free one, else the victim
 * (xstore.h "Replacement"), emptied; -1 when every slot is held or being
 * read. Per-node slots (xstore-numa.h): e's home region, then the other. */
static int take_slot(struct xstore *s, int e, bool take_prefetched) {
    const int home = e < 0 ? -1 : xs_numa_region_of_expert(s->numa, e);
    for (int t = 0; t < (home < 0 ? 1 : 2); t++) {
        const int r = home < 0 ? -1 : t == 0 ? home : 1 - home;
        const int k = xs_numa_free_index(s->numa, s->free_list, s->n_free, r);
        if (k >= 0) {
            const int i = s->free_list[k];
            s->free_list[k] = s->free_list[--s->n_free];
            return i;
        }
        int best = -1;
        /* a slot read ahead and not needed yet goes last (pass 2) */
        for (int pass = 0; pass < (take_prefetched ? 3 : 2) && best < 0; pass++) {
            for (int l = 0; l < s->n_layer; l++) {
                if (s->count[l] <= (pass == 0 ? s->floor : 0))
                    continue;
                const int i = oldest_free_of(s, l, r, pass == 2);
                if (i >= 0 && (best < 0 || s->slot[i].last < s->slot[best].last))
                    best = i;
            }
        }
        if (best >= 0) {
            if (s->slot[best].prefetched)
                add(&s->pf_wasted, 1);
            add(&s->evictions, 1);
            slot_empty(s, best);
            return s->free_list[--s->n_free];
        }
    }
    return -1;
}

/* ---- reads ---------------------------------------------------------------------------
 * Every slot being filled has its reads (s->sreq[slot * 3 ..]) queued on
 * the io (xstore-io.h) and is `reading` until settled: its counters
 * counted, its bytes packed, or (a failed read) the slot emptied. A need
 * waits for the reads of its own experts only (those it queued, and reads
 * ahead already in flight for them: `wanted`), never for the rest; reads
 * ahead nobody waits for are settled when found done (reap). A reading
 * slot is never taken nor emptied: the kernel or a pool thread writes
 * into it. */

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

/* Slot i (free) now holds (layer, e), its reads prepared (not queued). */
static void fill_slot(struct xstore *s, int i, int layer, int e) {
    struct xs_slot *x = &s->slot[i];
    x->layer = layer;
    x->expert = e;
    x->prefetched = false;
    s->map[(size_t)layer * s->n_expert + e] = i;
    s->count[layer]++;
    list_push_head(s, i);
    touch(s, i);
    atomic_fetch_add_explicit(&s->slots_used, 1, memory_order_relaxed);
    uint8_t *base = s->mem + (size_t)i * s->slot_bytes;
    struct xs_req *rq = &s->sreq[(size_t)i * EXPERTS_WHICH_COUNT];
    int n = 0;
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
        const struct xs_mat *m = &s->mat[(size_t)layer * EXPERTS_WHICH_COUNT + w];
        if (!m->bytes)
            continue;
        const uint64_t off = m->base + (uint64_t)e * m->bytes;
        const uint64_t a0 = ALIGN_DOWN(off), a1 = ALIGN_UP(off + m->bytes);
        x->data_off[w] = (uint32_t)(off - a0);
        rq[n++] = (struct xs_req){.buf = base + s->sub_off[w],
                                  .off = a0,
                                  .len = (uint32_t)(a1 - a0),
                                  .need = (uint32_t)(off + m->bytes - a0)};
    }
    x->nreq = (uint8_t)n;
}

/* Queues the reads of the n filled slots in ids (ahead: a prefetch's).
 * A file found changed fails them at once: the slots are emptied. */
static int queue_slots(struct xstore *s, const int32_t *ids, int n, bool ahead,
                       struct strata_error *err) {
    if (n <= 0)
        return 0;
    const int rc = file_changed(s, err);
    if (rc) {
        for (int k = 0; k < n; k++)
            if (s->slot[ids[k]].layer >= 0)
                slot_empty(s, ids[k]);
        add(&s->read_errors, 1);
        return rc;
    }
    add(&s->batches, 1);
    for (int k = 0; k < n; k++) {
        struct xs_slot *x = &s->slot[ids[k]];
        x->reading = true;
        x->ahead = ahead;
        x->infl = s->n_infl;
        s->infl[s->n_infl++] = ids[k];
        if (ahead)
            s->pf_reading++;
        xs_io_queue(s->io, &s->sreq[(size_t)ids[k] * EXPERTS_WHICH_COUNT], x->nreq, ahead);
    }
    return 0;
}

static bool slot_read_done(const struct xstore *s, int i) {
    const struct xs_req *rq = &s->sreq[(size_t)i * EXPERTS_WHICH_COUNT];
    for (int r = 0; r < s->slot[i].nreq; r++)
        if (!xs_req_done(&rq[r]))
            return false;
    return true;
}

/* Slot i's reads are done: counted, the page cache's copy dropped
 * (buffered), then packed; or a failed read: the slot emptied and, when
 * report, err names it. 0 or STRATA_E_IO. */
static int settle(struct xstore *s, int i, bool report, struct strata_error *err) {
    struct xs_slot *x = &s->slot[i];
    const struct xs_req *rq = &s->sreq[(size_t)i * EXPERTS_WHICH_COUNT];
    int rc = 0;
    for (int r = 0; r < x->nreq; r++) {
        const struct xs_req *q = &rq[r];
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
            const int64_t c = q->res < 0 ? -q->res : ENODATA;
            rc = report
                     ? strata_error_set(err, STRATA_E_IO,
                                        "expert store: reading layer %d expert %d (%u bytes at "
                                        "offset %llu of %s) failed: %s",
                                        x->layer, x->expert, q->need, (unsigned long long)q->off,
                                        gguf_path(s->f),
                                        q->res < 0 ? strerror((int)c) : "the file ends before it")
                     : STRATA_E_IO;
        }
    }
    x->reading = false;
    x->wanted = false;
    if (x->ahead)
        s->pf_reading--;
    x->ahead = false;
    const int last = s->infl[--s->n_infl]; /* out of the list */
    s->infl[x->infl] = last;
    s->slot[last].infl = x->infl;
    if (rc) {
        slot_empty(s, i);
        return rc;
    }
    for (int w = 0; s->pack_scratch && w < EXPERTS_WHICH_COUNT; w++) {
        const struct xs_mat *m = &s->mat[(size_t)x->layer * EXPERTS_WHICH_COUNT + w];
        if (m->bytes && m->packed)
            (void)xs_pack_inplace(s->mem + (size_t)i * s->slot_bytes + s->sub_off[w] +
                                      x->data_off[w],
                                  m->type, m->rows, m->cols, m->row_bytes, s->pack_scratch);
    }
    return 0;
}

/* Waits for slot i's reads and settles it. A read ahead that failed is
 * read again in place as a need's (the need's gets already point into the
 * slot); that one's failure is the step's. */
static int wait_slot(struct xstore *s, int i, bool report, struct strata_error *err) {
    struct xs_req *rq = &s->sreq[(size_t)i * EXPERTS_WHICH_COUNT];
    for (int r = 0; r < s->slot[i].nreq; r++)
        xs_io_wait_req(s->io, &rq[r]);
    struct xs_slot *x = &s->slot[i];
    if (x->ahead) {
        bool ok = true;
        for (int r = 0; r < x->nreq; r++)
            ok &= rq[r].res >= (int64_t)rq[r].need;
        if (!ok) { /* counted as failed reads, then again as the need's */
            for (int r = 0; r < x->nreq; r++) {
                count_latency(s, rq[r].lat_us);
                add(&s->reads, 1);
                add(&s->read_errors, rq[r].res < (int64_t)rq[r].need);
            }
            x->ahead = false;
            s->pf_reading--;
            xs_io_queue(s->io, rq, x->nreq, false);
            for (int r = 0; r < x->nreq; r++)
                xs_io_wait_req(s->io, &rq[r]);
        }
    }
    return settle(s, i, report, err);
}

/* Settles the reads ahead found done that no need waits for. */
static void reap(struct xstore *s) {
    if (!s->n_infl)
        return;
    xs_io_poll(s->io);
    for (int k = s->n_infl - 1; k >= 0; k--) {
        if (k >= s->n_infl)
            continue;
        const int i = s->infl[k];
        if (!s->slot[i].wanted && slot_read_done(s, i))
            (void)settle(s, i, false, NULL);
    }
}

/* Waits for every slot the current need waits for (s->want): 0, or the
 * first failed read's error (the slots of every failed read emptied). */
static int finish_wanted(struct xstore *s, struct strata_error *err) {
    int rc = 0;
    const int n = s->n_want;
    s->n_want = 0;
    for (int k = 0; k < n; k++) {
        const int i = s->want[k];
        if (!s->slot[i].reading || !s->slot[i].wanted)
            continue;
        const int r = wait_slot(s, i, rc == 0, err);
        rc = rc ? rc : r;
    }
    return rc;
}

/* ---- prefetch ------------------------------------------------------------------------
 * experts_prefetch (any thread: the model's predictor, engine/model
 * model-predict.c) records the layer's predicted experts (for recall and
 * precision, counted at the layer's next need) and queues them; the
 * forward thread takes the queue at its next need, need wait or get (at
 * once when it asked itself) and reads the cold ones ahead into slots,
 * after every read a need has queued. A queued expert already resident or
 * being read is skipped (never read twice); a full queue, a busy lock or
 * pf_cap slots already being read ahead drop the rest. A need that picks
 * an expert whose read ahead is still in flight waits for that read (no
 * second read). A slot read ahead is taken for another expert only when
 * nothing else can be (take_slot's last pass), and counts as wasted then,
 * or when its layer's need came without it; as useful when a need finds
 * it. A prefetch's failed read fails no step: the slot is emptied (or, when
 * a need already waits for it, read again as the need's). */

static void pf_drain(struct xstore *s) {
    if (!s->pf_mu_ok || !atomic_load_explicit(&s->pf_any, memory_order_relaxed))
        return;
    pthread_mutex_lock(&s->pf_mu);
    const int n = s->pf_n;
    memcpy(s->pf_take, s->pf_q, (size_t)n * 2 * sizeof *s->pf_q);
    s->pf_n = 0;
    atomic_store_explicit(&s->pf_any, 0, memory_order_relaxed);
    pthread_mutex_unlock(&s->pf_mu);
    reap(s); /* reads ahead done free their places under pf_cap */
    int32_t *ids = s->pf_ids;
    int nq = 0;
    for (int k = 0; k < n; k++) {
        const int l = s->pf_take[2 * k], e = s->pf_take[2 * k + 1];
        if (s->map[(size_t)l * s->n_expert + e] >= 0)
            continue;
        /* never a slot read ahead and not needed yet */
        const int i = s->pf_reading + nq < s->pf_cap ? take_slot(s, e, false) : -1;
        if (i < 0) {
            add(&s->prefetch_dropped, (uint64_t)(n - k));
            break;
        }
        fill_slot(s, i, l, e);
        s->slot[i].prefetched = true;
        ids[nq++] = i;
        add(&s->pf_issued, 1);
    }
    (void)queue_slots(s, ids, nq, true, NULL); /* a changed file: the slots are emptied */
}

static int xs_prefetch(void *ctx, int layer, const int32_t *ids, int n, int32_t *miss) {
    struct xstore *s = ctx;
    (void)miss; /* nothing passes on: the file tier's readahead fills the page cache */
    if (layer < 0 || layer >= s->n_layer || !s->mat[(size_t)layer * EXPERTS_WHICH_COUNT].bytes ||
        !s->pf_mu_ok || pthread_mutex_trylock(&s->pf_mu) != 0) {
        add(&s->prefetch_dropped, (uint64_t)(n > 0 ? n : 0));
        return 0;
    }
    /* the layer's predictions since its last need add up (depth 2: the
     * union of what two layers before predicted) */
    uint8_t *pr = s->pred + (size_t)layer * s->n_expert;
    if (!s->pred_on[layer])
        memset(pr, 0, (size_t)s->n_expert);
    s->pred_on[layer] = 1;
    int dropped = 0;
    for (int k = 0; k < n; k++) {
        const int e = ids[k];
        if (e < 0 || e >= s->n_expert)
            continue;
        if (pr[e]) /* queued before for this layer's next need */
            continue;
        pr[e] = 1;
        if (s->pf_n < s->n_expert) {
            s->pf_q[2 * s->pf_n] = layer;
            s->pf_q[2 * s->pf_n + 1] = e;
            s->pf_n++;
        } else {
            dropped++;
        }
    }
    atomic_store_explicit(&s->pf_any, s->pf_n > 0, memory_order_relaxed);
    pthread_mutex_unlock(&s->pf_mu);
    add(&s->prefetch_dropped, (uint64_t)dropped);
    if ((uintptr_t)pthread_self() == atomic_load(&s->fwd_id)) /* the forward thread asked */
        pf_drain(s);
    return 0;
}

/* At the need of (layer, ids): recall and precision of its prediction; the
 * slots read ahead for it are useful or wasted now. */
static void pf_account(struct xstore *s, int layer, const int32_t *ids, int n) {
    atomic_store(&s->fwd_id, (uintptr_t)pthread_self());
    if (s->pf_mu_ok) {
        pthread_mutex_lock(&s->pf_mu);
        if (s->pred_on[layer]) {
            const uint8_t *pr = s->pred + (size_t)layer * s->n_expert;
            uint64_t hit = 0, np = 0;
            for (int k = 0; k < n; k++)
                hit += pr[ids[k]] != 0;
            for (int e = 0; e < s->n_expert; e++)
                np += pr[e] != 0;
            add(&s->pred_hit, hit);
            add(&s->pred_used, (uint64_t)n);
            add(&s->pred_n, np);
            s->pred_on[layer] = 0;
        }
        pthread_mutex_unlock(&s->pf_mu);
    }
    for (int k = 0; k < n; k++) {
        const int i = s->map[(size_t)layer * s->n_expert + ids[k]];
        if (i >= 0 && s->slot[i].prefetched) {
            s->slot[i].prefetched = false;
            add(&s->pf_useful, 1);
        }
    }
    for (int i = s->head[layer]; i >= 0; i = s->slot[i].next)
        if (s->slot[i].prefetched) { /* predicted for this visit, not picked */
            s->slot[i].prefetched = false;
            add(&s->pf_wasted, 1);
        }
}

/* Makes (layer, ids) resident where slots can be had, holding them for
 * step; queues the cold ones' reads together. late NULL: returns when
 * they (and reads ahead in flight for its ids) are read; else late[e] = 1
 * for each expert whose bytes are still to come (finish_wanted, at the
 * need's wait, completes them). */
int xs_load(struct xstore *s, int layer, const int32_t *ids, int n, uint64_t step, uint8_t *late,
            struct strata_error *err) {
    int rc = finish_wanted(s, err); /* the need before, if its wait never came */
    if (rc)
        return rc;
    reap(s);
    pf_account(s, layer, ids, n);
    bool over = false;
    for (int k = 0; k < n; k++) { /* the hits first: held, no miss of the batch takes them */
        const int i = s->map[(size_t)layer * s->n_expert + ids[k]];
        if (i >= 0) {
            add(&s->layer_hits[layer], 1);
            pin(s, i, step);
            touch(s, i);
            if (s->slot[i].reading && !s->slot[i].wanted) { /* read ahead, in flight */
                s->slot[i].wanted = true;
                s->want[s->n_want++] = i;
            }
        }
    }
    int nq = 0;
    int32_t *fresh = s->want + s->n_want;
    for (int k = 0; k < n; k++) {
        const int e = ids[k];
        const size_t key = (size_t)layer * s->n_expert + e;
        int i = s->map[key];
        if (i >= 0 && s->slot[i].held && s->slot[i].hold_step >= step)
            continue; /* a hit of this batch */
        add(&s->layer_misses[layer], 1);
        if ((i = take_slot(s, e, true)) < 0) {
            add(&s->overflow, 1);
            s->over_step[key] = step + 1;
            over = true;
            continue;
        }
        fill_slot(s, i, layer, e);
        pin(s, i, step);
        s->slot[i].wanted = true;
        fresh[nq++] = i;
    }
    if ((rc = queue_slots(s, fresh, nq, false, err)))
        return rc;
    s->n_want += nq;
    pf_drain(s); /* predictions that came meanwhile: behind this need's reads */
    if (!late)
        rc = finish_wanted(s, err);
    else
        for (int k = 0; k < s->n_want; k++)
            late[s->slot[s->want[k]].expert] = 1;
    if (rc)
        return rc;
    /* the overflow is read from the mapping, where a truncated file faults:
     * check it first */
    return over ? file_changed(s, err) : 0;
}

/* ---- the tier's ops --------------------------------------------------------------- */

static int xs_need(void *ctx, int layer, const int32_t *ids, int n, uint64_t step,
                   struct strata_error *err) {
    struct xstore *s = ctx;
    const int rc = finish_wanted(s, err);
    if (rc)
        return rc;
    xs_unpin(s, step, layer); /* the step's other layers are done (experts.h ops.need) */
    return xs_load(s, layer, ids, n, step, NULL, err);
}

/* Overlap (xstore.h): the cold experts' reads are left in flight, marked in
 * late; their gets hand out the slots now, the bytes are there after
 * xs_need_wait. */
static int xs_need_start(void *ctx, int layer, const int32_t *ids, int n, uint64_t step,
                         uint8_t *late, struct strata_error *err) {
    struct xstore *s = ctx;
    const int rc = finish_wanted(s, err);
    if (rc)
        return rc;
    xs_unpin(s, step, layer);
    return xs_load(s, layer, ids, n, step, late, err);
}

static int xs_need_wait(void *ctx, struct strata_error *err) {
    struct xstore *s = ctx;
    pf_drain(s); /* predictions made while the resident experts computed */
    return finish_wanted(s, err);
}

static int xs_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                  struct experts_ref *out, struct strata_error *err) {
    struct xstore *s = ctx;
    const struct xs_mat *m = &s->mat[(size_t)layer * EXPERTS_WHICH_COUNT + which];
    if (!m->bytes)
        return strata_error_set(err, STRATA_E_NOT_FOUND, "experts: layer %d has no %s", layer,
                                xs_which_name[which]);
    const size_t key = (size_t)layer * s->n_expert + expert;
    if (s->over_step[key] == step + 1)
        return EXPERTS_MISS; /* no slot this step: the next tier serves it */
    if (s->map[key] < 0) {   /* a get without a need: a batch of one */
        const int32_t id = expert;
        const int rc = xs_load(s, layer, &id, 1, step, NULL, err);
        if (rc)
            return rc;
        if (s->map[key] < 0)
            return EXPERTS_MISS;
    }
    const int i = s->map[key];
    if (s->slot[i].reading && !s->slot[i].wanted) { /* read ahead, in flight, got unneeded */
        const int rc = wait_slot(s, i, true, err);
        if (rc)
            return rc;
        if (s->map[key] < 0)
            return EXPERTS_MISS;
    }
    pin(s, i, step);
    pf_drain(s);
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
    (void)finish_wanted(ctx, NULL);
    xs_unpin(ctx, step, -1);
}

static void xs_stats_op(void *ctx, struct experts_stats *acc) {
    struct xstore *s = ctx;
    acc->prefetch_dropped += ld(&s->prefetch_dropped);
    acc->prefetch_queued += ld(&s->pf_issued);
    acc->prefetch_done += ld(&s->pf_issued);
}

void xs_free(void *ctx) {
    struct xstore *s = ctx;
    if (!s)
        return;
    s->pf_n = 0;       /* no reads ahead now */
    xs_io_free(s->io); /* after every read in flight */
    if (s->fd >= 0)
        close(s->fd);
    xs_numa_free(s->numa);
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
    free(s->sreq);
    free(s->infl);
    free(s->want);
    free(s->pf_ids);
    free((void *)s->layer_hits);
    free((void *)s->layer_misses);
    free(s->pf_q);
    free(s->pf_take);
    free(s->pred);
    free(s->pred_on);
    if (s->pf_mu_ok)
        pthread_mutex_destroy(&s->pf_mu);
    free(s);
}

const struct experts_ops xstore_ops = {
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
