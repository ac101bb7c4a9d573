/* server/front.c: the listening socket and the accept policy in front of
 * libmicrohttpd (see "front" in server-impl.h).
 *
 * Why not MHD's own listener: MHD 0.9.75's --timeout is per read, so a
 * client trickling its headers a byte at a time held a connection forever
 * (40 s seen at --timeout 5), and at --max-connections MHD stops accepting,
 * so 270 such clients made /health time out for everyone. Its listener also
 * set SO_REUSEPORT, which let a second daemon bind the same port and take
 * half of the requests. And a malformed Content-Length is answered by MHD
 * itself with its status line and headers written twice.
 *
 * So the front owns the socket (SO_REUSEADDR only: a busy port fails the
 * start), accepts on its own thread and holds each new connection until
 * its request headers are in the socket buffer (read with MSG_PEEK, so MHD
 * later reads every byte itself):
 * - headers complete within --timeout s of the accept: the framing headers
 *   are checked (framing_*) and the connection is handed to MHD
 *   (MHD_add_connection), or answered 400 here and closed;
 * - not complete in time: closed (a slowloris never reaches MHD);
 * - more than FRONT_PEEK_MAX bytes without an end: handed over, MHD answers
 *   431 as before.
 * Connections MHD holds between two requests (keep-alive) get the same
 * deadline from the end of their last request: past it the front shuts the
 * socket down and MHD closes it.
 *
 * Accept policy: at most --max-connections are open (waiting, idle or
 * busy). When a new one would go over, the connection that has waited
 * longest for its next request headers (waiting in the front, or idle in
 * MHD) is dropped to make room; a connection with a request in flight is
 * never dropped. When every connection is busy the newcomer gets 503.
 *
 * Threading: one persistent front thread accepts, peeks, answers and
 * sweeps. MHD's thread reports through front_on_connection, front_conn_busy
 * and front_conn_idle. mu guards the connection list; it is a leaf lock
 * (nothing else is locked while it is held). A socket MHD owns is touched
 * (shutdown) only under mu while its record is listed: MHD removes the
 * record in its CLOSED notification, which it sends before closing the
 * socket, so the descriptor cannot have been reused.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/errors.h"
#include "server/server-impl.h"

/* MHD's default connection memory is 32 KiB: a header block larger than
 * this does not fit it either, and MHD answers 431 (tests/peers/http-real.py
 * sends 100 KB of headers). */
#define FRONT_PEEK_MAX 32768
/* A connection answered here is drained (not reset) for up to 2 s or 1 MiB,
 * so the client reads the answer instead of ECONNRESET. */
#define FRONT_LINGER_S 2.0
#define FRONT_LINGER_BYTES (1u << 20)
#define FRONT_TICK_MS 100
/* Accepts per wake-up before the sweep runs again. */
#define FRONT_ACCEPT_BURST 64

enum conn_state {
    CONN_PENDING, /* the front holds it until its request headers are in */
    CONN_HANDED,  /* given to MHD; its STARTED notification not seen yet */
    CONN_IDLE,    /* MHD holds it between two requests */
    CONN_BUSY,    /* MHD reads, runs or answers a request on it */
    CONN_EVICTED, /* MHD holds it; the front shut it down, MHD closes it */
    CONN_LINGER,  /* answered by the front; drained before close */
    CONN_DEAD,    /* closed by the front; freed after the current epoll batch */
};

struct front_conn {
    int fd;
    enum conn_state state;
    double t_wait;  /* monotonic s: since when it waits for request headers */
    double t_close; /* CONN_LINGER: close at this time at the latest */
    size_t n_drained;
    struct sockaddr_storage addr; /* the peer (IPv4 or IPv6) */
    socklen_t addr_len;
    struct front_conn *prev, *next;
};

struct front {
    struct server *srv; /* borrowed */
    int listen_fd, epoll_fd, wake_fd;
    int port;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    bool accept_paused; /* out of descriptors: accepting resumes at the next tick */
    int max_live;       /* --max-connections */
    double timeout_s;   /* --timeout: request headers must arrive within it */

