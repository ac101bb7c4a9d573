/* cli/cmd-run.c: `strata run`: one prompt through the CPU engine, streamed.
 *
 *   strata run -m MODEL.gguf -p "Once upon a time" -n 64 --temp 0
 *   strata run -m MODEL.gguf -p "Why is the sky blue?" --chat -t 2
 *   strata run -m MODEL.gguf --ids 1,450,4996 -n 128 --temp 0 --ignore-eos --json
 *
 * Prints the generated text as it is produced (streaming detokenizer: only
 * complete UTF-8), then one line of timings on stderr: prompt (prefill) and
 * generation tok/s. The prompt and each token go through engine/session,
 * the server's path: --chat wraps the prompt as one user message through
 * the model's chat template (tokenizer.chat_template, ChatML when absent or
 * unparsable, as llama.cpp falls back), one BOS, the context check; each
 * sampled token's text comes from session_step. --json prints one JSON
 * object instead:
 *   {"prompt_ids":[...], "ids":[...], "text":"...", "stop":"eog"|"length",
 *    "margins":[top1 - top2 logit at each generated step],
 *    "timings":{"load_ms", "prompt_n", "prompt_ms", "prompt_tok_s",
 *               "gen_n", "gen_ms", "gen_tok_s", "gen_cpu_ms", "peak_rss_mb"},
 *    "kernels":{"isa", "detected", "weights_layout", "weights_packed_bytes"},
 *    "backend":"cpu"|"vulkan", "gpu":"the --gpu decision (gpu/gpu-choose.h)"}
 * (the ISA the matmuls ran on, `--isa` or STRATA_ISA, and how the weights
 * were laid out for it at load: engine/model/model.h model_weights_layout).
 * gen_ms times the forward passes of generated tokens (gen_n - 1 decode
 * steps: the first generated token comes from the prefill logits), as
 * llama.cpp's eval time does; gen_tok_s = decode steps / gen_ms. gen_cpu_ms
 * is the CPU time every thread of the process spent over those steps
 * (CLOCK_PROCESS_CPUTIME_ID): on a machine shared with other work the wall
 * figure follows the load, the CPU time of a 1-thread run much less.
 *
 * Sampling (engine/sample/sampler.h): --temp 0 is greedy; defaults follow
 * llama-cli (temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat-penalty 1).
 * Generation stops at an end-of-generation token unless --ignore-eos.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli.h"
#include "config/config.h"
#include "engine/core/buf.h"
#include "engine/core/clock.h"
#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/cpu-moe-numa.h"
#include "engine/cpu/kernels.h"
#include "engine/experts/xstore-numa.h"
#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"
#include "engine/host/pool.h"
#include "engine/host/sysinfo.h"
#include "engine/kv/kv.h"
#include "engine/model/model-numa.h"
#include "engine/model/model.h"
#include "engine/session/session.h"
#include "gpu/gpu-choose.h"

struct run_opts {
    const char *model;
    const char *prompt;
    const char *ids; /* "1,2,3": prompt token ids instead of text */
    const char *isa; /* --isa NAME; NULL = STRATA_ISA / config (default auto) */
    int n_gen;       /* tokens to generate */
    int n_threads;   /* 0 = STRATA_THREADS / config, else available CPUs - 1 (sysinfo_threads) */
    int n_ctx;       /* 0 = prompt + n_gen */
    int n_batch;     /* prefill chunk; 0 = model default */
    bool chat, json, ignore_eos, no_prefault, no_repack;
    const char *numa;             /* --numa; NULL = STRATA_NUMA / the config file, else auto */
    const char *gpu, *gpu_layers; /* --gpu, --gpu-layers; NULL = STRATA_GPU... / config */
    struct sampler_params sp;
};

struct run_stats {
    double load_ms, prompt_ms, gen_ms;
    double gen_cpu_ms; /* CPU time of the process (every thread) over gen_ms */
    int prompt_n, gen_n, decode_steps;
    const char *layout;  /* model_weights_layout (static) */
    const char *backend; /* "cpu", "vulkan" */
    const char *gpu;     /* the --gpu decision's line */
    uint64_t packed_bytes;
};

