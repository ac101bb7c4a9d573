/* server/daemon.c: process lifecycle of the daemon (see daemon.h). */
#include "server/daemon.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "server/auth.h"
#include "server/server.h"

static void usage(const char *prog, FILE *out) {
    fprintf(out,
            "usage: %s [MODEL.gguf] [options]\n\n"
            "Serves the model over an OpenAI-compatible HTTP API.\n"
            "Precedence: command line > environment > config file > default.\n\n"
            "  --help               this text\n"
            "  --print-config       print every effective value and its source, then exit\n",
            prog);
    config_print_help(out);
}

int daemon_main(int argc, char **argv, const struct daemon_hooks *hooks) {
    const char *prog = hooks && hooks->prog ? hooks->prog : "strata serve";
    bool print_config = false;
    /* Take out the two action flags; the rest is the option table's. */
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    if (!args)
        return 1;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
            usage(prog, stdout);
            free(args);
            return 0;
        }
        if (i > 0 && !strcmp(argv[i], "--print-config"))
            print_config = true;
        else
            args[n++] = argv[i];
    }
    struct strata_error err = {0};
    struct config *cfg = config_load(&(struct config_params){n, args, NULL}, &err);
    free(args);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        return 2;
    }
    if (print_config) {
        config_print(cfg, stdout);
        config_free(cfg);
        return 0;
    }

    int rc = 1;
    bool info = config_int(cfg, CONFIG_LOG_LEVEL) >= 2; /* error 0, warn 1, info 2, debug 3 */
    struct auth_keys *keys = NULL;
    struct server *srv = NULL;
    struct gen_backend be = {NULL, NULL};
    bool be_open = false;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPIPE); /* a vanished client must not kill the daemon */
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    keys =
        auth_keys_init(config_str(cfg, CONFIG_API_KEY), config_str(cfg, CONFIG_API_KEY_FILE), &err);
    if (!keys) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        rc = 2;
        goto out;
    }
    /* The HTTP server starts first so /health answers 503 while loading; its
     * generation backend is filled in below, before ready is set. */
    struct server_params p = server_params_default();
    p.host = config_str(cfg, CONFIG_HOST);
    p.port = (int)config_int(cfg, CONFIG_PORT);
    p.max_body = (size_t)config_int(cfg, CONFIG_MAX_BODY);
    p.timeout_s = (int)config_int(cfg, CONFIG_TIMEOUT);
    p.max_connections = (int)config_int(cfg, CONFIG_MAX_CONNECTIONS);
    p.keepalive_ms = (int)config_int(cfg, CONFIG_KEEPALIVE_MS);
    p.always_usage = config_bool(cfg, CONFIG_ALWAYS_USAGE);
    p.auth = keys;
    srv = server_init(&p, &err);
    if (!srv) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        goto out;
    }
    if (info)
        fprintf(stderr, "%s: listening on http://%s:%d%s\n", prog, p.host, server_port(srv),
                auth_keys_enabled(keys) ? " (API key required)" : "");
    fflush(stderr);
    if (hooks && hooks->open) {
        if (hooks->open(cfg, &be, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.message);
            rc = err.code == STRATA_E_CONFIG ? 2 : 1;
            goto out;
        }
        be_open = true;
        server_set_gen(srv, be);
    }
    server_set_ready(srv, true);

    int sig = 0;
    sigset_t wait_set;
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGTERM);
    sigaddset(&wait_set, SIGINT);
    while (sigwait(&wait_set, &sig) != 0)
        ;
    if (info)
        fprintf(stderr, "%s: signal %d: draining (up to %llds)\n", prog, sig,
                config_int(cfg, CONFIG_SHUTDOWN_TIMEOUT));
    int n_cancelled = server_shutdown(srv, (int)config_int(cfg, CONFIG_SHUTDOWN_TIMEOUT) * 1000);
    if (info)
        fprintf(stderr, "%s: stopped (%d request(s) cancelled)\n", prog, n_cancelled);
    rc = 0;
out:
    server_shutdown(srv, 0); /* no-op after a drain; needed on the error paths */
    if (be_open && hooks->close)
        hooks->close(&be); /* every job gets DONE: exchanges are freed */
    server_free(srv);
    auth_keys_free(keys);
    config_free(cfg);
    return rc;
}