    pthread_mutex_t mu;        /* guards the fields below */
    struct front_conn *conns;  /* every connection of any state */
    struct front_conn *grave;  /* CONN_DEAD, linked through next: events of the
                                  current epoll batch may still point at them */
    int n_live;                /* PENDING + HANDED + IDLE + BUSY */
    int n_linger;              /* LINGER */
    uint64_t n_evicted;        /* dropped to make room for a new connection */
    uint64_t n_header_timeout; /* request headers not in within --timeout */

    char peek[FRONT_PEEK_MAX]; /* front thread only */
};

static bool is_live(enum conn_state st) {
    return st == CONN_PENDING || st == CONN_HANDED || st == CONN_IDLE || st == CONN_BUSY;
}

/* ---- framing headers --------------------------------------------------------- */

static bool ieq(const char *a, size_t n, const char *b) {
    return strlen(b) == n && strncasecmp(a, b, n) == 0;
}

void framing_add(struct framing *fr, const char *name, size_t name_len, const char *value,
                 size_t value_len) {
    /* "Content-Length : 5": a proxy may read it as the length, MHD as another
     * header (RFC 9112 5.1: reject) */
    if (name_len && (name[name_len - 1] == ' ' || name[name_len - 1] == '\t'))
        fr->name_ws = true;
    while (value_len && (*value == ' ' || *value == '\t'))
        value++, value_len--;
    while (value_len && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
        value_len--;
    if (ieq(name, name_len, "content-length")) {
        /* 1*DIGIT, as RFC 9112 6.3 asks; "-1", "1e3", "5, 5" and overflow are invalid */
        uint64_t v = 0;
        bool ok = value_len > 0;
        for (size_t i = 0; ok && i < value_len; i++) {
            unsigned d = (unsigned char)value[i] - '0';
            if (d > 9 || v > (UINT64_MAX - d) / 10)
                ok = false;
            else
                v = v * 10 + d;
        }
        if (!ok)
            fr->cl_bad = true;
        else if (fr->n_cl > 0 && v != fr->cl)
            fr->cl_conflict = true;
        fr->cl = v;
        fr->n_cl++;
    } else if (ieq(name, name_len, "transfer-encoding")) {
        fr->n_te++;
        fr->te_chunked = ieq(value, value_len, "chunked");
    }
}

const char *framing_error(const struct framing *fr) {
    /* Each of these lets a proxy and this server disagree on where the body
     * ends (request smuggling), so none is guessed at: RFC 9112 6.1, 6.3. */
    if (fr->n_te > 1)
        return "more than one Transfer-Encoding header";
    if (fr->n_te && fr->n_cl)
        return "Transfer-Encoding together with Content-Length";
    if (fr->n_te && !fr->te_chunked)
        return "Transfer-Encoding other than chunked is not supported";
    if (fr->cl_bad)
        return "Content-Length is not a decimal number of bytes";
    if (fr->cl_conflict)
        return "conflicting Content-Length headers";
    if (fr->name_ws)
        return "whitespace between a header name and its colon";
    return NULL;
}

enum peek_result { PEEK_MORE, PEEK_COMPLETE, PEEK_INVALID, PEEK_FULL };

/* Looks at the first request's header block in buf[0, n): complete (then
 * its framing headers are checked), still arriving, or too long. */
static enum peek_result headers_check(const char *buf, size_t n, const char **why) {
    struct framing fr = {0};
    bool request_line = false;
    size_t p = 0;
    for (;;) {
        const char *nl = memchr(buf + p, '\n', n - p);
        if (!nl)
            return n >= FRONT_PEEK_MAX ? PEEK_FULL : PEEK_MORE;
        size_t end = (size_t)(nl - buf), len = end - p;
        if (len && buf[p + len - 1] == '\r')
            len--;
        const char *line = buf + p;
        p = end + 1;
        if (len == 0) {
            if (!request_line)
                continue; /* empty lines before the request line are allowed */
            *why = framing_error(&fr);
            return *why ? PEEK_INVALID : PEEK_COMPLETE;
        }
        if (!request_line) {
            request_line = true; /* MHD parses it */
            continue;
        }
        if (line[0] == ' ' || line[0] == '\t') {
            *why = "obsolete line folding in the request headers";
            return PEEK_INVALID;
        }
        const char *colon = memchr(line, ':', len);
        if (!colon)
            continue; /* MHD answers a line without a colon with 400 */
        size_t name_len = (size_t)(colon - line);
        framing_add(&fr, line, name_len, colon + 1, len - name_len - 1);
    }
}

/* ---- connections ------------------------------------------------------------- */

/* mu held */
static void conn_unlink(struct front *f, struct front_conn *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (is_live(c->state))
        f->n_live--;
    else if (c->state == CONN_LINGER)
        f->n_linger--;
}

/* A connection the front holds (PENDING or LINGER): closed now, freed after
 * the epoll batch (free_grave). mu held. */
static void conn_close(struct front *f, struct front_conn *c) {
    epoll_ctl(f->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conn_unlink(f, c);
    c->state = CONN_DEAD;
    c->prev = NULL;
    c->next = f->grave;
    f->grave = c;
}

static void free_grave(struct front *f) {
    while (f->grave) {
        struct front_conn *c = f->grave;
        f->grave = c->next;
        free(c);
    }
}

/* Answers a connection the front holds with an OpenAI error body and
 * `Connection: close`, then drains it (CONN_LINGER). mu held. */
static void conn_answer(struct front *f, struct front_conn *c, int code, const char *oa_code,
                        const char *msg) {
    int status = http_error_status(code);
    char *body = http_error_json_as(code, oa_code, msg, NULL);
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s\r\n",
                     status, status == 400 ? "Bad Request" : "Service Unavailable",
                     body ? strlen(body) : 0, status == 503 ? "Retry-After: 1\r\n" : "");
    /* a few hundred bytes into an empty socket buffer: one send is enough,
     * and a client that does not read loses its answer, not our time */
    if (n > 0 && send(c->fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n && body)
        (void)!send(c->fd, body, strlen(body), MSG_NOSIGNAL | MSG_DONTWAIT);
    free(body);
    metrics_count_request(f->srv->metrics, METRICS_ROUTE_OTHER, status);
    shutdown(c->fd, SHUT_WR);
    if (f->n_linger >= f->max_live) { /* never hold more than a pool's worth */
        conn_close(f, c);
        return;
    }
    if (is_live(c->state))
        f->n_live--;
    c->state = CONN_LINGER;
    f->n_linger++;
    c->t_close = strata_now() + FRONT_LINGER_S;
}

/* Makes room for `keep`: drops the connection that has waited longest for
 * its request headers (held here, or idle in MHD). False when every other
 * connection has a request in flight. mu held; front thread. */
static bool evict_one(struct front *f, const struct front_conn *keep) {
    struct front_conn *victim = NULL;
    for (struct front_conn *c = f->conns; c; c = c->next)
        if (c != keep && (c->state == CONN_PENDING || c->state == CONN_IDLE) &&
            (!victim || c->t_wait < victim->t_wait))
            victim = c;
    if (!victim)
        return false;
    f->n_evicted++;
    if (victim->state == CONN_PENDING) {
        conn_close(f, victim);
    } else {
        /* MHD's: it sees EOF and closes it (listed, so the fd is still its) */
        shutdown(victim->fd, SHUT_RDWR);
        victim->state = CONN_EVICTED;
        f->n_live--;
    }
    return true;
}

/* Gives a connection whose headers are in to MHD. mu held on entry and exit. */
static void conn_hand_over(struct front *f, struct front_conn *c) {
    epoll_ctl(f->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    c->state = CONN_HANDED;
    c->t_wait = strata_now();
    int fd = c->fd;
    struct sockaddr_storage addr = c->addr;
    const socklen_t alen = c->addr_len;
    pthread_mutex_unlock(&f->mu);
    /* MHD_add_connection only queues it for MHD's thread (which may run the
     * STARTED notification before this returns); on failure MHD closed fd */
    enum MHD_Result ok = MHD_add_connection(f->srv->mhd, fd, (const struct sockaddr *)&addr, alen);
    pthread_mutex_lock(&f->mu);
    if (ok != MHD_YES) {
        for (struct front_conn *x = f->conns; x; x = x->next)
            if (x == c && c->state == CONN_HANDED) {
                conn_unlink(f, c);
                free(c);
                break;
            }
    }
}

/* events: the epoll flags (EPOLLRDHUP: the client sends nothing more). */
static void on_readable(struct front *f, struct front_conn *c, uint32_t events) {
    if (c->state == CONN_DEAD)
        return; /* closed earlier in this batch */
    if (c->state == CONN_LINGER) {
        for (;;) {
            ssize_t r = recv(c->fd, f->peek, sizeof(f->peek), MSG_DONTWAIT);
            if (r > 0 && (c->n_drained += (size_t)r) < FRONT_LINGER_BYTES)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            conn_close(f, c); /* EOF, error or drained enough */
            return;
        }
    }
    if (c->state != CONN_PENDING)
        return;
    ssize_t r = recv(c->fd, f->peek, sizeof(f->peek), MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (r <= 0) {
        conn_close(f, c); /* the client left before sending a request */
        return;
    }
    const char *why = NULL;
    switch (headers_check(f->peek, (size_t)r, &why)) {
    case PEEK_MORE:
        if (events & EPOLLRDHUP) /* half a request and then EOF: it will never be whole */
            conn_close(f, c);
        return;
    case PEEK_INVALID:
        conn_answer(f, c, STRATA_E_INVALID, "invalid_header", why);
        return;
    case PEEK_COMPLETE:
    case PEEK_FULL:
        conn_hand_over(f, c);
        return;
    }
}

/* Drops stale connections: headers not in within --timeout (held here or
 * idle in MHD), answered ones done lingering. mu held. */
static void sweep(struct front *f, double now) {
    for (struct front_conn *c = f->conns, *next; c; c = next) {
        next = c->next;
        bool late = now - c->t_wait > f->timeout_s;
        if (c->state == CONN_PENDING && late) {
            f->n_header_timeout++;
            conn_close(f, c);
        } else if (c->state == CONN_IDLE && late) {
            f->n_header_timeout++;
            shutdown(c->fd, SHUT_RDWR); /* MHD's: see evict_one */
            c->state = CONN_EVICTED;
            f->n_live--;
        } else if (c->state == CONN_LINGER && now >= c->t_close) {
            conn_close(f, c);
        }
    }
}

static void accept_some(struct front *f) {
    for (int i = 0; i < FRONT_ACCEPT_BURST; i++) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof(addr);
        int fd =
            accept4(f->listen_fd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: the listen socket stays readable, so stop
                 * polling it until the next tick instead of spinning */
                struct epoll_event ev = {.events = 0, .data.ptr = &f->listen_fd};
                epoll_ctl(f->epoll_fd, EPOLL_CTL_MOD, f->listen_fd, &ev);
                f->accept_paused = true;
            }
            return;
        }
        struct front_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        *c = (struct front_conn){.fd = fd, .state = CONN_PENDING, .t_wait = strata_now()};
        if (alen <= sizeof(addr)) {
            c->addr = addr;
            c->addr_len = alen;
        }
        pthread_mutex_lock(&f->mu);
        /* a HANDED record with this descriptor is stale: MHD closed it
         * without a notification (its own failure to set the connection up) */
        for (struct front_conn *x = f->conns; x; x = x->next)
            if (x->fd == fd && x->state == CONN_HANDED) {
                conn_unlink(f, x);
                free(x);
                break;
            }
        c->next = f->conns;
        if (f->conns)
            f->conns->prev = c;
        f->conns = c;
        f->n_live++;
        /* edge-triggered: each new segment wakes us once, the peeked bytes stay */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
        if (epoll_ctl(f->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
            conn_close(f, c);
        else if (f->n_live > f->max_live && !evict_one(f, c))
            conn_answer(f, c, STRATA_E_UNAVAILABLE, "too_many_connections",
                        "every connection has a request in flight (max-connections); retry");
        pthread_mutex_unlock(&f->mu);
    }
}

static void *front_main(void *arg) {
    struct front *f = arg;
    struct epoll_event evs[64];
    double next_sweep = strata_now();
    while (!atomic_load(&f->stop)) {
        int n = epoll_wait(f->epoll_fd, evs, 64, FRONT_TICK_MS);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &f->wake_fd)
                continue;
            if (p == &f->listen_fd) {
                accept_some(f);
                continue;
            }
            pthread_mutex_lock(&f->mu);
            on_readable(f, p, evs[i].events);
            pthread_mutex_unlock(&f->mu);
        }
        pthread_mutex_lock(&f->mu);
        free_grave(f);
        pthread_mutex_unlock(&f->mu);
        double now = strata_now();
        if (now >= next_sweep) {
            next_sweep = now + FRONT_TICK_MS / 1000.0;
            pthread_mutex_lock(&f->mu);
            sweep(f, now);
            free_grave(f);
            pthread_mutex_unlock(&f->mu);
            if (f->accept_paused) {
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &f->listen_fd};
                epoll_ctl(f->epoll_fd, EPOLL_CTL_MOD, f->listen_fd, &ev);
                f->accept_paused = false;
            }
        }
    }
    return NULL;
}

/* ---- life cycle --------------------------------------------------------------- */

struct front *front_init(struct server *s, struct strata_error *err) {
    struct front *f = calloc(1, sizeof(*f));
    if (!f) {
        strata_error_set(err, STRATA_E_NOMEM, "server: out of memory");
        return NULL;
    }
    f->srv = s;
    f->listen_fd = f->epoll_fd = f->wake_fd = -1;
    f->max_live = s->p.max_connections > 0 ? s->p.max_connections : 1;
    f->timeout_s = s->p.timeout_s > 0 ? s->p.timeout_s : 30;
    atomic_init(&f->stop, false);
    if (pthread_mutex_init(&f->mu, NULL)) {
        free(f);
        strata_error_set(err, STRATA_E_INTERNAL, "server: mutex init failed");
        return NULL;
    }
    /* --host: an IPv4 or IPv6 literal ("::1", "[::1]") or a name the
     * resolver knows ("localhost"); the first address that binds is used */
    char host[256];
    size_t hl = strlen(s->host);
    if (hl >= 2 && s->host[0] == '[' && s->host[hl - 1] == ']')
        snprintf(host, sizeof host, "%.*s", (int)(hl - 2), s->host + 1);
    else
        snprintf(host, sizeof host, "%s", s->host);
    char port[16];
    snprintf(port, sizeof port, "%d", s->p.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0 || !res) {
        strata_error_set(err, STRATA_E_CONFIG, "host '%s': %s", s->host,
                         gai ? gai_strerror(gai) : "no address");
        goto fail;
    }
    /* IPv4 first: "localhost" resolves to ::1 and 127.0.0.1, and clients
     * (curl, the SDKs) try 127.0.0.1 */
    struct addrinfo *ai = res;
    for (struct addrinfo *x = res; x; x = x->ai_next)
        if (x->ai_family == AF_INET) {
            ai = x;
            break;
        }
    struct sockaddr_storage addr;
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    socklen_t addr_len = ai->ai_addrlen;
    f->listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    freeaddrinfo(res);
    int one = 1;
    /* SO_REUSEADDR (restart over TIME_WAIT) but never SO_REUSEPORT: with it a
     * second daemon bound the same port and the kernel split the requests
     * between the two, so clients got answers from different models */
    if (f->listen_fd < 0 ||
        setsockopt(f->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        strata_error_set(err, STRATA_E_IO, "cannot create the listening socket: %s",
                         strerror(errno));
        goto fail;
    }
    if (bind(f->listen_fd, (struct sockaddr *)&addr, addr_len) != 0) {
        int e = errno;
        strata_error_set(err, STRATA_E_IO, "cannot listen on %s:%d: %s%s", s->host, s->p.port,
                         strerror(e),
                         e == EADDRINUSE ? " (another process, maybe another strata serve, "
                                           "serves this port)"
                                         : "");
        goto fail;
    }
    if (listen(f->listen_fd, SOMAXCONN) != 0) {
        strata_error_set(err, STRATA_E_IO, "cannot listen on %s:%d: %s", s->host, s->p.port,
                         strerror(errno));
        goto fail;
    }
    socklen_t alen = sizeof(addr);
    getsockname(f->listen_fd, (struct sockaddr *)&addr, &alen);
    f->port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                               : ((struct sockaddr_in *)&addr)->sin_port);
    f->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    f->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &f->listen_fd};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &f->wake_fd};
    if (f->epoll_fd < 0 || f->wake_fd < 0 ||
        epoll_ctl(f->epoll_fd, EPOLL_CTL_ADD, f->listen_fd, &lev) != 0 ||
        epoll_ctl(f->epoll_fd, EPOLL_CTL_ADD, f->wake_fd, &wev) != 0) {
        strata_error_set(err, STRATA_E_IO, "server: epoll: %s", strerror(errno));
        goto fail;
    }
    return f;
