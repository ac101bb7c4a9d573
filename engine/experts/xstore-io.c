/* engine/experts/xstore-io.c: the store's reads (xstore-io.h): io_uring,
 * or a pread pool where the kernel or a seccomp filter refuses
 * io_uring_setup (Docker's default profile does since 2023). */
#include "engine/experts/xstore-io.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define FIXED_MAX_PIECE ((uint64_t)1 << 30) /* the kernel's limit on one registered buffer */

struct xs_io {
    int fd;
    const struct xstore_sysops *sys;
    bool uring;
    bool broken; /* io_uring failed under us: the caller's preads from then on */
    struct io_uring ring;
    unsigned qd;
    struct xs_req **ring_req;       /* (qd): the reads in the ring by their user_data; NULL free */
    int *ring_free;                 /* (qd) free indices of ring_req */
    struct io_uring_sqe **kick_sqe; /* (qd) uring_kick's entries of one submission */
    struct xs_req **kick_req;       /* (qd) their reads */
    uint8_t *ring_ahead;            /* (qd) the read in ring_req[i] is a read ahead */
    int n_ring_ahead, ring_ahead_max; /* reads ahead in the ring; at most qd / 2 */
    int n_ring_free;
    /* registered buffers: piece i is [fixed_base + i * fixed_piece, + fixed_piece) */
    uint8_t *fixed_base;
    uint64_t fixed_piece, fixed_bytes;
    int n_fixed;
    /* queued, not yet in the ring (io_uring) or taken by a reader (pool):
     * [0] needs, [1] reads ahead; the pool's under mu */
    struct xs_req *q_head[2], *q_tail[2];
    /* the pread pool */
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    bool stop;
    int outstanding; /* under mu (pool): queued or being read */
};

static uint32_t us_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    const int64_t us = (t.tv_sec - t0->tv_sec) * 1000000 + (t.tv_nsec - t0->tv_nsec) / 1000;
    return us < 0 ? 0 : us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

int64_t xs_pread(const struct xstore_sysops *sys, int fd, void *buf, size_t n, uint64_t off) {
    for (;;) {
        const ssize_t r = sys && sys->pread ? sys->pread(sys->arg, fd, buf, n, (off_t)off)
                                            : pread(fd, buf, n, (off_t)off);
        if (r >= 0)
            return r;
        if (errno != EINTR)
            return -(int64_t)(errno ? errno : EIO);
    }
}

/* The result through sys->result, then a short read completed up to need;
 * r is done after it. */
static void finish(struct xs_io *io, struct xs_req *r, int64_t res) {
    if (io->sys && io->sys->result)
        res = io->sys->result(io->sys->arg, r->off, r->len, res);
    while (res >= 0 && (uint64_t)res < r->need) {
        const int64_t more =
            xs_pread(io->sys, io->fd, (uint8_t *)r->buf + res, r->len - (size_t)res, r->off + res);
        if (more < 0) {
            res = more;
            break;
        }
        if (more == 0) { /* EOF before the matrix's end: the file is shorter than at load */
            res = -ENODATA;
            break;
        }
        res += more;
    }
    r->res = res;
    r->lat_us = us_since(&r->t0);
    atomic_store_explicit(&r->done, 1, memory_order_release);
}

static void run_pread(struct xs_io *io, struct xs_req *r) {
    finish(io, r, xs_pread(io->sys, io->fd, r->buf, r->len, r->off));
}

/* ---- the queues (the pool's under mu) ---------------------------------------------- */

static void push(struct xs_io *io, struct xs_req *r, int k) {
    r->q_next = NULL;
    if (io->q_tail[k])
        io->q_tail[k]->q_next = r;
    else
        io->q_head[k] = r;
    io->q_tail[k] = r;
}

static void push_front(struct xs_io *io, struct xs_req *r, int k) {
    r->q_next = io->q_head[k];
    io->q_head[k] = r;
    if (!io->q_tail[k])
        io->q_tail[k] = r;
}

/* The next read: a need's first; reads ahead only up to k_max. NULL: none
 * queued. */
static struct xs_req *pop_upto(struct xs_io *io, int *kind, int k_max) {
    for (int k = 0; k <= k_max; k++) {
        struct xs_req *r = io->q_head[k];
        if (r) {
            io->q_head[k] = r->q_next;
            if (!io->q_head[k])
                io->q_tail[k] = NULL;
            r->q_next = NULL;
            if (kind)
                *kind = k;
            return r;
        }
    }
    return NULL;
}