static double now_ms(void) {
    return strata_now() * 1e3;
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: strata run -m MODEL.gguf (-p PROMPT | --ids ID,ID,...) [-n N] [--chat]\n"
            "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed N]\n"
            "         [--repeat-penalty F] [--presence-penalty F] [--frequency-penalty F]\n"
            "         [--repeat-last-n N] [-t THREADS] [-c CTX] [-b BATCH] [--ignore-eos] "
            "[--json]\n"
            "         [--no-prefault]   (do not map the weight pages at load)\n"
            "         [--numa auto|off|node:N|split]\n"
            "         [--gpu auto|off|N] [--gpu-layers all|auto|N] (Vulkan; N: first N layers)\n"
            "         [--no-repack]     (read the weights from the file's pages, unpacked)\n"
            "         [--isa NAME]      (auto|avx512-vnni|avx512|avx2-vnni|avx2|ref: the CPU "
            "kernels)\n");
}

/* Parses an int/float argument; returns false on junk. */
static bool arg_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static bool arg_float(const char *s, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (!*s || *end || v != v)
        return false;
    *out = v;
    return true;
}

/* Returns 0, or 2 (usage error; message printed). */
static int parse_args(int argc, char **argv, struct run_opts *o) {
    *o = (struct run_opts){.n_gen = 128};
    o->sp = sampler_params_default();
    o->sp.want_logprob = false; /* run prints no logprobs */
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
    o->sp.seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        int seed = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            ok = (o->model = v) != NULL;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            ok = (o->prompt = v) != NULL;
        else if (!strcmp(a, "--ids"))
            ok = (o->ids = v) != NULL;
        else if (!strcmp(a, "--isa"))
            ok = (o->isa = v) != NULL;
        else if (!strcmp(a, "--numa"))
            ok = (o->numa = v) != NULL;
        else if (!strcmp(a, "--gpu"))
            ok = (o->gpu = v) != NULL;
        else if (!strcmp(a, "--gpu-layers"))
            ok = (o->gpu_layers = v) != NULL;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            ok = v && arg_int(v, 0, 1 << 20, &o->n_gen);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = v && arg_int(v, 1, 256, &o->n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = v && arg_int(v, 1, 1 << 20, &o->n_ctx);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size"))
            ok = v && arg_int(v, 1, 1 << 16, &o->n_batch);
        else if (!strcmp(a, "--temp"))
            ok = v && arg_float(v, &o->sp.temperature);
        else if (!strcmp(a, "--top-k"))
            ok = v && arg_int(v, 0, 1 << 30, &o->sp.top_k);
        else if (!strcmp(a, "--top-p"))
            ok = v && arg_float(v, &o->sp.top_p);
        else if (!strcmp(a, "--min-p"))
            ok = v && arg_float(v, &o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty"))
            ok = v && arg_float(v, &o->sp.repeat_penalty) && o->sp.repeat_penalty > 0;
        else if (!strcmp(a, "--presence-penalty"))
            ok = v && arg_float(v, &o->sp.presence_penalty);
        else if (!strcmp(a, "--frequency-penalty"))
            ok = v && arg_float(v, &o->sp.frequency_penalty);
        else if (!strcmp(a, "--repeat-last-n"))
            ok = v && arg_int(v, 0, 1 << 20, &o->sp.penalty_last_n);
        else if (!strcmp(a, "--seed")) {
            ok = v && arg_int(v, 0, 0x7fffffff, &seed);
            o->sp.seed = (uint64_t)seed;
        } else {
            takes = false;
            if (!strcmp(a, "--chat"))
                o->chat = true;
            else if (!strcmp(a, "--json"))
                o->json = true;
            else if (!strcmp(a, "--ignore-eos"))
                o->ignore_eos = true;
            else if (!strcmp(a, "--no-prefault"))
                o->no_prefault = true;
            else if (!strcmp(a, "--no-repack"))
                o->no_repack = true;
            else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                usage(stdout);
                return 1;
            } else
                ok = false;
        }
        if (!ok) {
            fprintf(stderr, "strata run: bad or missing value for '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (takes)
            i++;
    }
    if (!o->model || (!o->prompt && !o->ids) || (o->prompt && o->ids) || (o->ids && o->chat)) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Parses "1,2,3" into ids (each in [0, n_vocab)). */
static int parse_ids(const char *s, int n_vocab, struct tokenizer_ids *out,
                     struct strata_error *err) {
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= n_vocab)
            return strata_error_set(err, STRATA_E_RANGE, "--ids: bad token id near '%.16s'", s);
        if (strata_grow((void **)&out->ids, &out->cap, out->n + 1, sizeof(int32_t)) < 0)
            return strata_error_set(err, STRATA_E_NOMEM, "--ids: out of memory");
        out->ids[out->n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return strata_error_set(err, STRATA_E_INVALID, "--ids: expected ',' near '%.16s'", end);
    }
    return 0;
}

/* The prompt as ids: --ids as given, else the text (raw, or one user
 * message through the chat template) through session_prompt; either way
 * checked against the context. */
static int prompt_ids(const struct run_opts *o, const struct session_base *sb,
                      struct tokenizer_ids *ids, struct strata_error *err) {
    if (o->ids) {
        int rc = parse_ids(o->ids, session_base_n_vocab(sb), ids, err);
        return rc < 0 ? rc : session_check_prompt(sb, ids->n, err);
    }
    if (!o->chat) {
        struct session_input in = {.text = o->prompt, .len = strlen(o->prompt)};
        return session_prompt(sb, &in, ids, err);
    }
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", o->prompt);
    if (!msgs)
        return strata_error_set(err, STRATA_E_INVALID, "prompt is not valid UTF-8");
    struct session_input in = {.messages = msgs};
    int rc = session_prompt(sb, &in, ids, err);
    json_decref(msgs);
    return rc;
}

/* Runs tokens [0, n) of ids through the model in chunks of n_batch; the last
 * token's logits land in logits (n_vocab). */
static int prefill(struct model *m, struct kv_cache *kv, const int32_t *ids, int n, int n_batch,
                   float *logits, struct strata_error *err) {
    struct model_batch_entry *e = malloc((size_t)n_batch * sizeof(*e));
    if (!e)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory for a batch of %d", n_batch);
    int rc = 0;
    for (int p0 = 0; p0 < n && rc == 0; p0 += n_batch) {
        int k = n - p0 < n_batch ? n - p0 : n_batch;
        for (int i = 0; i < k; i++)
            e[i] = (struct model_batch_entry){0, p0 + i, ids[p0 + i], p0 + i == n - 1};
        struct model_batch b = {e, k};
        rc = model_forward(m, kv, &b, p0 + k == n ? logits : NULL, err);
    }
    free(e);
    return rc;
}

/* Difference between the two largest logits (0 if n < 2). */
static float top2_margin(const float *l, int n) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (l[i] > a) {
            b = a;
            a = l[i];
        } else if (l[i] > b)
            b = l[i];
    }
    return n < 2 ? 0.0f : a - b;
}

