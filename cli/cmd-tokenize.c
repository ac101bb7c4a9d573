/* cli/cmd-tokenize.c: `strata tokenize` and `strata detokenize`.
 *
 *   strata tokenize -m MODEL.gguf [--no-special] [--no-bos] [--no-parse-special]
 *                   [--untrusted OFF:LEN]... [--json] TEXT|-
 *   strata tokenize -m MODEL.gguf [options] --batch < LINES.jsonl
 *   strata detokenize -m MODEL.gguf [--special] [--keep-space] [--clean] ID...
 *   strata detokenize -m MODEL.gguf [options] --batch < IDS.txt
 *
 * tokenize prints the ids on one line, separated by spaces; --json prints
 * {"ids":[...],"tokens":[{"id":N,"piece":"<vocab text>","text":"<decoded>"}]}
 * (text fields with invalid UTF-8 get U+FFFD). By default the model's BOS/EOS
 * are added (--no-bos: not) and control-token text is recognised
 * (--no-parse-special: not); --no-special does both. --untrusted marks a byte
 * range in which control tokens are never recognised. "-" reads stdin.
 * --batch reads one JSON string per stdin line and prints one line of ids per
 * input (for cross-checks that tokenize thousands of strings in one process).
 * detokenize prints the decoded text (no newline added); --special keeps the
 * text of control tokens, --keep-space keeps the SentencePiece leading space,
 * --clean applies llama.cpp's clean-up of spaces before punctuation. --batch
 * reads one line of ids per text and prints each text's bytes in hex, one line
 * each (exact bytes, for cross-checks).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "engine/core/buf.h"

static char *read_stream(FILE *fp, size_t *len) {
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (n == cap &&
            (cap >= TOKENIZER_MAX_TEXT || strata_grow((void **)&buf, &cap, n + 4096, 1) < 0)) {
            free(buf);
            return NULL;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    if (buf)
        *len = n;
    return buf;
}

static struct tokenizer *load(const char *path) {
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "strata: %s\n", err.message);
        return NULL;
    }
    struct tokenizer *tok = tokenizer_init_gguf(f, &err);
    gguf_close(f);
    if (!tok)
        fprintf(stderr, "strata: %s: %s\n", path, err.message);
    return tok;
}

/* s[0..n) with invalid UTF-8 replaced by U+FFFD, as a JSON string. */
static json_t *json_text(const char *s, size_t n) {
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        bool ok = len && i + len <= n;
        for (size_t j = 1; ok && j < len; j++)
            ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
        if (ok && len == 3)
            ok = !(c == 0xe0 && (unsigned char)s[i + 1] < 0xa0) &&
                 !(c == 0xed && (unsigned char)s[i + 1] > 0x9f);
        if (ok && len == 4)
            ok = !(c == 0xf0 && (unsigned char)s[i + 1] < 0x90) &&
                 !(c == 0xf4 && (unsigned char)s[i + 1] > 0x8f);
        if (ok) {
            memcpy(buf + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(buf + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, k);
    free(buf);
    return j;
}

static struct tokenizer *load(const char *path);

/* --batch: one JSON string per stdin line -> one line of ids per input. */
static int tokenize_batch(const char *model, const struct tokenizer_encode_opts *eo) {
    struct tokenizer *tok = load(model);
    if (!tok)
        return 1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, stdin)) > 0) {
        json_error_t jerr;
        json_t *j = json_loadb(line, (size_t)n, JSON_DECODE_ANY, &jerr);
        if (!j || !json_is_string(j)) {
            fprintf(stderr, "strata tokenize --batch: each line must be a JSON string\n");
            json_decref(j);
            rc = 2;
            break;
        }
        struct tokenizer_ids ids = {0};
        struct strata_error err = {0};
        if (tokenizer_encode(tok, json_string_value(j), json_string_length(j), eo, &ids, &err)) {
            fprintf(stderr, "strata tokenize: %s\n", err.message);
            rc = 1;
        }
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %d" : "%d", ids.ids[i]);
        printf("\n");
        tokenizer_ids_free(&ids);
        json_decref(j);
    }
    free(line);
    tokenizer_free(tok);
    return rc;
}

static void tokenize_usage(FILE *out) {
    fprintf(out, "usage: strata tokenize -m MODEL.gguf [--no-special] [--no-bos] "
                 "[--no-parse-special] [--untrusted OFF:LEN]... [--json] TEXT|- | --batch\n");
}

