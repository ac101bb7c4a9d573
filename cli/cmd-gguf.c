/* cli/cmd-gguf.c: `strata gguf <subcommand>`: a table of GGUF subcommands,
 * and `gguf info FILE`: metadata (long arrays summarised), tensor table,
 * totals per type, parameter count and an architecture summary.
 *
 * Other subcommands (synth, quantize, vocab-from-hf) live in their own files
 * (cli/cmd-synth.c ...), are declared in cli/cli.h and get one row in
 * gguf_subcommands[] below. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"

static int gguf_info_main(int argc, char **argv);

struct gguf_subcommand {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
};

/* One row per subcommand; add yours here. */
static const struct gguf_subcommand gguf_subcommands[] = {
    {"info", "FILE: metadata, tensors, totals and architecture summary", gguf_info_main},
    {"synth", "--preset P --type RECIPE --out FILE: random-weight model", cli_gguf_synth_main},
    {"quantize", "IN OUT TYPE: requantize with a llama-quantize recipe", cli_gguf_quantize_main},
    {"vocab-from-hf", "TOKENIZER.json --out FILE: vocab-only GGUF from Hugging Face files",
     cli_gguf_vocab_main},
};

#define N_GGUF_SUBCOMMANDS (sizeof(gguf_subcommands) / sizeof(gguf_subcommands[0]))

static void gguf_usage(FILE *out) {
    fprintf(out, "usage: strata gguf <subcommand> [options]\n\nsubcommands:\n");
    for (size_t i = 0; i < N_GGUF_SUBCOMMANDS; i++)
        fprintf(out, "  %-14s %s\n", gguf_subcommands[i].name, gguf_subcommands[i].summary);
}

int cli_gguf_main(int argc, char **argv) {
    if (argc < 2) {
        gguf_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        gguf_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_GGUF_SUBCOMMANDS; i++)
        if (!strcmp(argv[1], gguf_subcommands[i].name))
            return gguf_subcommands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "strata gguf: unknown subcommand '%s'\n", argv[1]);
    gguf_usage(stderr);
    return 2;
}

/* ---- gguf info ------------------------------------------------------------ */

#define INFO_STR_MAX 64  /* characters of a string value shown */
#define INFO_ARR_SHOWN 6 /* elements of a long array shown */

/* Prints a GGUF string quoted, escaping control and non-ASCII bytes, cut at
 * INFO_STR_MAX characters. */
static void print_str(FILE *out, struct gguf_str s) {
    fputc('"', out);
    uint64_t n = s.len < INFO_STR_MAX ? s.len : INFO_STR_MAX;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c >= 0x20 && c < 0x7f)
            fputc(c, out);
        else
            fprintf(out, "\\x%02x", c);
    }
    fputc('"', out);
    if (s.len > n)
        fprintf(out, "...(%" PRIu64 " bytes)", s.len);
}

static void print_value(FILE *out, const struct gguf_file *f, const struct gguf_value *v,
                        int depth) {
    switch (v->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        fprintf(out, "%" PRIu64, v->u64);
        break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64:
        fprintf(out, "%" PRId64, v->i64);
        break;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64:
        fprintf(out, "%.9g", v->f64);
        break;
    case GGUF_TYPE_BOOL:
        fputs(v->b ? "true" : "false", out);
        break;
    case GGUF_TYPE_STRING:
        print_str(out, v->str);
        break;
    case GGUF_TYPE_ARRAY: {
        uint64_t n = v->arr.n;
        uint64_t shown = n <= INFO_ARR_SHOWN + 2 ? n : INFO_ARR_SHOWN;
        if (depth > 2) {
            fprintf(out, "[%" PRIu64 " x %s]", n, gguf_type_name(v->arr.elem_type));
            break;
        }
        fputc('[', out);
        for (uint64_t i = 0; i < shown; i++) {
            struct gguf_value e = gguf_arr_get(f, v, i);
            if (i)
                fputs(", ", out);
            print_value(out, f, &e, depth + 1);
        }
        if (shown < n)
            fprintf(out, ", ... %" PRIu64 " more", n - shown);
        fputc(']', out);
        break;
    }
    default:
        fputs("?", out);
    }
}

