/* cli/cmd-template.c: `strata template`: renders a chat template over a
 * request's messages and prints the prompt exactly (no trailing newline added).
 *
 *   strata template -m MODEL.gguf [--template FILE] [--no-generation-prompt]
 *                   [--bos TEXT] [--eos TEXT] [--vars JSON] [--taint] MESSAGES.json
 *
 * MESSAGES.json holds {"messages":[...],"tools":[...]} as the API receives
 * them. The template comes from --template, else the GGUF key
 * tokenizer.chat_template; bos/eos text from tokenizer.ggml.{bos,eos}_token_id
 * indexing tokenizer.ggml.tokens (--bos/--eos override). --taint prints the
 * untrusted byte ranges to stderr, one "offset length" per line. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/gguf/gguf.h"
#include "engine/text/template.h"
#include "engine/core/buf.h"

static char *read_all(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (n == cap && strata_grow((void **)&buf, &cap, n + 4096, 1) < 0) {
            free(buf);
            buf = NULL;
            break;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    fclose(fp);
    if (buf)
        *len = n;
    return buf;
}

/* Token text of the id stored under key, or NULL. Returns malloc'd text. */
static char *token_text(struct gguf_file *f, const char *key) {
    uint64_t id;
    struct gguf_value toks;
    if (gguf_get_uint(f, key, &id, NULL) || gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, NULL))
        return NULL;
    if (toks.arr.elem_type != GGUF_TYPE_STRING || id >= toks.arr.n)
        return NULL;
    struct gguf_str s = gguf_arr_str(f, &toks, id);
    return strndup(s.ptr, s.len);
}

static void usage(FILE *out) {
    fprintf(out, "usage: strata template [-m MODEL.gguf] [--template FILE] "
                 "[--no-generation-prompt] [--bos TEXT] [--eos TEXT] [--vars JSON] [--taint] "
                 "MESSAGES.json\n");
}

int cli_template_main(int argc, char **argv) {
    const char *model = NULL, *tpl_path = NULL, *msgs_path = NULL, *vars = NULL;
    const char *bos_arg = NULL, *eos_arg = NULL;
    bool gen = true, taint = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--template") && i + 1 < argc) {
            tpl_path = argv[++i];
        } else if (!strcmp(a, "--bos") && i + 1 < argc) {
            bos_arg = argv[++i];
        } else if (!strcmp(a, "--eos") && i + 1 < argc) {
            eos_arg = argv[++i];
        } else if (!strcmp(a, "--vars") && i + 1 < argc) {
            vars = argv[++i];
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen = false;
        } else if (!strcmp(a, "--taint")) {
            taint = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] != '-' && !msgs_path) {
            msgs_path = a;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!msgs_path || (!model && !tpl_path)) {
        usage(stderr);
        return 2;
    }
    int rc = 1;
    struct strata_error err = {0};
    struct gguf_file *f = NULL;
    char *src = NULL, *bos = NULL, *eos = NULL;
    size_t src_len = 0;
    json_t *req = NULL, *extra = NULL;
    struct chat_template *t = NULL;
    struct template_output out = {0};
    if (model) {
        f = gguf_open(model, &err);
        if (!f) {
            fprintf(stderr, "strata template: %s\n", err.message);
            goto done;
        }
        bos = token_text(f, "tokenizer.ggml.bos_token_id");
        eos = token_text(f, "tokenizer.ggml.eos_token_id");
    }
    if (tpl_path) {
        src = read_all(tpl_path, &src_len);
        if (!src) {
            fprintf(stderr, "strata template: cannot read %s\n", tpl_path);
            goto done;
        }
    } else {
        struct gguf_str s;
        if (gguf_get_str(f, "tokenizer.chat_template", &s, &err)) {
            fprintf(stderr, "strata template: %s has no tokenizer.chat_template; using ChatML\n",
                    model);
            src = strdup(template_chatml_source());
            src_len = strlen(src);
        } else {
            src = strndup(s.ptr, s.len);
            src_len = s.len;
        }
    }
    json_error_t jerr;
    req = json_load_file(msgs_path, 0, &jerr);
    if (!req || !json_is_object(req)) {
        fprintf(stderr, "strata template: %s: %s\n", msgs_path, req ? "not an object" : jerr.text);
        goto done;
    }
    if (vars) {
        extra = json_loads(vars, 0, &jerr);
        if (!extra || !json_is_object(extra)) {
            fprintf(stderr, "strata template: --vars: not a JSON object\n");
            goto done;
        }
    }
    t = template_parse(src, src_len, &err);
    if (!t) {
        fprintf(stderr, "strata template: %s\n", err.message);
        goto done;
    }
    struct template_inputs in = template_inputs_default();
    in.messages = json_object_get(req, "messages");
    in.tools = json_object_get(req, "tools");
    in.add_generation_prompt = gen;
    in.bos_token = bos_arg ? bos_arg : bos;
    in.eos_token = eos_arg ? eos_arg : eos;
    in.extra_vars = extra;
    if (!in.messages) {
        fprintf(stderr, "strata template: %s has no \"messages\"\n", msgs_path);
        goto done;
    }
    if (template_render(t, &in, NULL, &out, &err)) {
        fprintf(stderr, "strata template: %s\n", err.message);
        goto done;
    }
    fwrite(out.text, 1, out.len, stdout);
    if (taint)
        for (size_t i = 0; i < out.n_untrusted; i++)
            fprintf(stderr, "%zu %zu\n", out.untrusted[i].offset, out.untrusted[i].length);
    rc = 0;
done:
    template_output_free(&out);
    template_free(t);
    json_decref(extra);
    json_decref(req);
    free(src);
    free(eos);
    free(bos);
    gguf_close(f);
    return rc;
}
