/* cli/cmd-vocab.c: `strata gguf vocab-from-hf`: a vocabulary-only GGUF from a
 * Hugging Face tokenizer.json (tools/hfvocab/hfvocab.h has the conversion rules).
 *
 *   strata gguf vocab-from-hf TOKENIZER.json [--config tokenizer_config.json]
 *          [--model-config config.json] --out VOCAB.gguf [--pre NAME] [--arch ARCH]
 *          [--name NAME] [--vocab-size N]
 *
 * Prints one summary line on success (model, pre, token counts by type,
 * special ids, add_bos/add_eos). Exit codes: 0 ok, 1 conversion failed,
 * 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tools/hfvocab/hfvocab.h"

static void vocab_usage(FILE *out) {
    fprintf(out,
            "usage: strata gguf vocab-from-hf TOKENIZER.json [--config tokenizer_config.json]\n"
            "       [--model-config config.json] --out VOCAB.gguf [--pre NAME] [--arch ARCH]\n"
            "       [--name NAME] [--vocab-size N]\n");
}

static const char *flag_text(int v) {
    return v < 0 ? "unset" : v ? "true" : "false";
}

int cli_gguf_vocab_main(int argc, char **argv) {
    struct hfvocab_params p = hfvocab_params_default();
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            vocab_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--config") && val) {
            p.config_path = val, i++;
        } else if (!strcmp(a, "--model-config") && val) {
            p.model_config_path = val, i++;
        } else if (!strcmp(a, "--out") && val) {
            out = val, i++;
        } else if (!strcmp(a, "--pre") && val) {
            p.pre = val, i++;
        } else if (!strcmp(a, "--arch") && val) {
            p.arch = val, i++;
        } else if (!strcmp(a, "--name") && val) {
            p.name = val, i++;
        } else if (!strcmp(a, "--vocab-size") && val) {
            char *end;
            unsigned long n = strtoul(val, &end, 10);
            if (*end || !*val || n == 0 || n > HFVOCAB_MAX_TOKENS) {
                fprintf(stderr, "strata gguf vocab-from-hf: --vocab-size must be 1..%u\n",
                        HFVOCAB_MAX_TOKENS);
                return 2;
            }
            p.vocab_size = (uint32_t)n, i++;
        } else if (a[0] == '-' || in) {
            fprintf(stderr, "strata gguf vocab-from-hf: unexpected argument '%s'\n", a);
            vocab_usage(stderr);
            return 2;
        } else {
            in = a;
        }
    }
    if (!in || !out) {
        vocab_usage(stderr);
        return 2;
    }
    struct strata_error err = {0};
    struct hfvocab_summary s;
    if (hfvocab_convert(in, &p, out, &s, &err) < 0) {
        fprintf(stderr, "strata gguf vocab-from-hf: %s\n", err.message);
        return 1;
    }
    printf("%s: model %s, pre %s, %u tokens (%u control, %u user-defined, %u byte, %u unused), "
           "%u merges, bos %d, eos %d, pad %d, unk %d, add_bos %s, add_eos %s, chat template %s\n",
           out, s.model, s.pre[0] ? s.pre : "(none)", s.n_tokens, s.n_control, s.n_user_defined,
           s.n_byte, s.n_unused, s.n_merges, s.bos, s.eos, s.pad, s.unk, flag_text(s.add_bos),
           flag_text(s.add_eos), s.chat_template ? "yes" : "no");
    return 0;
}