int cli_tokenize_main(int argc, char **argv) {
    const char *model = NULL, *text_arg = NULL;
    bool json = false, batch = false;
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.parse_special = true;
    struct tokenizer_range ranges[64];
    size_t n_ranges = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--no-special")) {
            eo.add_special = eo.parse_special = false;
        } else if (!strcmp(a, "--no-bos")) {
            eo.add_special = false;
        } else if (!strcmp(a, "--no-parse-special")) {
            eo.parse_special = false;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--batch")) {
            batch = true;
        } else if (!strcmp(a, "--untrusted") && i + 1 < argc) {
            unsigned long long off, len;
            if (n_ranges == 64 || sscanf(argv[++i], "%llu:%llu", &off, &len) != 2) {
                fprintf(stderr, "strata tokenize: --untrusted OFF:LEN (at most 64)\n");
                return 2;
            }
            ranges[n_ranges++] = (struct tokenizer_range){(size_t)off, (size_t)len};
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!text_arg && (a[0] != '-' || !strcmp(a, "-"))) {
            text_arg = a;
        } else {
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || (!text_arg && !batch)) {
        tokenize_usage(stderr);
        return 2;
    }
    if (batch)
        return tokenize_batch(model, &eo);
    eo.untrusted = ranges;
    eo.n_untrusted = n_ranges;
    size_t len = strlen(text_arg);
    char *text = NULL;
    if (!strcmp(text_arg, "-")) {
        text = read_stream(stdin, &len);
        if (!text) {
            fprintf(stderr, "strata tokenize: cannot read stdin\n");
            return 1;
        }
    }
    struct tokenizer *tok = load(model);
    if (!tok) {
        free(text);
        return 1;
    }
    struct tokenizer_ids ids = {0};
    struct strata_error err = {0};
    int rc = tokenizer_encode(tok, text ? text : text_arg, len, &eo, &ids, &err);
    if (rc) {
        fprintf(stderr, "strata tokenize: %s\n", err.message);
    } else if (!json) {
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %d" : "%d", ids.ids[i]);
        printf("\n");
    } else {
        json_t *root = json_object(), *jids = json_array(), *jt = json_array();
        char buf[256];
        for (size_t i = 0; i < ids.n; i++) {
            size_t plen = 0;
            const char *piece = tokenizer_piece(tok, ids.ids[i], &plen);
            int n = tokenizer_token_to_piece(tok, ids.ids[i], true, buf, sizeof(buf));
            json_t *o = json_object();
            json_object_set_new(o, "id", json_integer(ids.ids[i]));
            json_object_set_new(o, "piece", json_text(piece, plen));
            json_object_set_new(o, "text", json_text(buf, n < 0 ? 0 : n > 256 ? 256 : (size_t)n));
            json_array_append_new(jids, json_integer(ids.ids[i]));
            json_array_append_new(jt, o);
        }
        json_object_set_new(root, "ids", jids);
        json_object_set_new(root, "tokens", jt);
        json_dumpf(root, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
        printf("\n");
        json_decref(root);
    }
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
    free(text);
    return rc ? 1 : 0;
}

/* --batch: one line of space-separated ids -> one line of hex bytes. */
static int detokenize_batch(const char *model, const struct tokenizer_decode_opts *o) {
    struct tokenizer *tok = load(model);
    if (!tok)
        return 1;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    struct tokenizer_ids ids = {0};
    while (rc == 0 && getline(&line, &cap, stdin) > 0) {
        ids.n = 0;
        char *p = line, *end;
        for (long v; (v = strtol(p, &end, 10)), end != p; p = end) {
            if (v < 0 || v > INT32_MAX) {
                rc = 2;
                break;
            }
            if (strata_grow((void **)&ids.ids, &ids.cap, ids.n + 1, sizeof *ids.ids) < 0) {
                rc = 1;
                break;
            }
            ids.ids[ids.n++] = (int32_t)v;
        }
        struct strata_error err = {0};
        size_t len = 0;
        char *s = rc ? NULL : tokenizer_decode(tok, ids.ids, ids.n, o, &len, &err);
        if (!s) {
            fprintf(stderr, "strata detokenize: %s\n", rc ? "bad token id" : err.message);
            rc = rc ? rc : 1;
            break;
        }
        for (size_t i = 0; i < len; i++)
            printf("%02x", (unsigned char)s[i]);
        printf("\n");
        free(s);
    }
    tokenizer_ids_free(&ids);
    free(line);
    tokenizer_free(tok);
    return rc;
}

int cli_detokenize_main(int argc, char **argv) {
    const char *model = NULL;
    bool batch = false;
    struct tokenizer_decode_opts dopts = tokenizer_decode_opts_default();
    struct tokenizer_ids ids = {0};
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        char *end;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--special")) {
            dopts.skip_special = false;
        } else if (!strcmp(a, "--keep-space")) {
            dopts.strip_leading_space = false;
        } else if (!strcmp(a, "--clean")) {
            dopts.clean_spaces = true;
        } else if (!strcmp(a, "--batch")) {
            batch = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: strata detokenize -m MODEL.gguf [--special] [--keep-space] [--clean] "
                   "ID... | --batch\n");
            tokenizer_ids_free(&ids);
            return 0;
        } else {
            long v = strtol(a, &end, 10);
            if (end == a || *end || v < 0 || v > INT32_MAX) {
                fprintf(stderr, "strata detokenize: bad token id '%s'\n", a);
                rc = 2;
            } else {
                if (strata_grow((void **)&ids.ids, &ids.cap, ids.n + 1, sizeof *ids.ids))
                    rc = 1;
                else
                    ids.ids[ids.n++] = (int32_t)v;
            }
        }
    }
    if (rc == 0 && !model) {
        fprintf(stderr, "usage: strata detokenize -m MODEL.gguf [--special] ID...\n");
        rc = 2;
    }
    if (rc == 0 && batch) {
        tokenizer_ids_free(&ids);
        return detokenize_batch(model, &dopts);
    }
    struct tokenizer *tok = rc ? NULL : load(model);
    if (rc == 0 && !tok)
        rc = 1;
    if (rc == 0) {
        struct strata_error err = {0};
        size_t len = 0;
        char *s = tokenizer_decode(tok, ids.ids, ids.n, &dopts, &len, &err);
        if (!s) {
            fprintf(stderr, "strata detokenize: %s\n", err.message);
            rc = 1;
        } else {
            fwrite(s, 1, len, stdout);
            free(s);
        }
    }
    tokenizer_free(tok);
    tokenizer_ids_free(&ids);
    return rc;
}
