/* cli/main.c: `strata <command> ...` dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"

static const struct cli_command commands[] = {
    {"serve", "run the OpenAI-compatible HTTP daemon (serve [MODEL.gguf] [options]; --help)",
     cli_serve_main},
    {"template", "render a chat template over request messages (template -m MODEL MSGS.json)",
     cli_template_main},
    {"gguf", "inspect, synthesize and quantize GGUF files (gguf info|synth|quantize|vocab-from-hf)",
     cli_gguf_main},
    {"tokenize", "text -> token ids (tokenize -m MODEL.gguf [--json] TEXT|-)", cli_tokenize_main},
    {"detokenize", "token ids -> text (detokenize -m MODEL.gguf ID...)", cli_detokenize_main},
    {"numa-check",
     "topology, where a model's pages sit, read bandwidth per node (numa-check [MODEL] [--place])",
     cli_numa_main},
    {"run", "generate from a prompt on the CPU engine (run -m MODEL.gguf -p PROMPT [-n N])",
     cli_run_main},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: strata <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`strata <command> --help` describes each command.\n");
    fprintf(out, "\nserve options (also STRATA_* env vars and a config file):\n");
    config_print_help(out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("strata %s\n", STRATA_VERSION);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