fail:
    front_free(f);
    return NULL;
}

int front_start(struct front *f, struct strata_error *err) {
    if (pthread_create(&f->thread, NULL, front_main, f))
        return strata_error_set(err, STRATA_E_INTERNAL, "server: cannot start the accept thread");
    f->started = true;
    return 0;
}

int front_port(const struct front *f) {
    return f->port;
}

void front_stop(struct front *f) {
    if (!f)
        return;
    if (f->started) {
        atomic_store(&f->stop, true);
        uint64_t one = 1;
        (void)!write(f->wake_fd, &one, sizeof(one));
        pthread_join(f->thread, NULL);
        f->started = false;
    }
    if (f->listen_fd >= 0) /* from here on new clients are refused at once */
        close(f->listen_fd);
    f->listen_fd = -1;
    pthread_mutex_lock(&f->mu);
    for (struct front_conn *c = f->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_PENDING || c->state == CONN_LINGER)
            conn_close(f, c);
    }
    free_grave(f);
    pthread_mutex_unlock(&f->mu);
}

void front_free(struct front *f) {
    if (!f)
        return;
    front_stop(f);
    /* after MHD_stop_daemon: records MHD never reported closed are only freed */
    for (struct front_conn *c = f->conns, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    if (f->epoll_fd >= 0)
        close(f->epoll_fd);
    if (f->wake_fd >= 0)
        close(f->wake_fd);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

int front_n_connections(struct front *f) {
    pthread_mutex_lock(&f->mu);
    int n = f->n_live;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void front_counters(struct front *f, uint64_t *n_evicted, uint64_t *n_header_timeout) {
    pthread_mutex_lock(&f->mu);
    *n_evicted = f->n_evicted;
    *n_header_timeout = f->n_header_timeout;
    pthread_mutex_unlock(&f->mu);
}

/* ---- MHD's side (its thread) ----------------------------------------------------- */

void front_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                         enum MHD_ConnectionNotificationCode code) {
    struct front *f = cls;
    pthread_mutex_lock(&f->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct front_conn *c = NULL;
        for (struct front_conn *x = f->conns; ci && x; x = x->next)
            if (x->fd == ci->connect_fd && x->state == CONN_HANDED) {
                c = x;
                break;
            }
        if (c)
            c->state = CONN_IDLE;
        *socket_context = c;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        struct front_conn *c = *socket_context;
        conn_unlink(f, c);
        free(c);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&f->mu);
}

static struct front_conn *conn_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void front_conn_busy(struct front *f, struct MHD_Connection *conn) {
    struct front_conn *c = conn_of(conn);
    if (!c)
        return;
    pthread_mutex_lock(&f->mu);
    if (c->state == CONN_IDLE)
        c->state = CONN_BUSY;
    pthread_mutex_unlock(&f->mu);
}

void front_conn_idle(struct front *f, struct MHD_Connection *conn) {
    struct front_conn *c = conn_of(conn);
    if (!c)
        return;
    pthread_mutex_lock(&f->mu);
    if (c->state == CONN_BUSY) {
        c->state = CONN_IDLE;
        c->t_wait = strata_now(); /* the next request's headers are due within --timeout */
    }
    pthread_mutex_unlock(&f->mu);
}
