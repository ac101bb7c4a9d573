/* engine/experts/xstore-io.c: the store's batches of reads (xstore-io.h):
 * io_uring, or a pread pool where the kernel or a seccomp filter refuses
 * io_uring_setup (Docker's default profile does since 2023). */
#include "engine/experts/xstore-io.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct xs_io {
    int fd;
    const struct xstore_sysops *sys;
    bool uring;
    struct io_uring ring;
    unsigned qd;
    /* the pread pool: a batch is published under mu; workers and the caller
     * take reads by the atomic index, the last one done signals done_cv */
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    struct xs_req *_Atomic job;
    _Atomic int job_n;
    uint64_t job_gen; /* under mu: bumps once per batch */
    bool stop;
    int busy; /* under mu: workers inside pool_take; a batch ends when it is 0 */
    _Atomic int next, left;
    struct timespec t0;
    /* the batch xs_io_submit started, finished by xs_io_wait */
    struct xs_req *pend;
    int pend_n;
    int pend_sub; /* io_uring: reads of the first round submitted (the round has pend_m) */
    int pend_m;
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

/* The result through sys->result, then a short read completed up to need. */
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
    r->lat_us = us_since(&io->t0);
}

static void pool_take(struct xs_io *io) {
    for (;;) {
        const int i = atomic_fetch_add(&io->next, 1);
        if (i >= atomic_load(&io->job_n))
            return;
        struct xs_req *r = &atomic_load(&io->job)[i];
        finish(io, r, xs_pread(io->sys, io->fd, r->buf, r->len, r->off));
        if (atomic_fetch_sub(&io->left, 1) == 1) {
            pthread_mutex_lock(&io->mu);
            pthread_cond_broadcast(&io->done_cv);
            pthread_mutex_unlock(&io->mu);
        }
    }
}

static void *pool_main(void *arg) {
    struct xs_io *io = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->stop && io->job_gen == seen)
            pthread_cond_wait(&io->cv, &io->mu);
        if (io->stop)
            break;
        seen = io->job_gen;
        io->busy++;
        pthread_mutex_unlock(&io->mu);
        pool_take(io);
        pthread_mutex_lock(&io->mu);
        if (--io->busy == 0)
            pthread_cond_broadcast(&io->done_cv);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

static void pool_publish(struct xs_io *io, struct xs_req *r, int n) {
    pthread_mutex_lock(&io->mu);
    while (io->busy > 0) /* a worker woken late for the last batch, about to find it empty */
        pthread_cond_wait(&io->done_cv, &io->mu);
    /* no worker is inside pool_take between batches (run_pool waits for
     * busy 0), so none can take an index of this batch by the last's count */
    atomic_store(&io->job, r);
    atomic_store(&io->job_n, n);
    atomic_store(&io->left, n);
    atomic_store(&io->next, 0);
    io->job_gen++;
    pthread_cond_broadcast(&io->cv);
    pthread_mutex_unlock(&io->mu);
}

static void pool_finish(struct xs_io *io) {
    pool_take(io); /* the caller reads too (all of it without workers) */
    pthread_mutex_lock(&io->mu);
    while (atomic_load(&io->left) > 0 || io->busy > 0)
        pthread_cond_wait(&io->done_cv, &io->mu);
    pthread_mutex_unlock(&io->mu);
}

/* Reads [done, done + m) of r queued and submitted: how many the ring took. */
static int uring_submit(struct xs_io *io, struct xs_req *r, int done, int m) {
    int queued = 0;
    for (int i = 0; i < m; i++)
        r[done + i].res = INT64_MIN; /* no result yet */
    for (int i = 0; i < m; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        if (!sqe)
            break;
        struct xs_req *q = &r[done + i];
        io_uring_prep_read(sqe, io->fd, q->buf, q->len, q->off);
        io_uring_sqe_set_data64(sqe, (uint64_t)(done + i));
        queued++;
    }
    const int sub = queued ? io_uring_submit(&io->ring) : 0;
    return sub < 0 ? 0 : sub;
}

/* The completions of a round of m reads from done, sub of them submitted;
 * the rest (not submitted, or not completed when the ring broke) through
 * pread: a read still without a result has res INT64_MIN (uring_submit). */
static void uring_complete(struct xs_io *io, struct xs_req *r, int n, int done, int m, int sub) {
    for (int got = 0; got < sub; got++) {
        struct io_uring_cqe *cqe;
        int rc;
        do
            rc = io_uring_wait_cqe(&io->ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) /* the ring is broken: what is left goes through pread */
            break;
        const uint64_t i = io_uring_cqe_get_data64(cqe);
        const int64_t res = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
        if (i < (uint64_t)n)
            finish(io, &r[i], res);
    }
    for (int i = 0; i < m; i++) {
        struct xs_req *q = &r[done + i];
        if (q->res == INT64_MIN)
            finish(io, q, xs_pread(io->sys, io->fd, q->buf, q->len, q->off));
    }
}

/* In rounds of at most qd reads: each round one io_uring_submit, then its
 * completions. A ring that fails mid-batch finishes the rest with pread.
 * The first round is submitted by xs_io_submit, the rest run here. */
static void uring_finish(struct xs_io *io, struct xs_req *r, int n, int m0, int sub0) {
    uring_complete(io, r, n, 0, m0, sub0);
    for (int done = m0; done < n;) {
        const int m = n - done < (int)io->qd ? n - done : (int)io->qd;
        uring_complete(io, r, n, done, m, uring_submit(io, r, done, m));
        done += m;
    }
}

void xs_io_submit(struct xs_io *io, struct xs_req *r, int n) {
    xs_io_wait(io); /* one batch at a time */
    if (n <= 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &io->t0);
    io->pend = r;
    io->pend_n = n;
    if (io->uring) {
        io->pend_m = n < (int)io->qd ? n : (int)io->qd;
        io->pend_sub = uring_submit(io, r, 0, io->pend_m);
    } else {
        pool_publish(io, r, n);
    }
}

void xs_io_wait(struct xs_io *io) {
    if (!io->pend)
        return;
    struct xs_req *r = io->pend;
    const int n = io->pend_n;
    io->pend = NULL;
    io->pend_n = 0;
    if (io->uring)
        uring_finish(io, r, n, io->pend_m, io->pend_sub);
    else
        pool_finish(io);
}

bool xs_io_pending(const struct xs_io *io) {
    return io->pend != NULL;
}

void xs_io_run(struct xs_io *io, struct xs_req *r, int n) {
    xs_io_submit(io, r, n);
    xs_io_wait(io);
}

const char *xs_io_name(const struct xs_io *io) {
    return io->uring ? "io_uring" : "pread";
}

void xs_io_free(struct xs_io *io) {
    if (!io)
        return;
    xs_io_wait(io); /* the kernel or the workers write into buffers the caller frees next */
    if (io->threads) {
        pthread_mutex_lock(&io->mu);
        io->stop = true;
        pthread_cond_broadcast(&io->cv);
        pthread_mutex_unlock(&io->mu);
        for (int i = 0; i < io->n_threads; i++)
            pthread_join(io->threads[i], NULL);
        free(io->threads);
    }
    if (io->uring)
        io_uring_queue_exit(&io->ring);
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