static struct xs_req *pop(struct xs_io *io, int *kind) {
    return pop_upto(io, kind, 1);
}

static bool queued(const struct xs_io *io) {
    return io->q_head[0] || io->q_head[1];
}

/* ---- the pool ------------------------------------------------------------------------ */

static void *pool_main(void *arg) {
    struct xs_io *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->stop && !queued(io))
            pthread_cond_wait(&io->cv, &io->mu);
        if (io->stop)
            break;
        struct xs_req *r = pop(io, NULL);
        pthread_mutex_unlock(&io->mu);
        run_pread(io, r);
        pthread_mutex_lock(&io->mu);
        io->outstanding--;
        pthread_cond_broadcast(&io->done_cv);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

/* Until done(r) (r NULL: until nothing is outstanding), running queued
 * reads on this thread while there are any. */
static void pool_wait(struct xs_io *io, struct xs_req *r) {
    pthread_mutex_lock(&io->mu);
    while (r ? !xs_req_done(r) : io->outstanding > 0) {
        struct xs_req *q = pop(io, NULL);
        if (!q) {
            pthread_cond_wait(&io->done_cv, &io->mu);
            continue;
        }
        pthread_mutex_unlock(&io->mu);
        run_pread(io, q);
        pthread_mutex_lock(&io->mu);
        io->outstanding--;
        pthread_cond_broadcast(&io->done_cv);
    }
    pthread_mutex_unlock(&io->mu);
}

/* ---- io_uring ------------------------------------------------------------------------- */

/* The registered piece r's buffer lies in, or -1. */
static int fixed_index(const struct xs_io *io, const struct xs_req *r) {
    if (!io->n_fixed)
        return -1;
    const uint8_t *b = r->buf;
    if (b < io->fixed_base || b + r->len > io->fixed_base + io->fixed_bytes)
        return -1;
    const uint64_t i = (uint64_t)(b - io->fixed_base) / io->fixed_piece;
    if ((uint64_t)(b + r->len - io->fixed_base) > (i + 1) * io->fixed_piece)
        return -1; /* across two pieces (never with whole-slot pieces) */
    return (int)i;
}

/* Moves queued reads into the ring (a need's first) while it has room,
 * reads ahead into at most half of it (a need's reads never wait for a
 * ring full of them); one submission. A ring that refuses turns the store
 * to preads. */
static void uring_kick(struct xs_io *io) {
    struct io_uring_sqe **sqes = io->kick_sqe;
    struct xs_req **reqs = io->kick_req;
    int m = 0;
    while (!io->broken && io->n_ring_free > 0) {
        int kind;
        struct xs_req *r = pop_upto(io, &kind, io->n_ring_ahead < io->ring_ahead_max ? 1 : 0);
        if (!r)
            break;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        if (!sqe) {
            push_front(io, r, kind);
            break;
        }
        const int slot = io->ring_free[--io->n_ring_free];
        io->ring_req[slot] = r;
        io->ring_ahead[slot] = (uint8_t)kind;
        io->n_ring_ahead += kind;
        const int fi = fixed_index(io, r);
        if (fi >= 0)
            io_uring_prep_read_fixed(sqe, io->fd, r->buf, r->len, r->off, fi);
        else
            io_uring_prep_read(sqe, io->fd, r->buf, r->len, r->off);
        io_uring_sqe_set_data64(sqe, (uint64_t)slot + 1);
        sqes[m] = sqe;
        reqs[m++] = r;
    }
    if (!m)
        goto broken_rest;
    int sub, tries = 0;
    do
        sub = io_uring_submit(&io->ring);
    while ((sub == -EINTR || sub == -EAGAIN) && ++tries < 1000);
    if (sub >= 0)
        return;
    /* the entries stay in the submission ring: make them no-ops whose
     * completions name nothing, and read these ourselves */
    io->broken = true;
    for (int i = 0; i < m; i++) {
        io_uring_prep_nop(sqes[i]);
        io_uring_sqe_set_data64(sqes[i], 0);
        for (unsigned s = 0; s < io->qd; s++)
            if (io->ring_req[s] == reqs[i]) {
                io->ring_req[s] = NULL;
                io->n_ring_ahead -= io->ring_ahead[s];
                io->ring_free[io->n_ring_free++] = (int)s;
            }
        run_pread(io, reqs[i]);
    }
broken_rest:
    if (io->broken) {
        struct xs_req *r;
        while ((r = pop(io, NULL)))
            run_pread(io, r);
    }
}

