/* cli/cmd-quantize.c: `strata gguf quantize IN OUT TYPE`: re-types every
 * quantizable weight of IN by a llama-quantize recipe (tools/synth/synth.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tools/synth/synth.h"

static void quantize_usage(FILE *out) {
    fprintf(out, "usage: strata gguf quantize [--threads N] [--pooling none|mean|cls|last|rank]\n"
                 "       IN.gguf OUT.gguf TYPE\n\n"
                 "TYPE is a recipe (llama.cpp's llama-quantize mix):");
    for (int i = 0; synth_recipe_names[i]; i++)
        fprintf(out, " %s", synth_recipe_names[i]);
    fprintf(out, "\nor pure:TYPE (any ggml type strata quantizes to, e.g. pure:q2_K): every\n"
                 "quantizable tensor gets TYPE, like llama-quantize --pure.\n");
    fprintf(out, "Norms, biases and router (ffn_gate_inp) tensors keep their type; metadata\n"
                 "is copied with general.file_type set to the recipe's llama_ftype (and\n"
                 "<arch>.pooling_type with --pooling: an embedding-model copy).\n");
}

int cli_gguf_quantize_main(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 0 ? (int)(ncpu > 32 ? 32 : ncpu) : 1;
    int pooling = -1; /* --pooling: set <arch>.pooling_type in the copy */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            quantize_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || v < 1 || v > 256) {
                fprintf(stderr, "strata gguf quantize: --threads 1..256\n");
                return 2;
            }
            threads = (int)v;
            continue;
        }
        if (!strcmp(argv[i], "--pooling") && i + 1 < argc) {
            if ((pooling = synth_pooling_parse(argv[++i])) < 0) {
                fprintf(stderr, "strata gguf quantize: --pooling none|mean|cls|last|rank\n");
                return 2;
            }
            continue;
        }
        if (n_pos == 3) {
            quantize_usage(stderr);
            return 2;
        }
        pos[n_pos++] = argv[i];
    }
    if (n_pos != 3) {
        quantize_usage(stderr);
        return 2;
    }
    struct strata_error err = {0};
    struct synth_report rep = {0};
    if (synth_quantize_file_pooling(pos[0], pos[1], pos[2], threads, pooling, &rep, &err)) {
        fprintf(stderr, "strata gguf quantize: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "strata gguf quantize: wrote %s (%s): %lld tensors, %.1f MiB, %lld fallbacks\n",
            pos[1], pos[2], (long long)rep.n_tensors, (double)rep.n_bytes / (1024.0 * 1024.0),
            (long long)rep.n_fallback);
    return 0;
}
