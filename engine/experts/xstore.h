/* engine/experts/xstore.h: the expert store: routed experts of a model larger
 * than RAM served from a RAM tier of fixed budget, filled by reads of the
 * model file (io_uring, or a pread thread pool where io_uring is refused),
 * O_DIRECT where the filesystem takes it so the page cache never holds a
 * second copy (else buffered reads dropped from the page cache after each
 * copy: POSIX_FADV_DONTNEED). The skeleton (every other weight) stays in the
 * backend's weight arena; only the routed experts come through here.
 *
 *   struct xstore_params xp = xstore_params_default();
 *   xp.ram_bytes = 512 << 20;                       // --expert-ram
 *   struct experts_source *src = xstore_init(gguf, n_layer, file_tier, &xp, &err);
 *   // the forward pass, per MoE layer of a step:
 *   experts_need(src, layer, picked_ids, n, step, &err);   // one batch of reads
 *   experts_get(src, layer, e, EXPERTS_GATE, step, &ref, &err);
 *   experts_release(src, step);
 *   struct xstore_stats st; xstore_stats(xstore_of(src), &st);
 *
 * Index: expert e of (layer, which) is rows [e * n_rows, (e + 1) * n_rows)
 * of the merged blk.<l>.ffn_{gate,up,down}_exps tensor, so its bytes are one
 * range of the file: offset data_offset + t->offset + e * n_rows * row_bytes.
 * A read covers that range widened to XSTORE_ALIGN on both ends (O_DIRECT
 * needs offset, length and buffer aligned to the logical block; 4096 covers
 * every block size in use), and the matrix starts at the range's offset into
 * the widened buffer: the unaligned edges cost at most 2 x 4 KiB a matrix.
 *
 * Slots: one slot holds an expert's three matrices (fixed size: the largest
 * expert of any layer, each matrix's widened range rounded to 4 KiB), so
 * n_slots = ram_bytes / slot_bytes, allocated once at init.
 *
 * Replacement: a victim is never a slot held by a step not released (nor one
 * the current layer's batch holds: experts_need pins them first). Among the
 * rest, a slot of a layer that holds more than `floor` slots goes first, the
 * least recently used of those; only when every layer is at its floor does
 * plain LRU pick. A global LRU alone collapses under the layer sweep: with
 * the budget below one sweep's working set, layer l's slots are always the
 * oldest when layer l comes round again, so every pick misses; the floor
 * keeps each layer its last `floor` experts (default n_expert_used), which
 * are the likeliest picks of the next token.
 *
 * When a layer's batch needs more slots than are free to take (a prefill
 * picking most experts of a layer with a budget below n_expert slots), the
 * rest are served by the next tier (the file's mapped pages), counted as
 * overflow: slower, never wrong.
 *
 * Errors: a failed or short read, or the file found changed (size, inode or
 * mtime differ from the load's: truncated or rewritten in place), fails the
 * step with STRATA_E_IO and a message naming the layer, the expert and the
 * cause; the slots involved are emptied, the store keeps serving later
 * steps (which read again). A file replaced by rename is not an error: the
 * store reads the inode it opened, which is the one the skeleton came from.
 *
 * Packing (xstore_params.pack, xstore-pack.c): a slot's Q4_K / Q6_K / Q4_0
 * matrices are rewritten after their read in the CPU kernels' 16-row
 * layout, as the weight arena has them, and the slots lie on 2 MiB huge
 * pages as the arena does. Where the store lost 10% to the arena (1 GB
 * zipf qwen3moe, 16 layers x 64 experts top-8, this 2-vCPU AVX-512 Xeon,
 * `perf record -e cpu-clock` of `strata run ... -n 128 -t 2`, one run each):
 * the expert matmuls ran the GGUF-layout kernels (kx_matmul_q4_K / q6_K,
 * 2046 samples) instead of the packed ones; all matmuls took 2688 samples
 * against the arena's 2328 (+15%). Packed: 2401 against 2221 (+8%, of which
 * part is run-to-run spread). Decode CPU time a token, 1 thread (gen_cpu_ms
 * of `strata run -n 64 --temp 1 --seed 42 -t 1`, arena and store in turn, 3
 * rounds, 05:00 2026-12-02 with five other helpers building: wall figures
 * swung 2x): arena 25.14 / 24.40 / 25.85 ms, store holding every expert
 * 25.99 / 24.75 / 26.04 ms: 0.967x the arena's rate by medians (0.98x the
 * mean of the rounds' ratios), where it was 0.90x (wall, bench/offload,
 * last session). bench/README.md "expert store" has the rows.
 *
 * Overlap (experts_need_start / experts_need_wait, backend_moe.late): a
 * layer's cold experts are submitted, the backend computes the resident
 * ones while they are read, then waits and computes the rest (the forward
 * pass does this where the backend has BACKEND_CAP_MOE_LATE and no cold
 * backend splits the layer). Each expert's rows are computed alone and the
 * weighted sum keeps slot order, so the logits are the same bits.
 *
 * Reads in flight (xstore-io.h): every slot being filled is `reading`
 * until its reads complete, never taken nor emptied meanwhile. A need
 * queues its cold experts' reads and waits for those only, and for reads
 * ahead already in flight for experts it picks (no second read); reads
 * ahead (the router lookahead's) go after a need's in the queue and take
 * at most half of the io_uring ring, so a layer never waits for the
 * lookahead's reads of other layers.
 *
 * Registered buffers (xstore_params.fixed, --expert-fixed): with io_uring
 * and O_DIRECT the slots are registered with the ring at init
 * (io_uring_register_buffers, pieces of whole slots of at most 1 GiB) and
 * read with IORING_OP_READ_FIXED, which skips pinning each read's pages;
 * registering pins the whole tier at once. XSTORE_FIXED_DEFAULT says what
 * auto does, from the figure in bench/README.md "side-thread prefetch,
 * registered buffers".
 *
 * Threading: get / need / release / free on the forward thread (experts.h);
 * xstore_stats from any thread (counters are relaxed atomics, read without a
 * lock: a snapshot may mix counts from two moments). The pread pool's threads
 * and the io_uring ring are private to the store.
 */