static void uring_complete(struct xs_io *io, struct io_uring_cqe *cqe) {
    const uint64_t d = io_uring_cqe_get_data64(cqe);
    const int64_t res = cqe->res;
    io_uring_cqe_seen(&io->ring, cqe);
    if (d == 0 || d > io->qd || !io->ring_req[d - 1])
        return;
    struct xs_req *r = io->ring_req[d - 1];
    io->ring_req[d - 1] = NULL;
    io->n_ring_ahead -= io->ring_ahead[d - 1];
    io->ring_free[io->n_ring_free++] = (int)(d - 1);
    finish(io, r, res);
}

static void uring_reap(struct xs_io *io) {
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&io->ring, &cqe) == 0)
        uring_complete(io, cqe);
}

/* One completion, waiting for it; false when the ring is broken (the
 * reads it holds are then read by pread: their buffers are ours again only
 * if the kernel is done with them, which a failed wait cannot promise, so
 * this is the last resort the old code also took). */
static bool uring_wait_one(struct xs_io *io) {
    struct io_uring_cqe *cqe;
    int rc;
    do
        rc = io_uring_wait_cqe(&io->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) {
        io->broken = true;
        for (unsigned s = 0; s < io->qd; s++)
            if (io->ring_req[s]) {
                struct xs_req *r = io->ring_req[s];
                io->ring_req[s] = NULL;
                io->n_ring_ahead -= io->ring_ahead[s];
                io->ring_free[io->n_ring_free++] = (int)s;
                run_pread(io, r);
            }
        uring_kick(io);
        return false;
    }
    uring_complete(io, cqe);
    return true;
}

static bool ring_busy(const struct xs_io *io) {
    return io->n_ring_free < (int)io->qd;
}

/* ---- the interface ------------------------------------------------------------------- */

void xs_io_queue(struct xs_io *io, struct xs_req *r, int n, bool ahead) {
    if (n <= 0)
        return;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!io->uring)
        pthread_mutex_lock(&io->mu);
    for (int i = 0; i < n; i++) {
        r[i].res = INT64_MIN;
        r[i].lat_us = 0;
        r[i].t0 = t0;
        atomic_store_explicit(&r[i].done, 0, memory_order_relaxed);
        push(io, &r[i], ahead ? 1 : 0);
    }
    if (io->uring) {
        uring_kick(io);
        return;
    }
    io->outstanding += n;
    if (io->n_threads > 0)
        pthread_cond_broadcast(&io->cv);
    pthread_mutex_unlock(&io->mu);
}

void xs_io_wait_req(struct xs_io *io, struct xs_req *r) {
    if (!io->uring) {
        pool_wait(io, r);
        return;
    }
    while (!xs_req_done(r)) {
        uring_kick(io); /* r may be queued behind the ring's room */
        if (xs_req_done(r))
            break;
        if (!ring_busy(io)) { /* queued with an empty ring: the ring refuses, read it all */
            io->broken = true;
            uring_kick(io);
            continue;
        }
        if (uring_wait_one(io))
            uring_kick(io);
    }
}

void xs_io_poll(struct xs_io *io) {
    if (!io->uring || io->broken)
        return;
    uring_reap(io);
    uring_kick(io);
}

void xs_io_wait_all(struct xs_io *io) {
    if (!io->uring) {
        pool_wait(io, NULL);
        return;
    }
    for (;;) {
        uring_kick(io);
        if (!ring_busy(io) && !queued(io))
            return;
        if (ring_busy(io))
            (void)uring_wait_one(io);
    }
}

void xs_io_run(struct xs_io *io, struct xs_req *r, int n) {
    xs_io_queue(io, r, n, false);
    for (int i = 0; i < n; i++)
        xs_io_wait_req(io, &r[i]);
}

const char *xs_io_name(const struct xs_io *io) {
    return io->uring ? "io_uring" : "pread";
}

bool xs_io_fixed(const struct xs_io *io) {
    return io && io->n_fixed > 0;
}

