/* server/daemon.h: the `strata serve` process: config, auth, HTTP server,
 * generation layer, signals, drain. Shared by cli/cmd-serve.c (real
 * generation layer) and the HTTP tests (a fake one), so both run the same
 * start-up and shutdown path.
 *
 *   static const struct daemon_hooks hooks = {"strata serve", my_open, my_close};
 *   return daemon_main(argc, argv, &hooks);   // from a cli_*_main
 *
 * Order: parse config (exit 2 on a bad value) -> auth keys -> HTTP listening
 * (/health: 503 "loading") -> hooks->open (loads the model) -> ready
 * (/health: 200) -> SIGTERM/SIGINT -> server_shutdown(drain for
 * shutdown-timeout s, then cancel) -> hooks->close -> exit 0.
 *
 * Threading: call from the main thread before any other thread exists (it
 * blocks SIGTERM/SIGINT/SIGPIPE so that every later thread inherits the
 * mask and the main thread takes the signals with sigwait).
 */
#ifndef STRATA_SERVER_DAEMON_H
#define STRATA_SERVER_DAEMON_H

#include <stdio.h>

#include "config/config.h"
#include "engine/core/progress.h"
#include "server/gen.h"

struct daemon_hooks {
    const char *prog; /* "strata serve": for messages and --help */
    /* Builds the generation layer from the effective config (model load,
     * warm-up), reporting the load's phases to progress (the daemon logs
     * them and tells systemd). Optional: NULL serves HTTP only (completions
     * answer 503). */
    int (*open)(const struct config *cfg, const struct strata_progress *progress,
                struct gen_backend *out, struct strata_error *err);
    /* Stops it: every live job gets GEN_EV_DONE before this returns. */
    void (*close)(struct gen_backend *be);
    /* --print-config: resolves the automatic values the generation layer
     * decides (context, batch, KV pool) into cfg with their rules
     * (config_derive_rule), from the model's header; prints a "# " line
     * instead when it cannot. Optional. */
    void (*plan)(struct config *cfg, FILE *out);
};

/* argv[0] is the subcommand name. Handles --help and --print-config.
 * Returns the exit code: 0 ok (also after SIGTERM), 1 failure, 2 bad config. */
int daemon_main(int argc, char **argv, const struct daemon_hooks *hooks);

#endif
