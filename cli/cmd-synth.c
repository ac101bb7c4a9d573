/* cli/cmd-synth.c: `strata gguf synth`: writes a random-weight model that
 * llama.cpp loads (tools/synth/synth.h describes the weights and recipes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/gguf/gguf.h"
#include "tools/synth/synth.h"

static void synth_usage(FILE *out) {
    fprintf(out,
            "usage: strata gguf synth [--preset P] [--arch A] --type RECIPE --out FILE\n"
            "         [--seed N] [--vocab-from VOCAB.gguf] [--route-skew zipf:S] [--threads N]\n"
            "         [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--head-dim N]\n"
            "         [--n-ff N] [--n-vocab N] [--n-expert N] [--n-expert-used N]\n"
            "         [--n-ff-exp N] [--ctx N] [--rope-base F] [--rms-eps F] [--tied|--untied]\n"
            "         [--name S] [--exact-quant]\n\n"
            "Writes a complete random-weight model (llama.cpp tensor names, shapes and\n"
            "keys). The preset (default tiny) sets arch and geometry; flags override.\n"
            "archs: llama (dense, or Mixtral-style MoE with --n-expert), qwen2 (QKV bias),\n"
            "       qwen3 (q/k norms), qwen3moe\n\npresets:\n");
    for (int i = 0; synth_preset_names[i]; i++)
        fprintf(out, "  %-14s %s\n", synth_preset_names[i], synth_preset_docs[i]);
    fprintf(out, "\nrecipes (llama-quantize mixes, see tools/synth/synth.h):");
    for (int i = 0; synth_recipe_names[i]; i++)
        fprintf(out, " %s", synth_recipe_names[i]);
    fprintf(out, " pure:TYPE (every quantizable tensor TYPE, e.g. pure:q2_K)");
    fprintf(out, "\n\n--vocab-from copies every tokenizer.* key of a GGUF; the vocabulary size\n"
                 "then sets the embedding and output sizes. Without it a byte-level BPE vocab\n"
                 "(tokenizer.ggml.model gpt2) of --n-vocab tokens is written.\n"
                 "--route-skew zipf:S (MoE): router weights are biased so expert popularity\n"
                 "follows ~rank^-S (a shared direction in the embeddings carries a per-expert\n"
                 "logit bias -S*ln(rank); ranks are a seeded permutation per layer).\n"
                 "--pooling none|mean|cls|last|rank: write <arch>.pooling_type (an embedding\n"
                 "  model for /v1/embeddings; llama.cpp's values 0..4)\n"
                 "--exact-quant: quantize every f32 row with ggml's reference quantizers\n"
                 "(default: Q4_K/Q5_K/Q6_K matrices are drawn as random codes, ~10x faster).\n");
}

static int parse_i64(const char *flag, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < 0) {
        fprintf(stderr, "strata gguf synth: %s needs a non-negative integer, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_f(const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s) {
        fprintf(stderr, "strata gguf synth: %s needs a number, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_gguf_synth_main(int argc, char **argv) {
    struct synth_params p;
    struct strata_error err = {0};
    synth_params_default(&p);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p.n_threads = ncpu > 0 ? (int)(ncpu > 32 ? 32 : ncpu) : 1;
    const char *out = NULL, *vocab = NULL, *arch = NULL, *preset = "tiny", *name = NULL;
    const char *type = NULL;
    int tied = -1;
    /* geometry overrides: applied after the preset */
    struct {
        const char *flag;
        int64_t *dst;
        int64_t val;
        int set;
    } ov[] = {
        {"--n-embd", &p.n_embd, 0, 0},
        {"--n-layer", &p.n_layer, 0, 0},
        {"--n-head", &p.n_head, 0, 0},
        {"--n-head-kv", &p.n_head_kv, 0, 0},
        {"--head-dim", &p.head_dim, 0, 0},
        {"--n-ff", &p.n_ff, 0, 0},
        {"--n-vocab", &p.n_vocab, 0, 0},
        {"--n-expert", &p.n_expert, 0, 0},
        {"--n-expert-used", &p.n_expert_used, 0, 0},
        {"--n-ff-exp", &p.n_ff_exp, 0, 0},
        {"--ctx", &p.n_ctx, 0, 0},
    };
    const size_t n_ov = sizeof(ov) / sizeof(ov[0]);
    double rope = -1, eps = -1, skew = 0;
    int64_t seed = -1, threads = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            synth_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--exact-quant")) {
            p.exact_quant = true;
            continue;
        }
        if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            tied = !strcmp(a, "--tied");
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "strata gguf synth: %s needs a value (or unknown flag)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        size_t k;
        for (k = 0; k < n_ov; k++)
            if (!strcmp(a, ov[k].flag))
                break;
        if (k < n_ov) {
            if (parse_i64(a, v, &ov[k].val))
                return 2;
            ov[k].set = 1;
        } else if (!strcmp(a, "--out") || !strcmp(a, "-o")) {
            out = v;
        } else if (!strcmp(a, "--type")) {
            type = v;
        } else if (!strcmp(a, "--preset")) {
            preset = v;
        } else if (!strcmp(a, "--arch")) {
            arch = v;
        } else if (!strcmp(a, "--vocab-from")) {
            vocab = v;
        } else if (!strcmp(a, "--name")) {
            name = v;
        } else if (!strcmp(a, "--seed")) {
            if (parse_i64(a, v, &seed))
                return 2;
        } else if (!strcmp(a, "--threads")) {
            if (parse_i64(a, v, &threads) || threads < 1 || threads > 256)
                return fprintf(stderr, "strata gguf synth: --threads 1..256\n"), 2;
        } else if (!strcmp(a, "--rope-base")) {
            if (parse_f(a, v, &rope))
                return 2;
        } else if (!strcmp(a, "--rms-eps")) {
            if (parse_f(a, v, &eps))
                return 2;
        } else if (!strcmp(a, "--pooling")) {
            if ((p.pooling = synth_pooling_parse(v)) < 0) {
                fprintf(stderr, "strata gguf synth: --pooling none|mean|cls|last|rank\n");
                return 2;
            }
        } else if (!strcmp(a, "--route-skew")) {
            if (strncmp(v, "zipf:", 5) || parse_f(a, v + 5, &skew) || skew < 0) {
                fprintf(stderr, "strata gguf synth: --route-skew takes zipf:S with S >= 0\n");
                return 2;
            }
        } else {
            fprintf(stderr, "strata gguf synth: unknown flag %s\n", a);
            synth_usage(stderr);
            return 2;
        }
    }
    if (!out || !type) {
        fprintf(stderr, "strata gguf synth: --out and --type are required\n");
        synth_usage(stderr);
        return 2;
    }
    if (synth_preset(&p, preset, &err)) {
        fprintf(stderr, "strata gguf synth: %s (see --help)\n", err.message);
        return 2;
    }
    if (arch)
        snprintf(p.arch, sizeof(p.arch), "%s", arch);
    for (size_t k = 0; k < n_ov; k++)
        if (ov[k].set)
            *ov[k].dst = ov[k].val;
    snprintf(p.recipe, sizeof(p.recipe), "%s", type);
    if (name)
        snprintf(p.name, sizeof(p.name), "%s", name);
    if (seed >= 0)
        p.seed = (uint64_t)seed;
    if (threads > 0)
        p.n_threads = (int)threads;
    if (rope > 0)
        p.rope_base = (float)rope;
    if (eps > 0)
        p.rms_eps = (float)eps;
    if (tied >= 0)
        p.tied_output = tied;
    p.route_skew = skew;
    struct gguf_file *vf = NULL;
    if (vocab) {
        vf = gguf_open(vocab, &err);
        if (!vf) {
            fprintf(stderr, "strata gguf synth: %s\n", err.message);
            return 1;
        }
        p.vocab_from = vf;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct synth_report rep = {0};
    int rc = synth_write(&p, out, &rep, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    gguf_close(vf);
    if (rc) {
        fprintf(stderr, "strata gguf synth: %s\n", err.message);
        return 1;
    }
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr,
            "strata gguf synth: wrote %s: %s %s, %lld tensors, %.3f B params, %.1f MiB, "
            "%lld fallbacks, %.2f s (%d threads)\n",
            out, p.arch, p.recipe, (long long)rep.n_tensors, (double)rep.n_params / 1e9,
            (double)rep.n_bytes / (1024.0 * 1024.0), (long long)rep.n_fallback, secs, p.n_threads);
    return 0;
}
