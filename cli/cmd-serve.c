/* cli/cmd-serve.c: `strata serve [MODEL.gguf] [options]`: the daemon.
 * Start-up, signals and drain live in server/daemon.c; this file supplies
 * the generation layer. */
#include <stdio.h>

#include "cli/cli.h"
#include "engine/gguf.h"
#include "server/daemon.h"

/* Checks the model file before the daemon says ready. The generation layer
 * (server/sched*.c, engineer g2) is not in the tree yet: until it is, this
 * returns no backend, so /v1/models lists nothing and completions answer 503
 * with an OpenAI error body. g2: build the scheduler here and fill *out. */
static int serve_open(const struct config *cfg, struct gen_backend *out, struct strata_error *err) {
    const char *path = config_str(cfg, CONFIG_MODEL);
    if (!*path)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "no model: pass MODEL.gguf, --model or STRATA_MODEL");
    struct gguf_file *f = gguf_open(path, err);
    if (!f) {
        strata_error_prefix(err, "model '%s'", path);
        return err ? err->code : STRATA_E_FORMAT;
    }
    char arch[64] = "?";
    gguf_get_str_buf(f, "general.architecture", arch, sizeof(arch), NULL);
    fprintf(stderr, "strata serve: model %s (architecture %s) checked\n", path, arch);
    fprintf(stderr, "strata serve: generation layer not built yet: completions answer 503\n");
    gguf_close(f);
    *out = (struct gen_backend){NULL, NULL};
    return 0;
}

int cli_serve_main(int argc, char **argv) {
    static const struct daemon_hooks hooks = {"strata serve", serve_open, NULL};
    return daemon_main(argc, argv, &hooks);
}