int xs_io_register(struct xs_io *io, void *base, uint64_t bytes, uint64_t unit,
                   struct strata_error *err) {
    if (!io->uring || io->broken)
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "registered buffers need io_uring");
    if (!unit || unit > FIXED_MAX_PIECE || !bytes)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "registered buffers: a slot of %llu bytes is over 1 GiB",
                                (unsigned long long)unit);
    const uint64_t piece = FIXED_MAX_PIECE / unit * unit;
    const uint64_t n = (bytes + piece - 1) / piece;
    if (n > 16384)
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "registered buffers: %llu pieces",
                                (unsigned long long)n);
    struct iovec *iov = calloc((size_t)n, sizeof *iov);
    if (!iov)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        iov[i].iov_base = (uint8_t *)base + i * piece;
        iov[i].iov_len = (size_t)(i + 1 < n ? piece : bytes - i * piece);
    }
    const int rc = io_uring_register_buffers(&io->ring, iov, (unsigned)n);
    free(iov);
    if (rc < 0)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "io_uring_register_buffers of %llu bytes: %s",
                                (unsigned long long)bytes, strerror(-rc));
    io->fixed_base = base;
    io->fixed_piece = piece;
    io->fixed_bytes = bytes;
    io->n_fixed = (int)n;
    return 0;
}

void xs_io_free(struct xs_io *io) {
    if (!io)
        return;
    xs_io_wait_all(io); /* the kernel or the workers write into buffers the caller frees next */
    if (io->threads) {
        pthread_mutex_lock(&io->mu);
        io->stop = true;
        pthread_cond_broadcast(&io->cv);
        pthread_mutex_unlock(&io->mu);
        for (int i = 0; i < io->n_threads; i++)
            pthread_join(io->threads[i], NULL);
        free(io->threads);
    }
    if (io->uring) {
        if (io->n_fixed)
            (void)io_uring_unregister_buffers(&io->ring);
        io_uring_queue_exit(&io->ring);
    }
    free(io->ring_req);
    free(io->ring_free);
    free(io->kick_sqe);
    free(io->kick_req);
    free(io->ring_ahead);
    pthread_cond_destroy(&io->cv);
    pthread_cond_destroy(&io->done_cv);
    pthread_mutex_destroy(&io->mu);
    free(io);
}

struct xs_io *xs_io_init(int fd, enum xstore_io mode, int queue_depth, int n_threads,
                         const struct xstore_sysops *sys, struct strata_error *err) {
    struct xs_io *io = calloc(1, sizeof *io);
    if (!io) {
        strata_error_set(err, STRATA_E_NOMEM, "xstore: out of memory");
        return NULL;
    }
    io->fd = fd;
    io->sys = sys;
    io->qd = queue_depth > 0 && queue_depth <= 4096 ? (unsigned)queue_depth : 64;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->cv, NULL);
    pthread_cond_init(&io->done_cv, NULL);
    if (mode != XSTORE_IO_PREAD) {
        io->ring_req = calloc(io->qd, sizeof *io->ring_req);
        io->ring_free = calloc(io->qd, sizeof *io->ring_free);
        io->kick_sqe = calloc(io->qd, sizeof *io->kick_sqe);
        io->kick_req = calloc(io->qd, sizeof *io->kick_req);
        io->ring_ahead = calloc(io->qd, 1);
        io->ring_ahead_max = io->qd / 2 > 1 ? (int)io->qd / 2 : 1;
        if (!io->ring_req || !io->ring_free || !io->kick_sqe || !io->kick_req || !io->ring_ahead) {
            xs_io_free(io);
            strata_error_set(err, STRATA_E_NOMEM, "xstore: out of memory");
            return NULL;
        }
        for (unsigned i = 0; i < io->qd; i++)
            io->ring_free[io->n_ring_free++] = (int)(io->qd - 1 - i);
        const int rc = io_uring_queue_init(io->qd, &io->ring, 0);
        if (rc == 0) {
            io->uring = true;
            return io;
        }
        if (mode == XSTORE_IO_URING) {
            xs_io_free(io);
            strata_error_set(err, STRATA_E_UNSUPPORTED,
                             "xstore: io_uring refused (io_uring_queue_init: %s)", strerror(-rc));
            return NULL;
        }
    }
    /* the pool: n_threads - 1 workers, the caller is the last reader */
    io->n_threads = n_threads > 1 && n_threads <= 64 ? n_threads - 1 : (n_threads == 1 ? 0 : 3);
    if (io->n_threads > 0 && !(io->threads = calloc((size_t)io->n_threads, sizeof *io->threads))) {
        io->n_threads = 0;
        xs_io_free(io);
        strata_error_set(err, STRATA_E_NOMEM, "xstore: out of memory");
        return NULL;
    }
    for (int i = 0; i < io->n_threads; i++)
        if (pthread_create(&io->threads[i], NULL, pool_main, io) != 0) {
            io->n_threads = i;
            xs_io_free(io);
            strata_error_set(err, STRATA_E_NOMEM, "xstore: cannot start the read threads");
            return NULL;
        }
    return io;
}
