/* server/server.h: the HTTP daemon's lifecycle (libmicrohttpd, one internal
 * epoll thread; see gen.h for the seam to the generation layer).
 *
 *   struct auth_keys *keys = auth_keys_init(api_key, api_key_file, &err);
 *   struct server_params p = server_params_default();
 *   p.port = 8080; p.auth = keys; p.gen = (struct gen_backend){&ops, sched};
 *   struct server *s = server_init(&p, &err);   // listening; /health says 503
 *   server_set_ready(s, true);                  // weights loaded: /health 200
 *   ... wait for SIGTERM ...
 *   server_shutdown(s, 10000);   // stop accepting, drain, cancel the rest
 *   server_free(s); auth_keys_free(keys);
 *
 * Threading: server_init/shutdown/free from one controlling thread;
 * server_set_ready and server_port from any thread. Accepting (and holding
 * connections until their request headers are in) runs on the front's
 * persistent thread (front.c), request handling on MHD's internal thread
 * (never blocks: generating requests are suspended), gen events on the
 * scheduler thread, SSE keep-alives on one persistent ticker thread owned
 * by the server.
 */
#ifndef STRATA_SERVER_H
#define STRATA_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/core/error.h"
#include "server/auth.h"
#include "server/gen.h"

struct server;

struct server_params {
    const char *host;             /* borrowed; IPv4/IPv6 literal or host name, "127.0.0.1" */
    int port;                     /* 0 = any free port (see server_port) */
    size_t max_body;              /* bytes; larger bodies get 413 */
    int timeout_s;                /* idle seconds, and seconds to send request headers */
    int max_connections;          /* simultaneous connections (the longest-idle makes room) */
    int keepalive_ms;             /* SSE ": keep-alive" interval while waiting for tokens */
    bool always_usage;            /* passed to every submit */
    const struct auth_keys *auth; /* borrowed; NULL = no auth */
    const char *cors_origins;     /* borrowed; "*", "a,b" or ""/NULL = no CORS headers */
    bool web_ui;                  /* GET / serves the embedded page (server/web.h) */
    /* One line a request on stderr at the end of each (server/http.c
     * log_request) when >= 2 (info); 0 error .. 3 debug, --log-level. */
    int log_level;
    struct gen_backend gen; /* ops NULL: completions answer 503 */
};

struct server_params server_params_default(void);

/* Binds and starts serving. owned: free with server_free() */
struct server *server_init(const struct server_params *params, struct strata_error *err);
int server_port(const struct server *s); /* the bound port */
/* Installs the generation layer (once, before server_set_ready(s, true);
 * until then completions answer 503 and stats are empty). */
void server_set_gen(struct server *s, struct gen_backend gen);
void server_set_ready(struct server *s, bool ready);
/* Stops accepting, lets in-flight work finish for up to deadline_ms, then
 * cancels what is left and closes every connection. Returns the number of
 * requests that had to be cancelled. Idempotent. */
int server_shutdown(struct server *s, int deadline_ms);
/* Shuts down first if needed. The generation layer must have delivered
 * GEN_EV_DONE for every job before this (stop it between server_shutdown
 * and server_free): a late event would reach freed memory. */
void server_free(struct server *s);

#endif
