/* cli/cmd-run.c: `strata run`: one prompt through the CPU engine, streamed.
 *
 *   strata run -m MODEL.gguf -p "Once upon a time" -n 64 --temp 0
 *   strata run -m MODEL.gguf -p "Why is the sky blue?" --chat -t 2
 *   strata run -m MODEL.gguf --ids 1,450,4996 -n 128 --temp 0 --ignore-eos --json
 *
 * Prints the generated text as it is produced (streaming detokenizer: only
 * complete UTF-8), then one line of timings on stderr: prompt (prefill) and
 * generation tok/s. --chat wraps the prompt as one user message through the
 * model's chat template (tokenizer.chat_template, ChatML when absent or
 * unparsable, as llama.cpp falls back). --json prints one JSON object instead:
 *   {"prompt_ids":[...], "ids":[...], "text":"...", "stop":"eog"|"length",
 *    "margins":[top1 - top2 logit at each generated step],
 *    "timings":{"load_ms", "prompt_n", "prompt_ms", "prompt_tok_s",
 *               "gen_n", "gen_ms", "gen_tok_s", "peak_rss_mb"},
 *    "kernels":{"isa", "detected", "weights_layout", "weights_packed_bytes"}}
 * (the ISA the matmuls ran on, `--isa` or STRATA_ISA, and how the weights
 * were laid out for it at load: engine/model/model.h model_weights_layout).
 * gen_ms times the forward passes of generated tokens (gen_n - 1 decode
 * steps: the first generated token comes from the prefill logits), as
 * llama.cpp's eval time does; gen_tok_s = decode steps / gen_ms.
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
#include <unistd.h>

#include "cli/cli.h"
#include "config/config.h"
#include "engine/gguf/gguf.h"
#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/kernels.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "engine/host/pool.h"
#include "engine/sample/sampler.h"
#include "engine/host/sysinfo.h"
#include "engine/text/template.h"
#include "engine/text/tokenizer.h"

struct run_opts {
    const char *model;
    const char *prompt;
    const char *ids; /* "1,2,3": prompt token ids instead of text */
    const char *isa; /* --isa NAME; NULL = STRATA_ISA / config (default auto) */
    int n_gen;       /* tokens to generate */
    int n_threads;   /* 0 = STRATA_THREADS / config, else available CPUs - 1 */
    int n_ctx;       /* 0 = prompt + n_gen */
    int n_batch;     /* prefill chunk; 0 = model default */
    bool chat, json, ignore_eos, no_prefault, no_repack;
    struct sampler_params sp;
};

struct run_stats {
    double load_ms, prompt_ms, gen_ms;
    int prompt_n, gen_n, decode_steps;
    const char *layout; /* model_weights_layout (static) */
    uint64_t packed_bytes;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: strata run -m MODEL.gguf (-p PROMPT | --ids ID,ID,...) [-n N] [--chat]\n"
            "         [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed N]\n"
            "         [--repeat-penalty F] [--presence-penalty F] [--frequency-penalty F]\n"
            "         [--repeat-last-n N] [-t THREADS] [-c CTX] [-b BATCH] [--ignore-eos] "
            "[--json]\n"
            "         [--no-prefault]   (do not map the weight pages at load)\n"
            "         [--no-repack]     (read the weights from the file's pages, unpacked)\n"
            "         [--isa NAME]      (auto|avx512-vnni|avx512|avx2|ref: the CPU kernels)\n");
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
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 64;
            int32_t *p = realloc(out->ids, cap * sizeof(int32_t));
            if (!p)
                return strata_error_set(err, STRATA_E_NOMEM, "--ids: out of memory");
            out->ids = p;
            out->cap = cap;
        }
        out->ids[out->n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return strata_error_set(err, STRATA_E_INVALID, "--ids: expected ',' near '%.16s'", end);
    }
    return 0;
}

/* Vocabulary text of a special token ("<s>"), for the template's bos/eos. */
static void special_text(const struct tokenizer *tok, int32_t id, char *buf, size_t cap) {
    buf[0] = '\0';
    size_t len = 0;
    const char *p = id == TOKENIZER_NULL ? NULL : tokenizer_piece(tok, id, &len);
    if (p && len < cap) {
        memcpy(buf, p, len);
        buf[len] = '\0';
    }
}

