/* cli/cmd-serve.c: `strata serve [MODEL.gguf] [options]`: the daemon.
 * Start-up, signals and drain live in server/daemon.c; this file supplies
 * the generation layer. */
#include <stdio.h>

#include "cli/cli.h"
#include "engine/cpu/kernels.h"
#include "engine/host/sysinfo.h"
#include "server/daemon.h"
#include "server/sched.h"

/* Builds the generation layer (server/sched*.c): loads the
 * model, warms it up and starts the scheduler thread before the daemon says
 * ready. */
static int serve_open(const struct config *cfg, struct gen_backend *out, struct strata_error *err) {
    const char *path = config_str(cfg, CONFIG_MODEL);
    if (!*path)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "no model: pass MODEL.gguf, --model or STRATA_MODEL");
    /* The ISA first: the weight layout follows the ISA active at load. */
    enum kernels_isa isa;
    const char *isa_name = config_str(cfg, CONFIG_ISA);
    if (kernels_isa_parse(isa_name, &isa) < 0)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "--isa '%s': expected auto, avx512-vnni, avx512, avx2 or ref",
                                isa_name);
    kernels_isa_force(isa);
    if (kernels_isa_active() != isa)
        fprintf(stderr, "strata serve: --isa %s: this CPU runs at most %s\n", isa_name,
                kernels_isa_name(kernels_isa_detected()));
    struct sched_params sp = sched_params_default();
    sp.model_path = path;
    sp.n_threads = (int)config_int(cfg, CONFIG_THREADS);
    sp.threads_source = config_source_name(config_source_of(cfg, CONFIG_THREADS));
    sp.pool_spin = (int)config_int(cfg, CONFIG_POOL_SPIN);
    sp.n_ctx = (int)config_int(cfg, CONFIG_CTX_SIZE);
    sp.parallel = (int)config_int(cfg, CONFIG_PARALLEL);
    sp.queue = (int)config_int(cfg, CONFIG_QUEUE);
    sp.kv_mem = config_int(cfg, CONFIG_KV_MEM);
    sp.kv_block = (int)config_int(cfg, CONFIG_KV_BLOCK);
    sp.prefix_cache = config_bool(cfg, CONFIG_PREFIX_CACHE);
    sp.prefault = config_bool(cfg, CONFIG_PREFAULT);
    sp.repack = config_bool(cfg, CONFIG_REPACK);
    sp.n_batch = (int)config_int(cfg, CONFIG_BATCH);
    sp.request_timeout = (double)config_int(cfg, CONFIG_REQUEST_TIMEOUT);
    sp.expert_profile = config_str(cfg, CONFIG_EXPERT_PROFILE);
    sp.profile_interval_s = (double)config_int(cfg, CONFIG_EXPERT_PROFILE_INTERVAL);
    /* without --kv-mem the KV pool takes at most half the memory budget */
    struct sysinfo_params sip = sysinfo_params_default();
    sip.root = config_str(cfg, CONFIG_SYS_ROOT);
    struct sysinfo_limits lim;
    if (sysinfo_read(&sip, &lim, NULL) == 0 && lim.mem_budget > 0) {
        sp.kv_mem_max = lim.mem_budget / 2;
        sp.mem_budget = lim.mem_budget; /* the weight copy stays within the other half */
    }
    struct sched *s = sched_init(&sp, err);
    if (!s) {
        strata_error_prefix(err, "model '%s'", path);
        return err && err->code ? err->code : STRATA_E_FORMAT;
    }
    *out = (struct gen_backend){sched_gen_ops(), s};
    struct gen_stats st;
    out->ops->stats(s, &st);
    fprintf(stderr,
            "strata serve: model %s loaded: kernels %s (CPU: %s), weights %s (%.1f MB copied, "
            "%.1f MB packed)\n",
            path, st.isa, kernels_isa_name(kernels_isa_detected()), st.weights_layout,
            (double)st.weights_copied_bytes / 1e6, (double)st.weights_packed_bytes / 1e6);
    if (st.profile_path[0])
        fprintf(stderr, "strata serve: expert profile %s: %s\n", st.profile_path, st.profile_state);
    return 0;
}

static void serve_close(struct gen_backend *be) {
    sched_free(be->self);
    *be = (struct gen_backend){NULL, NULL};
}

int cli_serve_main(int argc, char **argv) {
    static const struct daemon_hooks hooks = {"strata serve", serve_open, serve_close};
    return daemon_main(argc, argv, &hooks);
}