#ifndef STRATA_XSTORE_H
#define STRATA_XSTORE_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/experts/experts.h"

struct profile;
struct pool;
struct host_numa_ops;

#define XSTORE_ALIGN 4096
#define XSTORE_PREFETCH_MAX 4 /* router lookahead depth at most */
/* xstore_params.fixed's auto: registered buffers on (1) or off (0), by
 * the figure: off. The 34 GB qwen3moe, 2-vCPU AMD EPYC (AVX-512), 256
 * tokens, prefetch 1, cache dropped, rounds interleaved (bench/README.md
 * "side-thread prefetch, registered buffers"): fixed 6.49 / 6.18 tok/s,
 * plain 7.58 / 7.72; mean read latency 12.3 / 9.5 ms against 12.6 / 10.9.
 * Registering also pins the whole tier at start-up. */
#define XSTORE_FIXED_DEFAULT 0
#define XSTORE_LAT_BUCKETS 16 /* read latency histogram: bucket i < 2^i * 16 us, last: more */

enum xstore_io {
    XSTORE_IO_AUTO = 0,  /* io_uring when io_uring_queue_init succeeds, else pread */
    XSTORE_IO_URING = 1, /* io_uring or fail the init */
    XSTORE_IO_PREAD = 2, /* the pread thread pool */
};

enum xstore_fixed {
    XSTORE_FIXED_AUTO = 0, /* XSTORE_FIXED_DEFAULT where io_uring + O_DIRECT, else off */
    XSTORE_FIXED_ON = 1,   /* registered buffers or fail the init */
    XSTORE_FIXED_OFF = 2,  /* plain reads */
};

enum xstore_direct {
    XSTORE_DIRECT_AUTO = 0, /* O_DIRECT when open and a first read take it, else buffered */
    XSTORE_DIRECT_ON = 1,   /* O_DIRECT or fail the init */
    XSTORE_DIRECT_OFF = 2,  /* buffered + POSIX_FADV_DONTNEED */
};

/* The system calls a read goes through, replaceable by tests (fault
 * injection). NULL members: the real call. Borrowed: static or outliving
 * the store. */
