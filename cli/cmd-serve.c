/* cli/cmd-serve.c: `strata serve [MODEL.gguf] [options]`: the daemon.
 * Start-up, signals and drain live in server/daemon.c; this file supplies
 * the generation layer. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/core/clock.h"
#include "engine/cpu/kernels.h"
#include "engine/host/sysinfo.h"
#include "engine/model/model-numa.h"
#include "engine/model/model.h"
#include "server/daemon.h"
#include "server/scheduler.h"

/* The scheduler's options from the config (the parts sched_plan reads
 * included), and the memory budget from the limits. */
static struct sched_params params_of(const struct config *cfg) {
    struct sched_params sp = sched_params_default();
    sp.model_path = config_str(cfg, CONFIG_MODEL);
    sp.n_threads = (int)config_int(cfg, CONFIG_THREADS);
    sp.threads_source = config_source_name(config_source_of(cfg, CONFIG_THREADS));
    sp.pool_spin = (int)config_int(cfg, CONFIG_POOL_SPIN);
    sp.numa = config_str(cfg, CONFIG_NUMA);
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
    sp.chat_template_file = config_str(cfg, CONFIG_CHAT_TEMPLATE_FILE);
    sp.profile_interval_s = (double)config_int(cfg, CONFIG_EXPERT_PROFILE_INTERVAL);
    sp.expert_store = config_str(cfg, CONFIG_EXPERT_STORE);
    sp.expert_ram = config_int(cfg, CONFIG_EXPERT_RAM);
    sp.expert_prefetch = (int)config_int(cfg, CONFIG_EXPERT_PREFETCH);
    sp.expert_io = config_str(cfg, CONFIG_EXPERT_IO);
    sp.expert_direct = config_str(cfg, CONFIG_EXPERT_DIRECT);
    sp.expert_fixed = config_str(cfg, CONFIG_EXPERT_FIXED);
    sp.gpu = config_str(cfg, CONFIG_GPU);
    sp.gpu_layers = config_str(cfg, CONFIG_GPU_LAYERS);
    sp.gpu_profile = config_bool(cfg, CONFIG_GPU_PROFILE);
    sp.gpu_pipeline_cache = config_str(cfg, CONFIG_GPU_PIPELINE_CACHE);
    sp.gpu_mem_budget = config_int(cfg, CONFIG_GPU_MEM_BUDGET);
    /* without --kv-mem the KV pool takes at most half the memory budget */
    struct sysinfo_params sip = sysinfo_params_default();
    sip.root = config_str(cfg, CONFIG_SYS_ROOT);
    struct sysinfo_limits lim;
    if (sysinfo_read(&sip, &lim, NULL) == 0 && lim.mem_budget > 0) {
        sp.kv_mem_max = lim.mem_budget / 2;
        sp.mem_budget = lim.mem_budget; /* the weight copy stays within the other half */
    }
    return sp;
}

/* Writes the plan's values back into the config with their rules, where
 * the value is automatic or was adjusted. */
static void derive_plan(struct config *cfg, const struct sched_plan *pl) {
    char v[32];
    struct {
        enum config_id id;
        long long value;
        const char *rule;
    } rows[] = {
        {CONFIG_CTX_SIZE, pl->n_ctx, pl->ctx_rule},
        {CONFIG_BATCH, pl->n_batch, pl->batch_rule},
        {CONFIG_PARALLEL, pl->parallel, pl->parallel_rule},
        {CONFIG_KV_MEM, (long long)pl->kv_bytes, pl->kv_rule},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (!rows[i].rule[0] && config_int(cfg, rows[i].id) == rows[i].value)
            continue;
        snprintf(v, sizeof v, "%lld", rows[i].value);
        const enum config_source src = config_int(cfg, rows[i].id) == 0
                                           ? CONFIG_SOURCE_AUTO
                                           : config_source_of(cfg, rows[i].id);
        (void)config_derive_rule(cfg, rows[i].id, v, src, rows[i].rule, NULL);
    }
}

/* "260K", "1.2M", "7.24B" parameters. */
static const char *count_text(int64_t n, char *buf, size_t cap) {
    if (n < 1000000)
        snprintf(buf, cap, "%.0fK", (double)n / 1e3);
    else if (n < 1000000000)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    return buf;
}

/* --print-config: the sizing from the model's header, nothing loaded. */
static void serve_plan(struct config *cfg, FILE *out) {
    const char *path = config_str(cfg, CONFIG_MODEL);
    if (!*path) {
        fprintf(out, "# no model: ctx-size, batch, parallel and kv-mem are shown as set "
                     "(0 = automatic: resolved from the model)\n");
        return;
    }
    struct strata_error err = {0};
    struct model_probe mp;
    struct sched_plan pl;
    const struct sched_params sp = params_of(cfg);
    const struct model_params mpar = model_params_default();
    if (model_probe(path, &mp, &err) || sched_plan(&sp, &mp.hp, mpar.n_batch_max, &pl, &err)) {
        fprintf(out, "# model %s: %s (ctx-size, batch, parallel and kv-mem shown as set)\n", path,
                err.message);
        return;
    }
    char np[16];
    fprintf(out, "# model %s: %s, %s parameters, %.3f GB of tensors, trained context %d\n", path,
            mp.hp.arch, count_text(mp.n_params, np, sizeof np), (double)mp.n_bytes / 1e9,
            mp.hp.n_ctx_train);
    derive_plan(cfg, &pl);
}

