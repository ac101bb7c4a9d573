/* engine/experts/xstore-impl.h: the expert store's internals shared between
 * its files (private to engine/experts): the store's struct (slots, the
 * batch in flight, the prefetch queue, counters) that xstore.c (slots,
 * batches, prefetch, the tier's ops) and xstore-init.c (index, memory, warm
 * fill, stats) share; the packing of a slot's matrices into the CPU
 * kernels' layout (xstore-pack.c); the read queue's depth from the device
 * (xstore-dev.c).
 *
 *   if (xs_pack_wanted(type, rows, cols))      // at init, per (layer, which)
 *       xs_pack_inplace(mat, type, rows, cols, row_bytes, scratch);   // after its read
 *
 * Threading: the forward thread, except what the struct's comments say
 * (the prefetch queue under pf_mu, the atomic counters). */
#ifndef STRATA_XSTORE_IMPL_H
#define STRATA_XSTORE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "engine/experts/xstore.h"
#include "engine/quant/quant.h"

struct xs_io;
struct xs_req;

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
    bool prefetched; /* filled by a prefetch and not needed since (xstore.c "prefetch") */
    bool reading;    /* its reads are queued or in flight: never taken, never emptied */
    bool ahead;      /* those reads are a prefetch's (a failure then fails no step) */
    bool wanted;     /* a need waits for those reads (s->want): settled by it, not by reap */
    uint8_t nreq;    /* its reads: s->sreq[slot * 3 ..][0, nreq) */
    int32_t infl;    /* its place in s->infl while reading */
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
    struct xs_req *sreq; /* (n_slots * 3): each slot's reads */
    int32_t *infl;       /* (n_slots) the slots reading */
    int n_infl;
    int32_t *want; /* (n_expert) slots the current need waits for (experts_need_wait) */
    int n_want;
    int pf_reading, pf_cap; /* slots being read ahead; at most pf_cap (more: dropped) */
    /* prefetch: (layer, expert) pairs queued by experts_prefetch from any
     * thread (pf_mu, taken with trylock there: a busy queue drops), read by
     * the forward thread at its next need, wait or get */
    pthread_mutex_t pf_mu;
    bool pf_mu_ok;
    int32_t *pf_q, *pf_take; /* (n_expert, 2) each */
    int32_t *pf_ids;         /* (n_expert) the slots one drain fills */
    int pf_n;
    _Atomic int pf_any;       /* pf_n > 0, read without the lock */
    uint8_t *pred;            /* (n_layer, n_expert) under pf_mu: each layer's latest prediction */
    uint8_t *pred_on;         /* (n_layer) under pf_mu: a prediction not yet compared with a need */
    _Atomic uintptr_t fwd_id; /* the forward thread (pthread_self at the last need) */
    /* counters, read by xstore_stats from any thread */
    _Atomic uint64_t *layer_hits, *layer_misses; /* (n_layer) */
    _Atomic uint64_t overflow, evictions, read_errors, bytes_read, reads, batches, lat_sum;
    _Atomic uint64_t lat[XSTORE_LAT_BUCKETS];
    _Atomic uint64_t prefetch_dropped;
    _Atomic uint64_t pf_issued, pf_useful, pf_wasted; /* experts read ahead; needed; not */
    _Atomic uint64_t pred_hit, pred_used, pred_n;     /* need ids predicted; need ids; predicted */
    _Atomic int slots_used;
    uint64_t warm_bytes;  /* written at init only */
    struct xs_numa *numa; /* per-node slot regions (xstore-numa.h); NULL: one */
    bool fixed;           /* io_uring reads into registered buffers (xstore_params.fixed) */
    char fixed_rule[112]; /* why on or off */
};

extern const struct experts_ops xstore_ops;
extern const char *const xs_which_name[EXPERTS_WHICH_COUNT]; /* "ffn_gate_exps", ... */

static inline uint64_t ld(_Atomic uint64_t *a) {
    return atomic_load_explicit(a, memory_order_relaxed);
}
static inline void add(_Atomic uint64_t *a, uint64_t v) {
    atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

/* xstore.c */
/* Makes (layer, ids) resident (xstore.c "load"); late: see experts_need_start. */
int xs_load(struct xstore *s, int layer, const int32_t *ids, int n, uint64_t step, uint8_t *late,
            struct strata_error *err);
/* Ends holds of step (every layer but keep_layer; -1: all). */
void xs_unpin(struct xstore *s, uint64_t step, int keep_layer);
void xs_free(void *ctx); /* ops.free */

/* Whether the active ISA has packed kernels for this type and shape
 * (kernels_pack_wanted): the store then packs it on fill. */
bool xs_pack_wanted(enum quant_type type, int64_t rows, int64_t cols);
/* The scratch xs_pack_inplace needs for rows of row_bytes. */
size_t xs_pack_scratch_bytes(size_t row_bytes);
/* The matrix at data (rows x row_bytes, GGUF rows) rewritten in the packed
 * layout in place. 0, or -1 for a type or shape without that layout. */
int xs_pack_inplace(void *data, enum quant_type type, int64_t rows, int64_t cols, size_t row_bytes,
                    void *scratch);

/* The io_uring depth for reads of fd (xstore-dev.c has the rule); rule gets
 * what it came from ("device 254:0 nr_requests 256, rotational"). */
int xs_dev_queue_depth(int fd, char *rule, size_t rule_n);

#endif