/* The expert store's counters after the run, a line on `out` (nothing when
 * the store is off). */
static void print_xstore(struct model *m, FILE *out) {
    struct xstore *x = xstore_of(model_experts(m));
    if (!x)
        return;
    struct xstore_stats st;
    xstore_stats(x, &st);
    const uint64_t picks = st.hits + st.misses;
    fprintf(out,
            "strata run: expert store %s: %d slots (%.1f MiB), hit rate %.3f (%llu picks), "
            "%llu overflow, %.1f MiB read in %llu reads (mean %.0f us), queue depth %d (%s), "
            "registered buffers %s; prefetch %llu issued, %llu useful, %llu wasted, %llu "
            "dropped, recall %.3f, precision %.3f\n",
            xstore_mode(x), st.n_slots, (double)st.capacity_bytes / 1048576.0,
            picks ? (double)st.hits / (double)picks : 0.0, (unsigned long long)picks,
            (unsigned long long)st.overflow, (double)st.bytes_read / 1048576.0,
            (unsigned long long)st.reads, st.reads ? (double)st.lat_sum_us / (double)st.reads : 0.0,
            st.queue_depth, st.queue_rule ? st.queue_rule : "", st.fixed_rule ? st.fixed_rule : "",
            (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_useful,
            (unsigned long long)st.prefetch_wasted, (unsigned long long)st.prefetch_dropped,
            st.pred_used ? (double)st.pred_hit / (double)st.pred_used : 0.0,
            st.pred_n ? (double)st.pred_hit / (double)st.pred_n : 0.0);
    xstore_stats_free(&st);
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is KiB on Linux */
}

static double per_s(int n, double ms) {
    return ms > 0 ? n * 1e3 / ms : 0.0;
}

static void print_json(const struct tokenizer_ids *prompt, const int32_t *gen, const float *margins,
                       int n_gen, const char *text, size_t text_len, bool eog,
                       const struct run_stats *st) {
    json_t *pj = json_array(), *gj = json_array(), *mj = json_array();
    for (size_t i = 0; i < prompt->n; i++)
        json_array_append_new(pj, json_integer(prompt->ids[i]));
    for (int i = 0; i < n_gen; i++) {
        json_array_append_new(gj, json_integer(gen[i]));
        json_array_append_new(mj, json_real(margins[i]));
    }
    json_t *tj = json_pack("{s:f, s:i, s:f, s:f, s:i, s:i, s:f, s:f, s:f, s:f}", "load_ms",
                           st->load_ms, "prompt_n", st->prompt_n, "prompt_ms", st->prompt_ms,
                           "prompt_tok_s", per_s(st->prompt_n, st->prompt_ms), "gen_n", st->gen_n,
                           "decode_steps", st->decode_steps, "gen_ms", st->gen_ms, "gen_tok_s",
                           per_s(st->decode_steps, st->gen_ms), "gen_cpu_ms", st->gen_cpu_ms,
                           "peak_rss_mb", peak_rss_mb());
    json_t *kj = json_pack("{s:s, s:s, s:s, s:I}", "isa", kernels_isa_name(kernels_isa_active()),
                           "detected", kernels_isa_name(kernels_isa_detected()), "weights_layout",
                           st->layout ? st->layout : "", "weights_packed_bytes",
                           (json_int_t)st->packed_bytes);
    json_t *root = json_pack(
        "{s:o, s:o, s:s%, s:s, s:o, s:o, s:o, s:s, s:s}", "prompt_ids", pj, "ids", gj, "text",
        text ? text : "", text_len, "stop", eog ? "eog" : "length", "margins", mj, "timings", tj,
        "kernels", kj, "backend", st->backend ? st->backend : "cpu", "gpu", st->gpu ? st->gpu : "");
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (s)
        printf("%s\n", s);
    else
        fprintf(stderr, "strata run: could not build the JSON output\n");
    free(s);
    json_decref(root);
}

/* Prints the text (or keeps it for --json); false on out of memory. */
static bool put_text(const struct run_opts *o, char **buf, size_t *len, size_t *cap, const char *s,
                     size_t n) {
    if (!n)
        return true;
    if (o->json)
        return strata_append(buf, len, cap, s, n) == 0;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    return true;
}

int cli_run_main(int argc, char **argv) {
    struct run_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc)
        return prc == 1 ? 0 : prc;
    int rc = 1;
    struct strata_error err = {0};
    struct pool *pool = NULL;
    struct backend *be = NULL;
    struct model *m = NULL;
    struct session_base *sb = NULL;
    struct kv_cache *kv = NULL;
    struct session *sess = NULL;
    struct tokenizer_ids ids = {0};
    float *logits = NULL, *margins = NULL;
    int32_t *gen = NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    struct run_stats st = {0};
    bool eog = false;

    /* Threads and pool spin follow the same rule as `strata serve` (one
     * policy, sysinfo_threads): -t, else STRATA_THREADS / the config file
     * (option table), else the affinity mask and cgroup quota minus one,
     * capped at 32 either way. */
    struct pool_params pp = pool_params_default();
    char numa_mode[64] = "auto";
    char gpu_mode[32] = "auto", gpu_layers[32] = "all", gpu_pcache[4096] = "";
    bool gpu_profile = false;
    uint64_t gpu_mem_budget = 0; /* --gpu-mem-budget, bytes */
    struct gpu_choice gch = {0};
    int64_t mem_budget = 0; /* model_params.mem_budget, from sysinfo as in serve */
    struct xstore_plan xs = {0};
    struct xstore_plan_in xin = {0};
    {
        char *cargv[] = {"strata run", NULL};
        struct config *cfg = config_load(&(struct config_params){1, cargv, NULL}, &err);
        if (!cfg) {
            rc = 2; /* invalid option values stop start-up with 2, as in serve */
            goto done;
        }
        pp.spin = (int)config_int(cfg, CONFIG_POOL_SPIN);
        /* the config's string dies with cfg: keep a copy */
        snprintf(numa_mode, sizeof numa_mode, "%s", o.numa ? o.numa : config_str(cfg, CONFIG_NUMA));
        snprintf(gpu_mode, sizeof gpu_mode, "%s", o.gpu ? o.gpu : config_str(cfg, CONFIG_GPU));
        snprintf(gpu_layers, sizeof gpu_layers, "%s",
                 o.gpu_layers ? o.gpu_layers : config_str(cfg, CONFIG_GPU_LAYERS));
        gpu_profile = config_bool(cfg, CONFIG_GPU_PROFILE);
        gpu_mem_budget = (uint64_t)config_int(cfg, CONFIG_GPU_MEM_BUDGET);
        snprintf(gpu_pcache, sizeof gpu_pcache, "%s", config_str(cfg, CONFIG_GPU_PIPELINE_CACHE));
        /* the ISA before the model: the weight layout follows it (kernels.h) */
        const char *isa_name = o.isa ? o.isa : config_str(cfg, CONFIG_ISA);
        enum kernels_isa isa;
        if (kernels_isa_parse(isa_name, &isa) < 0) {
            strata_error_set(
                &err, STRATA_E_CONFIG,
                "--isa '%s': expected auto, avx512-vnni, avx512, avx2-vnni, avx2 or ref", isa_name);
            config_free(cfg);
            rc = 2;
            goto done;
        }
        kernels_isa_force(isa);
        const int forced = o.n_threads ? o.n_threads : (int)config_int(cfg, CONFIG_THREADS);
        const char *fsrc =
            o.n_threads ? "cli" : config_source_name(config_source_of(cfg, CONFIG_THREADS));
        struct sysinfo_params sip = sysinfo_params_default();
        sip.root = config_str(cfg, CONFIG_SYS_ROOT);
        struct sysinfo_limits lim;
        struct sysinfo_threads th;
        const int trc = sysinfo_threads(&sip, forced, fsrc, &lim, &th, &err);
        if (trc < 0) { /* fsrc is static (config_source_name) */
            config_free(cfg);
            rc = 2;
            goto done;
        }
        if (lim.mem_budget > 0)
            mem_budget = lim.mem_budget;
        o.n_threads = th.n_threads;
        /* the expert store as serve decides it (STRATA_EXPERT_STORE, ...; the
         * KV cache of one run is small: not counted) */
        xin = (struct xstore_plan_in){.mode = config_str(cfg, CONFIG_EXPERT_STORE),
                                      .io = config_str(cfg, CONFIG_EXPERT_IO),
                                      .direct = config_str(cfg, CONFIG_EXPERT_DIRECT),
                                      .fixed = config_str(cfg, CONFIG_EXPERT_FIXED),
                                      .ram = config_int(cfg, CONFIG_EXPERT_RAM),
                                      .prefetch = (int)config_int(cfg, CONFIG_EXPERT_PREFETCH),
                                      .mem_budget = mem_budget};
        struct model_probe pr;
        struct gguf_file *gf = NULL;
        if (model_probe(o.model, &pr, NULL) == 0 && pr.hp.n_expert > 0 &&
            (gf = gguf_open(o.model, NULL))) {
            xin.model_bytes = pr.n_bytes;
            xin.expert_bytes = xstore_expert_bytes(gf);
        }
        gguf_close(gf);
        const int xrc = xstore_plan(&xin, &xs, &err);
        config_free(cfg); /* the plan's strings were read above */
        if (xrc) {
            rc = 2;
            goto done;
        }
        /* the decision and the budget it holds the model to (bench/offload-large) */
        if (xin.expert_bytes)
            fprintf(stderr, "strata run: expert store %s; memory budget %.0f MiB\n", xs.rule,
                    mem_budget > 0 ? (double)mem_budget / (1024.0 * 1024.0) : 0.0);
    }
    pp.n_threads = o.n_threads;
    if (!(pool = pool_init(&pp, &err)))
        goto done;
    double t0 = now_ms();
    {
        /* --gpu: the Vulkan backend when the rule takes a device (gpu-choose.h) */
        struct model_probe gpr = {0};
        const bool probed = model_probe(o.model, &gpr, NULL) == 0;
        struct gpu_choice_in gin = {.gpu = gpu_mode,
                                    .gpu_layers = gpu_layers,
                                    .profile = gpu_profile,
                                    .pipeline_cache = gpu_pcache,
                                    .mem_budget = gpu_mem_budget,
                                    .model_bytes = probed ? gpr.n_bytes : 0,
                                    .n_layer = probed ? gpr.hp.n_layer : 0,
                                    .n_head = probed ? gpr.hp.n_head : 0,
                                    .n_head_kv = gpr.hp.n_head_kv,
                                    .head_dim_k = gpr.hp.head_dim_k,
                                    .head_dim_v = gpr.hp.head_dim_v,
                                    .n_rot = gpr.hp.n_rot,
                                    .n_expert = gpr.hp.n_expert,
                                    .n_expert_used = gpr.hp.n_expert_used};
        if (!probed) /* the load says what is wrong with the file */
            snprintf(gch.rule, sizeof gch.rule, "the model could not be probed: the CPU");
        else if (gpu_choose(&gin, &gch, &err)) {
            rc = 2;
            goto done;
        }
        fprintf(stderr, "strata run: gpu: %s\n", gch.rule);
        be = gch.be;
    }
    struct backend_cpu_params cp = backend_cpu_params_default();
    cp.pool = pool;
    if (gch.be && gch.n_layer_gpu > 0) { /* --gpu-layers N: the rest on the CPU (a split) */
        struct model_probe gpr = {0};
        const int n_layer = model_probe(o.model, &gpr, NULL) == 0 ? gpr.hp.n_layer : 0;
        if (gch.n_layer_gpu < n_layer) {
            struct backend *cpu = backend_cpu_init(&cp, &err);
            if (!cpu || gpu_choice_split(&gch, n_layer, cpu, &err)) {
                fprintf(stderr, "strata run: gpu: the split failed (%s): the CPU\n", err.message);
                snprintf(gch.rule, sizeof gch.rule, "the split failed: the CPU");
                if (!cpu)
                    backend_free(gch.be);
                gch.be = NULL;
                strata_error_clear(&err);
            }
            be = gch.be;
        }
    }
    if (!be && !(be = backend_cpu_init(&cp, &err)))
        goto done;
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.pool = pool;
    mp.prefault = !o.no_prefault;
    mp.repack = !o.no_repack;
    mp.mem_budget = mem_budget;
    struct host_numa_report numa_rep;
    /* with the GPU in use, --numa auto binds to the node local to it */
    const struct host_numa_pci gpci = {gch.pci_domain, gch.pci_bus, gch.pci_device,
                                       gch.pci_function};
    const int gpu_node = gch.be && gch.has_pci ? model_numa_gpu_node(&gpci) : -1;
    if (model_numa_prepare(o.model, numa_mode, pool, gpu_node, NULL, &numa_rep, &err) < 0) {
        rc = 2;
        goto done;
    }
    mp.xstore = xs.on && !gch.be ? &xs.params : NULL; /* a GPU holds every expert */
    if (!(m = model_load(o.model, &mp, &err)) && gch.be) {
        /* out of device memory, a lost device: say so and load on the CPU */
        fprintf(stderr, "strata run: gpu: loading on the GPU failed (%s): the CPU\n", err.message);
        snprintf(gch.rule, sizeof gch.rule, "loading on the GPU failed: the CPU");
        backend_free(be);
        gch.be = NULL;
        strata_error_clear(&err);
        if (!(be = backend_cpu_init(&cp, &err)))
            goto done;
        mp.backend = be;
        mp.xstore = xs.on ? &xs.params : NULL;
        m = model_load(o.model, &mp, &err);
    }
    if (!m)
        goto done;
    st.backend = be->ops->name;
    st.gpu = gch.rule;
    if (model_numa_finish(m, pool, NULL, false, &numa_rep, &err) < 0)
        goto done;
    if (o.numa) { /* asked for on the command line: say what it did */
        char line[640];
        model_numa_line(&numa_rep, line, sizeof line);
        fprintf(stderr, "strata run: numa: %s\n", line);
    }
    if (o.n_ctx > model_n_ctx_max(m)) {
        strata_error_set(&err, STRATA_E_CONTEXT_LENGTH, "-c %d: the model's context is %d", o.n_ctx,
                         model_n_ctx_max(m));
        goto done;
    }
    /* the tokenizer and the chat template, shared with `strata serve` */
    struct session_base_params bp = session_base_params_default();
    bp.gguf = model_gguf(m);
    bp.n_vocab = model_n_vocab(m);
    bp.n_ctx = o.n_ctx ? o.n_ctx : model_n_ctx_max(m);
    if (!(sb = session_base_init(&bp, &err)))
        goto done;
    st.load_ms = now_ms() - t0;
    st.layout = model_weights_layout(m);
    st.packed_bytes = model_packed_bytes(m);
    if (prompt_ids(&o, sb, &ids, &err) < 0)
        goto done;
    int n_vocab = model_n_vocab(m);
    /* the KV cache holds what this run needs: prompt + n_gen, within -c */
    int64_t need = (int64_t)ids.n + o.n_gen;
    int n_ctx = o.n_ctx ? o.n_ctx : (int)(need < bp.n_ctx ? need : bp.n_ctx);
    if (need > n_ctx)
        o.n_gen = n_ctx - (int)ids.n; /* stop at the end of the context */
    int n_batch = o.n_batch ? o.n_batch : model_n_batch_max(m);
    if (n_batch > model_n_batch_max(m))
        n_batch = model_n_batch_max(m);
    if (!(kv = model_kv_init(m, 1, n_ctx, &err)))
        goto done;
    struct session_params sp = session_params_default();
    sp.sampler = o.sp;
    sp.ignore_eos = o.ignore_eos;
    sp.strip_leading_space = true; /* printed text, as llama-cli shows it */
    if (!(sess = session_init(sb, &sp, &err)))
        goto done;
    logits = malloc((size_t)n_vocab * sizeof(float));
    gen = malloc(((size_t)o.n_gen + 1) * sizeof(int32_t));
    margins = malloc(((size_t)o.n_gen + 1) * sizeof(float));
    if (!logits || !gen || !margins) {
        strata_error_set(&err, STRATA_E_NOMEM, "out of memory for %d logits", n_vocab);
        goto done;
    }

    t0 = now_ms();
    if (o.n_gen > 0 && prefill(m, kv, ids.ids, (int)ids.n, n_batch, logits, &err) < 0)
        goto done;
    st.prompt_ms = now_ms() - t0;
    st.prompt_n = (int)ids.n;
    t0 = now_ms();
    const double c0 = cpu_ms();
    /* decode steps pick on the device when the backend samples and the
     * request needs only the logits (session_device_rule); --json keeps the
     * host path, whose output has each pick's top-2 margin from the logits */
    struct sampler_rule drule;
    const bool on_dev =
        !o.json && model_can_sample(m) && session_device_rule(sess, 256, &drule) == 1;
    for (int i = 0; i < o.n_gen; i++) {
        struct sampler_result r;
        struct session_delta d;
        bool picked = false;
        if (i > 0) { /* decode the previous pick */
            struct model_batch_entry e = {0, (int32_t)ids.n + i - 1, gen[i - 1], true};
            struct model_batch b = {&e, 1};
            if (on_dev) {
                const struct model_sample ms = {drule.top_k, drule.top_p, drule.min_p,
                                                drule.temperature};
                const float u = drule.temperature > 0 ? session_next_uniform(sess) : 0.0f;
                int32_t id;
                if (model_forward_sample(m, kv, &b, &ms, &u, &id, &err) < 0)
                    goto done;
                r = (struct sampler_result){.token = id, .logprob = NAN};
                picked = true;
            } else if (model_forward(m, kv, &b, logits, &err) < 0) {
                goto done;
            }
            st.decode_steps++;
        }
        if ((!picked && session_sample(sess, logits, &r, &err) < 0) ||
            session_step(sess, &r, &d, &err) < 0)
            goto done;
        gen[i] = r.token;
        margins[i] = picked ? NAN : top2_margin(logits, n_vocab);
        st.gen_n = i + 1;
        if (!put_text(&o, &text, &text_len, &text_cap, d.text, d.len)) {
            strata_error_set(&err, STRATA_E_NOMEM, "out of memory for the text");
            goto done;
        }
        if (d.stop) { /* an end-of-generation token (no stop sequences here) */
            eog = true;
            break;
        }
    }
    st.gen_ms = now_ms() - t0;
    st.gen_cpu_ms = cpu_ms() - c0;
    struct session_delta d;
    session_flush(sess, &d); /* the length limit: what the detokenizer still holds */
    if (!put_text(&o, &text, &text_len, &text_cap, d.text, d.len)) {
        strata_error_set(&err, STRATA_E_NOMEM, "out of memory for the text");
        goto done;
    }
    if (o.json) {
        print_json(&ids, gen, margins, st.gen_n, text, text_len, eog, &st);
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "strata run: load %.0f ms; prompt %d tokens in %.1f ms (%.2f tok/s); "
                "generation %d tokens, %d decode steps in %.1f ms (%.2f tok/s); %d threads; "
                "kernels %s, weights %s; peak RSS %.1f MiB%s\n",
                st.load_ms, st.prompt_n, st.prompt_ms, per_s(st.prompt_n, st.prompt_ms), st.gen_n,
                st.decode_steps, st.gen_ms, per_s(st.decode_steps, st.gen_ms), o.n_threads,
                kernels_isa_name(kernels_isa_active()), st.layout, peak_rss_mb(),
                on_dev ? "; decode picks on the GPU" : "");
    }
    print_xstore(m, stderr);      /* stdout keeps the one JSON object of --json */
    struct cpu_moe_numa_stats ds; /* --numa split on a MoE: how its experts were divided */
    if (o.numa && backend_cpu_moe_numa_stats(be, &ds) == 0 && ds.calls) {
        char dl[256];
        cpu_moe_numa_line(&ds, dl, sizeof dl);
        fprintf(stderr, "strata run: numa: %s\n", dl);
    }
    struct xs_numa_info xi; /* the expert store's slots per node (xstore-numa.h) */
    xs_numa_info(xstore_numa(xstore_of(model_experts(m))), &xi);
    if (o.numa && xi.n_regions)
        fprintf(stderr,
                "strata run: numa: expert store slots %d / %d on nodes %d / %d, %s (%.1f MiB)\n",
                xi.slots[0], xi.slots[1], xi.node[0], xi.node[1], xi.placement,
                (double)xi.touched_bytes / 1048576.0);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "strata run: %s\n", err.message[0] ? err.message : "failed");
    free(text);
    free(margins);
    free(gen);
    free(logits);
    tokenizer_ids_free(&ids);
    session_free(sess);
    kv_free(kv);
    session_base_free(sb);
    model_free(m);
    backend_free(be);
    pool_free(pool);
    return rc;
}
