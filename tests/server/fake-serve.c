/* tests/server/fake-serve.c: the real daemon path (server/daemon.c) with the
 * FAKE generation layer, for the raw HTTP tests (tests/peers/http-raw.py). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server/daemon.h"
#include "tests/server/fake-gen.h"

static int fake_open(const struct config *cfg, const struct strata_progress *progress,
                     struct gen_backend *out, struct strata_error *err) {
    (void)progress;
    /* STRATA_FAKE_LOAD_MS (tests only): pretend loading takes this long, so
     * the test sees /health answer 503 first. */
    const char *load_ms = getenv("STRATA_FAKE_LOAD_MS");
    if (load_ms && atoi(load_ms) > 0) {
        long ms = atoi(load_ms);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    struct fake_gen *g =
        fake_gen_init((int)config_int(cfg, CONFIG_PARALLEL), (int)config_int(cfg, CONFIG_QUEUE));
    if (!g)
        return strata_error_set(err, STRATA_E_NOMEM, "fake backend: cannot start");
    *out = fake_gen_backend(g);
    return 0;
}

static void fake_close(struct gen_backend *be) {
    fake_gen_free(be->self);
}

int main(int argc, char **argv) {
    static const struct daemon_hooks hooks = {"strata-fake-serve", fake_open, fake_close, NULL};
    return daemon_main(argc, argv, &hooks);
}