/* "q4_k 71%, q6_k 20%, f32 9%" of the tensor bytes. */
static void quant_mix(const struct gen_stats *st, char *buf, size_t cap) {
    uint64_t total = 0;
    for (int i = 0; i < st->n_weight_types; i++)
        total += st->weight_types[i].n_bytes;
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < st->n_weight_types && n < cap; i++)
        n += (size_t)snprintf(
            buf + n, cap - n, "%s%s %.0f%%", i ? ", " : "", st->weight_types[i].type,
            total ? 100.0 * (double)st->weight_types[i].n_bytes / (double)total : 0.0);
}

/* Builds the generation layer (server/sched*.c): loads the model, warms it
 * up and starts the scheduler thread before the daemon says ready. */
static int serve_open(const struct config *cfg, const struct strata_progress *progress,
                      struct gen_backend *out, struct strata_error *err) {
    const char *path = config_str(cfg, CONFIG_MODEL);
    if (!*path)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "no model: pass MODEL.gguf, --model or STRATA_MODEL");
    /* The ISA first: the weight layout follows the ISA active at load. */
    enum kernels_isa isa;
    const char *isa_name = config_str(cfg, CONFIG_ISA);
    if (kernels_isa_parse(isa_name, &isa) < 0)
        return strata_error_set(
            err, STRATA_E_CONFIG,
            "--isa '%s': expected auto, avx512-vnni, avx512, avx2-vnni, avx2 or ref", isa_name);
    kernels_isa_force(isa);
    if (kernels_isa_active() != isa)
        fprintf(stderr, "strata serve: --isa %s: this CPU runs at most %s\n", isa_name,
                kernels_isa_name(kernels_isa_detected()));
    struct sched_params sp = params_of(cfg);
    sp.progress = progress;
    const double t0 = strata_now();
    struct sched *s = sched_init(&sp, err);
    if (!s) {
        strata_error_prefix(err, "model '%s'", path);
        return err && err->code ? err->code : STRATA_E_FORMAT;
    }
    *out = (struct gen_backend){sched_gen_ops(), s};
    struct gen_stats st;
    out->ops->stats(s, &st);
    struct model_probe mp = {0};
    (void)model_probe(path, &mp, NULL); /* the header again: cheap, and only for the line */
    char mix[160];
    quant_mix(&st, mix, sizeof mix);
    const struct sched_plan *pl = sched_get_plan(s);
    char np[16];
    fprintf(stderr,
            "strata serve: model %s loaded in %.1f s: %s, %s parameters (%s), %d layers%s\n", path,
            strata_now() - t0, st.architecture, count_text(mp.n_params, np, sizeof np), mix,
            mp.hp.n_layer, mp.hp.n_expert ? "" : ", dense");
    if (mp.hp.n_expert)
        fprintf(stderr, "strata serve: experts: %d a layer, %d routed a token\n", mp.hp.n_expert,
                mp.hp.n_expert_used);
    fprintf(stderr,
            "strata serve: context %d tokens%s%s%s, %d sessions, %d tokens a step; KV pool %.1f "
            "MiB (%s), %d positions a block\n",
            pl->n_ctx, pl->ctx_rule[0] ? " (" : "", pl->ctx_rule, pl->ctx_rule[0] ? ")" : "",
            pl->parallel, pl->n_batch, (double)pl->kv_bytes / 1048576.0, pl->kv_rule, pl->n_block);
    const char *origin = "", *note = "";
    sched_template(s, &origin, &note);
    if (!strcmp(origin, "gguf"))
        fprintf(stderr, "strata serve: chat template: the GGUF's tokenizer.chat_template\n");
    else
        fprintf(stderr, "strata serve: chat template: ChatML fallback (%s)\n",
                note[0] ? note : "no tokenizer.chat_template");
    fprintf(stderr,
            "strata serve: kernels %s (CPU: %s), weights %s (%.1f MB copied, %.1f MB packed)\n",
            st.isa, kernels_isa_name(kernels_isa_detected()), st.weights_layout,
            (double)st.weights_copied_bytes / 1e6, (double)st.weights_packed_bytes / 1e6);
    struct host_numa_report nr;
    if (host_numa_report_get(&nr)) {
        char line[640];
        model_numa_line(&nr, line, sizeof line);
        fprintf(stderr, "strata serve: numa: %s\n", line);
    }
    if (st.profile_path[0])
        fprintf(stderr, "strata serve: expert profile %s: %s\n", st.profile_path, st.profile_state);
    return 0;
}

static void serve_close(struct gen_backend *be) {
    sched_free(be->self);
    *be = (struct gen_backend){NULL, NULL};
}

int cli_serve_main(int argc, char **argv) {
    static const struct daemon_hooks hooks = {"strata serve", serve_open, serve_close, serve_plan};
    return daemon_main(argc, argv, &hooks);
}