static void print_kv(FILE *out, const struct gguf_file *f, const struct gguf_kv *kv) {
    char type[48];
    if (kv->value.type == GGUF_TYPE_ARRAY)
        snprintf(type, sizeof(type), "%s[%" PRIu64 "]", gguf_type_name(kv->value.arr.elem_type),
                 kv->value.arr.n);
    else
        snprintf(type, sizeof(type), "%s", gguf_type_name(kv->value.type));
    fprintf(out, "  %-44.*s %-16s ", (int)(kv->key.len < 200 ? kv->key.len : 200), kv->key.ptr,
            type);
    print_value(out, f, &kv->value, 0);
    fputc('\n', out);
}

static void print_shape(char *buf, size_t cap, const struct gguf_tensor_info *t) {
    size_t n = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? " x " : "", t->ne[d]);
}

struct type_total {
    int64_t n_tensors;
    uint64_t bytes;
    int64_t elements;
};

static void print_tensors(FILE *out, const struct gguf_file *f) {
    int64_t nt = gguf_n_tensors(f);
    struct type_total totals[QUANT_TYPE_COUNT] = {{0}};
    fprintf(out, "\ntensors (%" PRId64 "):\n", nt);
    if (nt)
        fprintf(out, "  %5s  %-40s %-8s %-26s %14s %14s\n", "#", "name", "type", "shape", "bytes",
                "offset");
    uint64_t total_bytes = 0;
    int64_t total_params = 0;
    for (int64_t i = 0; i < nt; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        char shape[96];
        print_shape(shape, sizeof(shape), t);
        fprintf(out, "  %5" PRId64 "  %-40.*s %-8s %-26s %14" PRIu64 " %14" PRIu64 "\n", i,
                (int)(t->name.len < 200 ? t->name.len : 200), t->name.ptr, quant_type_name(t->type),
                shape, t->n_bytes, t->offset);
        struct type_total *tt = &totals[t->type]; /* type validated at open */
        tt->n_tensors++;
        tt->bytes += t->n_bytes;
        tt->elements += gguf_tensor_n_elements(t);
        total_bytes += t->n_bytes;
        total_params += gguf_tensor_n_elements(t);
    }
    if (!nt)
        return;
    fprintf(out, "\ntotals by type:\n");
    for (int ty = 0; ty < QUANT_TYPE_COUNT; ty++)
        if (totals[ty].n_tensors)
            fprintf(out, "  %-8s %6" PRId64 " tensors %16" PRIu64 " bytes %16" PRId64 " elements\n",
                    quant_type_name((uint32_t)ty), totals[ty].n_tensors, totals[ty].bytes,
                    totals[ty].elements);
    fprintf(out, "  %-8s %6" PRId64 " tensors %16" PRIu64 " bytes %16" PRId64 " elements\n", "all",
            nt, total_bytes, total_params);
    fprintf(out, "parameters: %" PRId64 " (%.3f M), %.3f bits per parameter\n", total_params,
            total_params / 1e6, total_params ? 8.0 * (double)total_bytes / total_params : 0.0);
}

/* Hyperparameters shown in the summary, as "<arch>.<suffix>". */
static const struct {
    const char *suffix;
    const char *label;
} arch_keys[] = {
    {"context_length", "context length"},
    {"embedding_length", "embedding length"},
    {"block_count", "layers"},
    {"feed_forward_length", "ff length"},
    {"attention.head_count", "heads"},
    {"attention.head_count_kv", "KV heads"},
    {"attention.key_length", "key length"},
    {"attention.value_length", "value length"},
    {"attention.layer_norm_rms_epsilon", "rms norm eps"},
    {"attention.layer_norm_epsilon", "norm eps"},
    {"attention.sliding_window", "sliding window"},
    {"expert_count", "experts"},
    {"expert_used_count", "experts used"},
    {"expert_shared_count", "shared experts"},
    {"expert_feed_forward_length", "expert ff length"},
    {"rope.dimension_count", "rope dimensions"},
    {"rope.freq_base", "rope freq base"},
    {"rope.scaling.type", "rope scaling"},
    {"rope.scaling.factor", "rope scaling factor"},
    {"rope.scaling.original_context_length", "rope original context"},
    {"vocab_size", "vocab size (arch)"},
};

