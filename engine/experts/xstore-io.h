/* engine/experts/xstore-io.h: the expert store's reads (private to
 * engine/experts): a batch of reads into caller buffers, run with io_uring
 * (one submission per batch, at most queue_depth in flight) or a pread
 * thread pool (the forward thread takes part), chosen at init.
 *
 *   struct xs_io *io = xs_io_init(fd, XSTORE_IO_AUTO, 64, 4, sys, &err);
 *   struct xs_req r[3] = {{buf, off, len, need}, ...};
 *   xs_io_run(io, r, 3);     // every r[i].res: bytes read (>= need) or -errno
 *   xs_io_free(io);
 *
 * A short read (EOF inside the widened range, a signal) is completed by
 * synchronous preads of the rest up to `need`; res is then what was read.
 * Latency: r[i].lat_us, from the batch's submission to the read's completion.
 *
 * Threading: one batch at a time (the forward thread); the pool's
 * threads exist from init to free.
 */
#ifndef STRATA_XSTORE_IO_H
#define STRATA_XSTORE_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/experts/xstore.h"

struct xs_req {
    void *buf;     /* aligned to XSTORE_ALIGN for O_DIRECT */
    uint64_t off;  /* file offset (aligned for O_DIRECT) */
    uint32_t len;  /* bytes asked (aligned for O_DIRECT) */
    uint32_t need; /* bytes that must arrive (the matrix's end in the widened range) */
    int64_t res;   /* out: bytes read, or -errno */
    uint32_t lat_us;
};

struct xs_io;

/* NULL with err when mode XSTORE_IO_URING is refused or no memory/thread. */
struct xs_io *xs_io_init(int fd, enum xstore_io mode, int queue_depth, int n_threads,
                         const struct xstore_sysops *sys,
                         struct strata_error *err); /* owned: xs_io_free() */
void xs_io_run(struct xs_io *io, struct xs_req *r, int n);
/* The same in two halves: submit returns once the reads are in flight (the
 * first qd with io_uring; the pool's workers take them, the caller does
 * not); wait returns when every r[i].res is set. r must stay valid until
 * then. A submit with a batch pending waits for it first; free waits too. */
void xs_io_submit(struct xs_io *io, struct xs_req *r, int n);
void xs_io_wait(struct xs_io *io);
bool xs_io_pending(const struct xs_io *io);
const char *xs_io_name(const struct xs_io *io); /* "io_uring" or "pread" */
void xs_io_free(struct xs_io *io);              /* NULL is a no-op */

/* One read through sys (NULL: pread(2)), retried on EINTR: bytes or -errno. */
int64_t xs_pread(const struct xstore_sysops *sys, int fd, void *buf, size_t n, uint64_t off);

#endif