struct xstore_sysops {
    /* The pread pool's read (pread(2) semantics: bytes or -1 with errno). */
    ssize_t (*pread)(void *arg, int fd, void *buf, size_t n, off_t off);
    /* Every completed read, in both modes, passes its result here (bytes, or
     * -errno) and gets the one to use: a test turns reads into -EIO. */
    int64_t (*result)(void *arg, uint64_t off, size_t n, int64_t res);
    void *arg;
};

struct xstore_params {
    uint64_t ram_bytes; /* the slots' budget; must hold n_expert_used slots */
    enum xstore_io io;
    enum xstore_direct direct;
    enum xstore_fixed fixed; /* registered buffers (xstore.h "Registered buffers") */
    int floor;               /* per-layer working-set floor in slots; < 0: n_expert_used; 0: none;
                                at most n_slots / (MoE layers) */
    int queue_depth; /* io_uring entries (and the most reads in flight at once); 0 (default):
                        from the file's block device (xstore-dev.c: nr_requests, at most 256,
                        32 when rotational; 64 without a block device) */
    int n_threads;   /* pread pool threads: default 4 (reads in flight in pread mode) */
    const struct xstore_sysops *sys; /* NULL: the real calls */
    /* Fill the slots at init, evenly over the MoE layers (experts by id),
     * in one batch a layer: a tier that holds every expert then never
     * misses while serving; a smaller one starts with each layer's share
     * instead of empty. What this reads is xstore_stats.warm_bytes, not
     * bytes_read; hits and misses count from after it. Default false. */
    bool warm;
    /* Router lookahead (--expert-prefetch): at each MoE layer l the forward
     * pass posts layer l's input to a side thread (engine/model
     * model-predict.c), which applies the routers of layers l + 1 .. l +
     * prefetch to it and passes the picks to experts_prefetch; decode never
     * waits for it. 0 (xstore_params_default): off; at most
     * XSTORE_PREFETCH_MAX. run and serve default to --expert-prefetch 1
     * (config.h). Depths 0 / 1 / 2 on the 34 GB model on this 2-vCPU AMD
     * EPYC (256 tokens, 3 interleaved rounds, bench/README.md "side-thread
     * prefetch, registered buffers"): decode 8.81 / 9.79 / 11.41, 8.74 /
     * 9.91 / 9.28, 8.89 / 10.23 / 9.44 tok/s (inside the spread: decode
     * here is bound by compute, not by misses), hit rate 0.933 / 0.966 /
     * 0.983, store bytes 72 / 80 / 87 MiB a token, recall 0.92 / 0.94; on
     * the disk-bound Intel VM depth 1 paid 4.04 against 3.22 tok/s. Depth
     * 1: the hit rate without the waste of 2, and the gain where the disk
     * limits. */
    int prefetch;
    /* Rewrite each slot's Q4_K / Q6_K / Q4_0 matrices after their read in
     * the CPU kernels' 16-row packed layout where the active ISA has packed
     * kernels (kernels_pack_wanted at init), as the weight arena does: gets
     * then hand them out as BACKEND_LAYOUT_PACK16 (xstore-pack.c). For a
     * consumer of host matrices that is the CPU backend (run and serve:
     * xstore_plan sets it); default false (the file's rows, byte for byte). */
    bool pack;
    /* Borrowed during xstore_init; NULL = none: with warm, each layer's
     * share takes its most picked experts of this routing profile first
     * (a profile of another shape is ignored). */
    const struct profile *warm_profile;
    /* Borrowed during xstore_init; NULL = none: on a pool with two groups
     * (--numa split) the slots are laid out per node (xstore-numa.h). */
    struct pool *pool;
    const struct host_numa_ops *numa_ops; /* NULL: the real mbind (tests: EPERM) */
};
struct xstore_params xstore_params_default(void);

/* A store over the expert tensors of f (borrowed: must outlive the store;
 * opened again by its path for the reads), in front of next (stolen: the
 * overflow tier, normally experts_file_init's). NULL params: the defaults.
 * Returns NULL with err: no expert tensors, a budget below n_expert_used
 * slots (the message says the least), the file cannot be opened, a forced
 * mode refused (the message says which and why). */
struct experts_source *xstore_init(const struct gguf_file *f, int n_layer, int n_expert_used,
                                   struct experts_source *next, const struct xstore_params *params,
                                   struct strata_error *err); /* owned: experts_free() */

