/* engine/experts/xstore-init.c: the expert store's start (xstore.h): the
 * index of the experts' byte ranges, the slots' memory, the file opened for
 * the reads, the warm fill; and its counters for xstore_stats. */
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
        rc = xs_load(s, l, ids, k, 0, NULL, err);
        xs_unpin(s, 0, -1);
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

/* xstore_params.fixed: the slots registered with the ring (xstore.h
 * "Registered buffers") where asked, or by default where they paid. */
static int fixed_buffers(struct xstore *s, const struct xstore_params *p,
                         struct strata_error *err) {
    const bool can = strcmp(xs_io_name(s->io), "io_uring") == 0 && s->direct;
    if (p->fixed == XSTORE_FIXED_OFF || (p->fixed == XSTORE_FIXED_AUTO && !XSTORE_FIXED_DEFAULT)) {
        snprintf(s->fixed_rule, sizeof s->fixed_rule, "off (%s)",
                 p->fixed == XSTORE_FIXED_OFF ? "asked" : "default");
        return 0;
    }
    if (!can) {
        snprintf(s->fixed_rule, sizeof s->fixed_rule, "off (%s)",
                 s->direct ? "pread mode" : "buffered reads");
        if (p->fixed == XSTORE_FIXED_ON)
            return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                    "expert store: registered buffers need io_uring and O_DIRECT "
                                    "(the store reads %s)",
                                    s->mode);
        return 0;
    }
    struct strata_error why = {0};
    if (xs_io_register(s->io, s->mem, (uint64_t)s->n_slots * s->slot_bytes, s->slot_bytes, &why)) {
        snprintf(s->fixed_rule, sizeof s->fixed_rule, "off (%.100s)", why.message);
        if (p->fixed == XSTORE_FIXED_ON)
            return strata_error_set(err, STRATA_E_UNSUPPORTED, "expert store: %s", why.message);
        return 0;
    }
    s->fixed = true;
    snprintf(s->fixed_rule, sizeof s->fixed_rule, "on (%s)",
             p->fixed == XSTORE_FIXED_ON ? "asked" : "default");
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
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, xs_which_name[w]);
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
              (s->sreq = calloc((size_t)n_slots * EXPERTS_WHICH_COUNT, sizeof *s->sreq)) &&
              (s->infl = calloc((size_t)n_slots, sizeof *s->infl)) &&
              (s->want = calloc((size_t)n_expert, sizeof *s->want)) &&
              (s->pf_ids = calloc((size_t)n_expert, sizeof *s->pf_ids)) &&
              (s->layer_hits = calloc((size_t)n_layer, sizeof *s->layer_hits)) &&
              (s->layer_misses = calloc((size_t)n_layer, sizeof *s->layer_misses)) &&
              (s->pf_q = calloc((size_t)n_expert * 2, sizeof *s->pf_q)) &&
              (s->pf_take = calloc((size_t)n_expert * 2, sizeof *s->pf_take)) &&
              (s->pred = calloc(ke, 1)) && (s->pred_on = calloc((size_t)n_layer, 1));
    if (ok)
        ok = s->pf_mu_ok = pthread_mutex_init(&s->pf_mu, NULL) == 0;
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
    if (xs_numa_init(s->mem, (int)n_slots, s->slot_bytes, p.pool, p.numa_ops, &s->numa, err) ||
        open_file(s, p.direct, err) ||
        !(s->io = xs_io_init(s->fd, p.io, queue_depth(s, &p), p.n_threads, p.sys, err))) {
        xs_free(s);
        experts_free(next);
        return NULL;
    }
    snprintf(s->mode, sizeof s->mode, "%s+%s", xs_io_name(s->io),
             s->direct ? "direct" : "buffered");
    /* reads ahead in flight at most: a few layers' worth of picks, a
     * quarter of the slots (the rest stays for the needs) */
    s->pf_cap = 4 * n_expert_used;
    s->pf_cap = s->pf_cap > (int)n_slots / 4 ? (int)n_slots / 4 : s->pf_cap;
    s->pf_cap = s->pf_cap < 1 ? 1 : s->pf_cap;
    if (fixed_buffers(s, &p, err)) {
        xs_free(s);
        experts_free(next);
        return NULL;
    }
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

const struct xs_numa *xstore_numa(const struct xstore *s) {
    return s ? s->numa : NULL;
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
    out->prefetch_issued = ld(&s->pf_issued);
    out->prefetch_useful = ld(&s->pf_useful);
    out->prefetch_wasted = ld(&s->pf_wasted);
    out->pred_hit = ld(&s->pred_hit);
    out->pred_used = ld(&s->pred_used);
    out->pred_n = ld(&s->pred_n);
    out->queue_rule = s->queue_rule;
    out->fixed = s->fixed;
    out->fixed_rule = s->fixed_rule;
}

void xstore_stats_free(struct xstore_stats *st) {
    if (!st)
        return;
    free(st->layer_hits);
    free(st->layer_misses);
    st->layer_hits = st->layer_misses = NULL;
}
