/* engine/experts/xstore-io.h: the expert store's reads (private to
 * engine/experts): reads into caller buffers, queued and completed one by
 * one, run with io_uring (at most queue_depth in the ring, one submission
 * for what a call queues) or a pread thread pool, chosen at init. Reads of
 * a need go before reads ahead (a prefetch's): each kind is a FIFO, the
 * need's taken first, so a layer's own reads never queue behind the
 * lookahead's.
 *
 *   struct xs_io *io = xs_io_init(fd, XSTORE_IO_AUTO, 64, 4, sys, &err);
 *   xs_io_register(io, slots, bytes, slot_bytes, &err);  // optional: READ_FIXED
 *   struct xs_req r[3] = {{buf, off, len, need}, ...};
 *   xs_io_queue(io, r, 3, false);   // in flight now
 *   xs_io_wait_req(io, &r[1]);      // r[1].res: bytes read (>= need) or -errno
 *   xs_io_wait_all(io);
 *   xs_io_free(io);
 *
 * A short read (EOF inside the widened range, a signal) is completed by
 * synchronous preads of the rest up to `need`; res is then what was read.
 * Latency: r[i].lat_us, from the read's queueing to its completion.
 *
 * Registered buffers (xs_io_register, io_uring only): the slot memory is
 * registered in pieces of whole slots (at most 1 GiB each: the kernel's
 * limit), and a read whose buffer lies in it goes as IORING_OP_READ_FIXED,
 * which skips pinning the pages on every read. It pins (faults in) the
 * whole region at once. Figures: xstore.h "Registered buffers".
 *
 * Threading: queue / wait / poll / free on one thread (the forward
 * thread); xs_req_done from the same. The pool's threads exist from init
 * to free and complete reads while the caller does something else; a
 * caller waiting on a read runs queued reads itself.
 */
#ifndef STRATA_XSTORE_IO_H
#define STRATA_XSTORE_IO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "engine/experts/xstore.h"

struct xs_req {
    void *buf;     /* aligned to XSTORE_ALIGN for O_DIRECT */
    uint64_t off;  /* file offset (aligned for O_DIRECT) */
    uint32_t len;  /* bytes asked (aligned for O_DIRECT) */
    uint32_t need; /* bytes that must arrive (the matrix's end in the widened range) */
    int64_t res;   /* out: bytes read, or -errno; valid once xs_req_done */
    uint32_t lat_us;
    /* private to xstore-io.c */
    struct xs_req *q_next;
    struct timespec t0;
    _Atomic int done;
};

struct xs_io;

/* NULL with err when mode XSTORE_IO_URING is refused or no memory/thread. */
struct xs_io *xs_io_init(int fd, enum xstore_io mode, int queue_depth, int n_threads,
                         const struct xstore_sysops *sys,
                         struct strata_error *err); /* owned: xs_io_free() */
/* Registers [base, base + bytes) (whole units of `unit` bytes, each read's
 * buffer inside one unit) for READ_FIXED. 0, or STRATA_E_UNSUPPORTED with
 * err (pread mode, the kernel refused: RLIMIT_MEMLOCK, no memory); reads
 * then go as plain ones. */
int xs_io_register(struct xs_io *io, void *base, uint64_t bytes, uint64_t unit,
                   struct strata_error *err);
bool xs_io_fixed(const struct xs_io *io); /* registered buffers in use */
/* Starts n reads (r must stay valid until each is done); ahead: a
 * prefetch's, taken after every queued need's. */
void xs_io_queue(struct xs_io *io, struct xs_req *r, int n, bool ahead);
static inline bool xs_req_done(const struct xs_req *r) {
    return atomic_load_explicit(&r->done, memory_order_acquire) != 0;
}
/* Returns once r is done (completing others meanwhile). */
void xs_io_wait_req(struct xs_io *io, struct xs_req *r);
/* Completes what has arrived (io_uring: reaps the ring), without waiting. */
void xs_io_poll(struct xs_io *io);
void xs_io_wait_all(struct xs_io *io); /* every read queued so far */
/* Queue n and wait for them all. */
void xs_io_run(struct xs_io *io, struct xs_req *r, int n);
const char *xs_io_name(const struct xs_io *io); /* "io_uring" or "pread" */
void xs_io_free(struct xs_io *io);              /* waits for every read; NULL is a no-op */

/* One read through sys (NULL: pread(2)), retried on EINTR: bytes or -errno. */
int64_t xs_pread(const struct xstore_sysops *sys, int fd, void *buf, size_t n, uint64_t off);

#endif
