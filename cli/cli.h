/* cli/cli.h: subcommands of the one `strata` binary. Each returns the process
 * exit code (0 ok, 1 failure, 2 usage/config error); only main() exits. */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

struct cli_command {
    const char *name;                   /* "gguf", "tokenize", "run", "serve", ... */
    const char *summary;                /* one line for `strata --help` */
    int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
};

int cli_gguf_main(int argc, char **argv);
/* `strata gguf synth` (cli/cmd-synth.c), `strata gguf quantize` (cli/cmd-quantize.c) */
int cli_gguf_synth_main(int argc, char **argv);
int cli_gguf_quantize_main(int argc, char **argv);
int cli_gguf_vocab_main(int argc, char **argv); /* `strata gguf vocab-from-hf` (cli/cmd-vocab.c) */
int cli_serve_main(int argc, char **argv);      /* cli/cmd-serve.c */
int cli_tokenize_main(int argc, char **argv);   /* cli/cmd-tokenize.c */
int cli_detokenize_main(int argc, char **argv); /* cli/cmd-tokenize.c */
int cli_template_main(int argc, char **argv);   /* cli/cmd-template.c */
int cli_run_main(int argc, char **argv);        /* cli/cmd-run.c */
int cli_numa_main(int argc, char **argv);       /* cli/cmd-numa.c: `strata numa-check` */

#endif