static void print_summary(FILE *out, const struct gguf_file *f) {
    char arch[64] = "";
    fprintf(out, "\nsummary:\n");
    if (gguf_get_str_buf(f, "general.architecture", arch, sizeof(arch), NULL) == 0) {
        fprintf(out, "  architecture: %s\n", arch);
        for (size_t i = 0; i < sizeof(arch_keys) / sizeof(arch_keys[0]); i++) {
            char key[160];
            snprintf(key, sizeof(key), "%s.%s", arch, arch_keys[i].suffix);
            int64_t k = gguf_find_kv(f, key);
            if (k < 0)
                continue;
            fprintf(out, "  %s: ", arch_keys[i].label);
            print_value(out, f, &gguf_kv_at(f, k)->value, 0);
            fputc('\n', out);
        }
    } else {
        fprintf(out, "  architecture: (no general.architecture)\n");
    }
    struct gguf_value tok;
    uint64_t n_vocab = 0;
    char model[64] = "?";
    gguf_get_str_buf(f, "tokenizer.ggml.model", model, sizeof(model), NULL);
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &tok, NULL) == 0) {
        n_vocab = tok.arr.n;
        fprintf(out, "  vocabulary: %" PRIu64 " tokens, tokenizer model %s\n", n_vocab, model);
    } else {
        fprintf(out, "  vocabulary: none (no tokenizer.ggml.tokens)\n");
    }
    if (gguf_n_tensors(f) == 0) {
        fprintf(out, "  tensors: none (vocabulary-only file)\n");
        return;
    }
    const struct gguf_tensor_info *emb = gguf_find_tensor(f, "token_embd.weight");
    const struct gguf_tensor_info *outw = gguf_find_tensor(f, "output.weight");
    if (emb)
        fprintf(out, "  token_embd.weight: %" PRId64 " rows of %" PRId64 "%s\n", emb->ne[1],
                emb->ne[0],
                n_vocab && (uint64_t)emb->ne[1] == n_vocab ? " (rows = vocabulary size)" : "");
    if (outw)
        fprintf(out, "  output: separate output.weight, %" PRId64 " rows%s\n", outw->ne[1],
                n_vocab && (uint64_t)outw->ne[1] == n_vocab ? " (rows = vocabulary size)" : "");
    else if (emb)
        fprintf(out, "  output: tied (no output.weight; uses token_embd.weight)\n");
    else
        fprintf(out, "  output: no output.weight and no token_embd.weight\n");
}

static int gguf_info_main(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        bool help = argc == 2;
        fprintf(help ? stdout : stderr,
                "usage: strata gguf info FILE\n"
                "Validates FILE and prints its metadata, tensor table, totals per type,\n"
                "parameter count and an architecture summary.\n");
        return help ? 0 : 2;
    }
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(argv[1], &err);
    if (!f) {
        fprintf(stderr, "strata gguf info: %s\n", err.message);
        return 1;
    }
    FILE *out = stdout;
    fprintf(out, "file: %s\n", gguf_path(f));
    fprintf(out,
            "GGUF v%" PRIu32 ", %" PRIu64 " bytes, alignment %" PRIu32 ", data offset %" PRIu64
            ", %" PRId64 " keys, %" PRId64 " tensors\n",
            gguf_version(f), gguf_file_size(f), gguf_alignment(f), gguf_data_offset(f),
            gguf_n_kv(f), gguf_n_tensors(f));
    fprintf(out, "\nmetadata (%" PRId64 "):\n", gguf_n_kv(f));
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        print_kv(out, f, gguf_kv_at(f, i));
    print_tensors(out, f);
    print_summary(out, f);
    gguf_close(f);
    return 0;
}