/* Prompt text (or one user message rendered through the chat template) -> ids. */
static int prompt_ids(const struct run_opts *o, const struct model *m, const struct tokenizer *tok,
                      struct tokenizer_ids *ids, struct strata_error *err) {
    if (o->ids)
        return parse_ids(o->ids, model_n_vocab(m), ids, err);
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    if (!o->chat)
        return tokenizer_encode(tok, o->prompt, strlen(o->prompt), &eo, ids, err);
    const struct gguf_file *gf = model_gguf(m);
    struct gguf_str src = {0};
    struct chat_template *t = NULL;
    if (gguf_find_kv(gf, "tokenizer.chat_template") >= 0 &&
        gguf_get_str(gf, "tokenizer.chat_template", &src, NULL) == 0)
        t = template_parse(src.ptr, (size_t)src.len, NULL);
    if (!t)
        t = template_parse(template_chatml_source(), strlen(template_chatml_source()), err);
    if (!t)
        return err && err->code ? err->code : STRATA_E_TEMPLATE;
    char bos[256], eos[256];
    special_text(tok, tokenizer_bos(tok), bos, sizeof bos);
    special_text(tok, tokenizer_eos(tok), eos, sizeof eos);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", o->prompt);
    struct template_inputs in = template_inputs_default();
    in.messages = msgs;
    in.add_generation_prompt = true;
    in.bos_token = bos;
    in.eos_token = eos;
    struct template_output out = {0};
    int rc = msgs ? template_render(t, &in, NULL, &out, err)
                  : strata_error_set(err, STRATA_E_INVALID, "prompt is not valid UTF-8");
    if (rc == 0) {
        eo.parse_special = true;
        eo.untrusted = (const struct tokenizer_range *)out.untrusted;
        eo.n_untrusted = out.n_untrusted;
        rc = tokenizer_encode(tok, out.text, out.len, &eo, ids, err);
    }
    /* a template that writes bos_token itself plus add_bos: keep one BOS (llama.cpp warns) */
    int32_t b = tokenizer_bos(tok);
    if (rc == 0 && ids->n >= 2 && b != TOKENIZER_NULL && ids->ids[0] == b && ids->ids[1] == b) {
        memmove(ids->ids, ids->ids + 1, (ids->n - 1) * sizeof(int32_t));
        ids->n--;
    }
    template_output_free(&out);
    json_decref(msgs);
    template_free(t);
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
    json_t *tj = json_pack("{s:f, s:i, s:f, s:f, s:i, s:i, s:f, s:f, s:f}", "load_ms", st->load_ms,
                           "prompt_n", st->prompt_n, "prompt_ms", st->prompt_ms, "prompt_tok_s",
                           per_s(st->prompt_n, st->prompt_ms), "gen_n", st->gen_n, "decode_steps",
                           st->decode_steps, "gen_ms", st->gen_ms, "gen_tok_s",
                           per_s(st->decode_steps, st->gen_ms), "peak_rss_mb", peak_rss_mb());
    json_t *kj = json_pack("{s:s, s:s, s:s, s:I}", "isa", kernels_isa_name(kernels_isa_active()),
                           "detected", kernels_isa_name(kernels_isa_detected()), "weights_layout",
                           st->layout ? st->layout : "", "weights_packed_bytes",
                           (json_int_t)st->packed_bytes);
    json_t *root = json_pack("{s:o, s:o, s:s%, s:s, s:o, s:o, s:o}", "prompt_ids", pj, "ids", gj,
                             "text", text ? text : "", text_len, "stop", eog ? "eog" : "length",
                             "margins", mj, "timings", tj, "kernels", kj);
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (s)
        printf("%s\n", s);
    else
        fprintf(stderr, "strata run: could not build the JSON output\n");
    free(s);
    json_decref(root);
}