/* The store in a chain (its head or a tier behind it), or NULL. Borrowed. */
struct xstore *xstore_of(struct experts_source *chain);

struct xstore_stats {
    const char *io;     /* "io_uring" or "pread" (static) */
    const char *direct; /* "direct" or "buffered" (static) */
    int n_layer, n_slots, slots_used;
    uint64_t slot_bytes, capacity_bytes, used_bytes;
    uint64_t hits, misses, overflow, evictions, read_errors;
    uint64_t bytes_read, reads, batches;
    uint64_t warm_bytes;              /* read at init (xstore_params.warm) */
    uint64_t lat[XSTORE_LAT_BUCKETS]; /* reads by latency (XSTORE_LAT_BUCKETS) */
    uint64_t lat_sum_us;
    /* prefetch (experts_prefetch, xstore.c "prefetch"): experts read ahead,
     * needed before eviction, evicted or passed over unneeded; ids dropped
     * (queue full or busy, no slot to take) */
    uint64_t prefetch_issued, prefetch_useful, prefetch_wasted, prefetch_dropped;
    /* the predictions against the needs that followed: recall = pred_hit /
     * pred_used (needed ids that were predicted), precision = pred_hit /
     * pred_n (predicted ids that were needed) */
    uint64_t pred_hit, pred_used, pred_n;
    int queue_depth;        /* the reads' io_uring depth (pread: reads in flight at most) */
    const char *queue_rule; /* where it came from (owned by the store) */
    bool fixed;             /* reads into registered buffers (IORING_OP_READ_FIXED) */
    const char *fixed_rule; /* "on (default)", "off (buffered reads)", ... (owned by the store) */
    /* per layer (n_layer each), owned by the caller after xstore_stats: free() both; NULL when
     * out of memory */
    uint64_t *layer_hits, *layer_misses;
};
/* Fills *out; s NULL gives zeros (and no arrays). Any thread. */
void xstore_stats(const struct xstore *s, struct xstore_stats *out);
void xstore_stats_free(struct xstore_stats *st); /* frees the per-layer arrays */

/* "io_uring+direct", "pread+buffered", ...: the mode chosen at init (static). */
const char *xstore_mode(const struct xstore *s);

/* ---- the start-up decision (xstore-plan.c) ---------------------------------------- */

/* What `--expert-store`, `--expert-ram`, `--expert-io` and `--expert-direct`
 * ask, and what the model and the machine hold. */
struct xstore_plan_in {
    const char *mode;      /* "auto", "on", "off" */
    const char *io;        /* "auto", "io_uring", "pread" */
    const char *direct;    /* "auto", "on", "off" */
    const char *fixed;     /* --expert-fixed: "auto", "on", "off" (NULL: "auto") */
    int64_t ram;           /* --expert-ram bytes; 0 = what the budget leaves */
    int prefetch;          /* --expert-prefetch: router lookahead depth (xstore_params) */
    uint64_t model_bytes;  /* tensor bytes of the file */
    uint64_t expert_bytes; /* of those, the routed experts' (xstore_expert_bytes) */
    int64_t mem_budget;    /* bytes this process may use (sysinfo); <= 0 unknown */
    uint64_t kv_bytes;     /* the KV pool's */
};

struct xstore_plan {
    bool on;
    struct xstore_params params; /* when on */
    char rule[192];              /* why: "auto: 34.1 GB of weights + KV > 22.0 GB budget" */
};

/* Reads the strings (STRATA_E_INVALID naming the option for others) and
 * decides: off never; on always; auto when the weights, the KV pool and a
 * safety margin (1/16 of the budget, at least 256 MiB) exceed the memory
 * budget (never when the budget is unknown or the model has no experts).
 * ram 0: the budget less the skeleton, the KV pool and the margin (at
 * least 64 MiB; xstore_init then refuses it if one token does not fit);
 * no budget known: every expert. */
int xstore_plan(const struct xstore_plan_in *in, struct xstore_plan *out, struct strata_error *err);

/* Bytes of the routed experts' tensors (blk.*.ffn_*_exps.weight) of f. */
uint64_t xstore_expert_bytes(const struct gguf_file *f);

#endif
