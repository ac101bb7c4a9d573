/* server/notify.c: sd_notify datagrams and the watchdog thread (see notify.h). */
#include "server/notify.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct notify {
    int fd;                  /* AF_UNIX datagram socket; -1 when disabled */
    struct sockaddr_un addr; /* destination */
    socklen_t addr_len;      /* offsetof(sun_path) + name (+ NUL for paths) */
    long long watchdog_usec; /* > 0: ping interval applies to us */
    pthread_t thread;        /* watchdog pinger */
    bool thread_started;
    bool stop; /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
};

struct notify *notify_init(const char *socket_name, long long watchdog_usec, int watchdog_pid,
                           struct strata_error *err) {
    struct notify *n = calloc(1, sizeof(*n));
    if (!n) {
        strata_error_set(err, STRATA_E_NOMEM, "notify: out of memory");
        return NULL;
    }
    n->fd = -1;
    pthread_mutex_init(&n->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (!socket_name || !*socket_name)
        return n; /* disabled: not started by systemd (or by a notify-aware runner) */

    size_t len = strlen(socket_name);
    n->addr.sun_family = AF_UNIX;
    if (socket_name[0] == '@') {
        /* abstract namespace: leading NUL, no terminator counted */
        if (len < 2 || len > sizeof(n->addr.sun_path)) {
            strata_error_set(err, STRATA_E_CONFIG, "notify: bad abstract socket name '%s'",
                             socket_name);
            goto fail;
        }
        n->addr.sun_path[0] = '\0';
        memcpy(n->addr.sun_path + 1, socket_name + 1, len - 1);
        n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    } else if (socket_name[0] == '/') {
        if (len >= sizeof(n->addr.sun_path)) {
            strata_error_set(err, STRATA_E_CONFIG, "notify: socket path longer than %zu bytes",
                             sizeof(n->addr.sun_path) - 1);
            goto fail;
        }
        memcpy(n->addr.sun_path, socket_name, len + 1);
        n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
    } else {
        strata_error_set(err, STRATA_E_CONFIG,
                         "notify: NOTIFY_SOCKET '%s' is neither an absolute path nor @abstract",
                         socket_name);
        goto fail;
    }
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (n->fd < 0) {
        strata_error_set(err, STRATA_E_IO, "notify: socket: %s", strerror(errno));
        goto fail;
    }
    if (watchdog_usec > 0 && (watchdog_pid == 0 || watchdog_pid == (int)getpid()))
        n->watchdog_usec = watchdog_usec;
    return n;
fail:
    notify_free(n);
    return NULL;
}

bool notify_enabled(const struct notify *n) {
    return n && n->fd >= 0;
}

long long notify_watchdog_usec(const struct notify *n) {
    return notify_enabled(n) ? n->watchdog_usec : 0;
}

int notify_send(struct notify *n, const char *state, struct strata_error *err) {
    if (!notify_enabled(n) || !state)
        return 0;
    ssize_t r;
    do
        r = sendto(n->fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&n->addr,
                   n->addr_len);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return strata_error_set(err, STRATA_E_IO, "notify: sendto: %s", strerror(errno));
    return 0;
}

int notify_sendf(struct notify *n, struct strata_error *err, const char *fmt, ...) {
    if (!notify_enabled(n))
        return 0;
    char buf[1024]; /* status lines are short; longer ones are cut, never refused */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return notify_send(n, buf, err);
}

static void *watchdog_main(void *arg) {
    struct notify *n = arg;
    long long half = n->watchdog_usec / 2 > 0 ? n->watchdog_usec / 2 : 1;
    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        pthread_mutex_unlock(&n->mu);
        notify_send(n, "WATCHDOG=1", NULL);
        pthread_mutex_lock(&n->mu);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long ns = (long long)ts.tv_nsec + (half % 1000000) * 1000;
        ts.tv_sec += (time_t)(half / 1000000 + ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        while (!n->stop && pthread_cond_timedwait(&n->cond, &n->mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

int notify_watchdog_start(struct notify *n, struct strata_error *err) {
    if (!notify_watchdog_usec(n) || n->thread_started)
        return 0;
    if (pthread_create(&n->thread, NULL, watchdog_main, n))
        return strata_error_set(err, STRATA_E_INTERNAL, "notify: cannot start watchdog thread");
    n->thread_started = true;
    return 0;
}

void notify_free(struct notify *n) {
    if (!n)
        return;
    if (n->thread_started) {
        pthread_mutex_lock(&n->mu);
        n->stop = true;
        pthread_cond_signal(&n->cond);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
    }
    if (n->fd >= 0)
        close(n->fd);
    pthread_cond_destroy(&n->cond);
    pthread_mutex_destroy(&n->mu);
    free(n);
}