/* Appends n bytes to a growing buffer; false on out of memory. */
static bool text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap : 256);
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
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
    struct tokenizer *tok = NULL;
    struct kv_cache *kv = NULL;
    struct sampler *smp = NULL;
    struct tokenizer_stream *detok = NULL;
    struct tokenizer_ids ids = {0};
    float *logits = NULL, *margins = NULL;
    int32_t *gen = NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    struct run_stats st = {0};
    bool eog = false;

    /* Threads and pool spin follow the same rule as `strata serve`: -t, else
     * STRATA_THREADS / the config file (option table), else the affinity mask
     * and cgroup quota minus one, capped at 32 (engine/host/sysinfo.h). */
    struct pool_params pp = pool_params_default();
    int64_t mem_budget = 0; /* model_params.mem_budget, from sysinfo as in serve */
    {
        char *cargv[] = {"strata run", NULL};
        struct config *cfg = config_load(&(struct config_params){1, cargv, NULL}, &err);
        if (!cfg) {
            rc = 2; /* invalid option values stop start-up with 2, as in serve */
            goto done;
        }
        pp.spin = (int)config_int(cfg, CONFIG_POOL_SPIN);
        /* the ISA before the model: the weight layout follows it (kernels.h) */
        const char *isa_name = o.isa ? o.isa : config_str(cfg, CONFIG_ISA);
        enum kernels_isa isa;
        if (kernels_isa_parse(isa_name, &isa) < 0) {
            strata_error_set(&err, STRATA_E_CONFIG,
                             "--isa '%s': expected auto, avx512-vnni, avx512, avx2 or ref",
                             isa_name);
            config_free(cfg);
            rc = 2;
            goto done;
        }
        kernels_isa_force(isa);
        int forced = o.n_threads ? o.n_threads : (int)config_int(cfg, CONFIG_THREADS);
        struct sysinfo_params sip = sysinfo_params_default();
        sip.root = config_str(cfg, CONFIG_SYS_ROOT);
        struct sysinfo_limits lim;
        const char *src = NULL;
        const bool have_lim = sysinfo_read(&sip, &lim, NULL) == 0;
        if (have_lim && lim.mem_budget > 0)
            mem_budget = lim.mem_budget;
        if (forced > 0)
            o.n_threads = forced;
        else if (have_lim)
            o.n_threads = sysinfo_effective_threads(0, NULL, &lim, &src);
        else
            o.n_threads = 1;
        config_free(cfg);
    }
    pp.n_threads = o.n_threads;
    if (!(pool = pool_init(&pp, &err)))
        goto done;
    double t0 = now_ms();
    struct backend_cpu_params cp = backend_cpu_params_default();
    cp.pool = pool;
    if (!(be = backend_cpu_init(&cp, &err)))
        goto done;
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.pool = pool;
    mp.prefault = !o.no_prefault;
    mp.repack = !o.no_repack;
    mp.mem_budget = mem_budget;
    if (!(m = model_load(o.model, &mp, &err)))
        goto done;
    if (!(tok = tokenizer_init_gguf(model_gguf(m), &err)))
        goto done;
    st.load_ms = now_ms() - t0;
    st.layout = model_weights_layout(m);
    st.packed_bytes = model_packed_bytes(m);
    if (prompt_ids(&o, m, tok, &ids, &err) < 0)
        goto done;
    if (ids.n == 0) {
        strata_error_set(&err, STRATA_E_INVALID, "the prompt is empty (no tokens)");
        goto done;
    }
    int n_vocab = model_n_vocab(m);
    int64_t need = (int64_t)ids.n + o.n_gen;
    int n_ctx = o.n_ctx ? o.n_ctx : (int)(need < model_n_ctx_max(m) ? need : model_n_ctx_max(m));
    if ((int64_t)ids.n >= n_ctx || n_ctx > model_n_ctx_max(m)) {
        strata_error_set(&err, STRATA_E_CONTEXT_LENGTH,
                         "prompt of %zu tokens does not fit a context of %d (model max %d)", ids.n,
                         n_ctx, model_n_ctx_max(m));
        goto done;
    }
    if (need > n_ctx)
        o.n_gen = n_ctx - (int)ids.n; /* stop at the end of the context */
    int n_batch = o.n_batch ? o.n_batch : model_n_batch_max(m);
    if (n_batch > model_n_batch_max(m))
        n_batch = model_n_batch_max(m);
    if (!(kv = model_kv_init(m, 1, n_ctx, &err)))
        goto done;
    if (!(smp = sampler_init(&o.sp, n_vocab, &err)))
        goto done;
    if (!(detok = tokenizer_stream_init(tok, NULL, &err)))
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
    for (int i = 0; i < o.n_gen; i++) {
        if (i > 0) { /* decode the previous pick */
            struct model_batch_entry e = {0, (int32_t)ids.n + i - 1, gen[i - 1], true};
            struct model_batch b = {&e, 1};
            if (model_forward(m, kv, &b, logits, &err) < 0)
                goto done;
            st.decode_steps++;
        }
        struct sampler_result r;
        if (sampler_sample(smp, logits, &r, &err) < 0)
            goto done;
        sampler_accept(smp, r.token);
        gen[i] = r.token;
        margins[i] = top2_margin(logits, n_vocab);
        st.gen_n = i + 1;
        if (!o.ignore_eos && tokenizer_is_eog(tok, r.token)) {
            eog = true;
            break;
        }
        size_t n = 0;
        const char *s = tokenizer_stream_feed(detok, r.token, &n);
        if (o.json) {
            if (n && !text_append(&text, &text_len, &text_cap, s, n)) {
                strata_error_set(&err, STRATA_E_NOMEM, "out of memory for the text");
                goto done;
            }
        } else if (n) {
            fwrite(s, 1, n, stdout);
            fflush(stdout);
        }
    }
    st.gen_ms = now_ms() - t0;
    size_t n = 0;
    const char *s = tokenizer_stream_flush(detok, &n);
    if (o.json) {
        if (n && !text_append(&text, &text_len, &text_cap, s, n)) {
            strata_error_set(&err, STRATA_E_NOMEM, "out of memory for the text");
            goto done;
        }
        print_json(&ids, gen, margins, st.gen_n, text, text_len, eog, &st);
    } else {
        fwrite(s, 1, n, stdout);
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "strata run: load %.0f ms; prompt %d tokens in %.1f ms (%.2f tok/s); "
                "generation %d tokens, %d decode steps in %.1f ms (%.2f tok/s); %d threads; "
                "kernels %s, weights %s; peak RSS %.1f MiB\n",
                st.load_ms, st.prompt_n, st.prompt_ms, per_s(st.prompt_n, st.prompt_ms), st.gen_n,
                st.decode_steps, st.gen_ms, per_s(st.decode_steps, st.gen_ms), o.n_threads,
                kernels_isa_name(kernels_isa_active()), st.layout, peak_rss_mb());
    }
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "strata run: %s\n", err.message[0] ? err.message : "failed");
    free(text);
    free(margins);
    free(gen);
    free(logits);
    tokenizer_ids_free(&ids);
    tokenizer_stream_free(detok);
    sampler_free(smp);
    kv_free(kv);
    tokenizer_free(tok);
    model_free(m);
    backend_free(be);
    pool_free(pool);
    return rc;
}
