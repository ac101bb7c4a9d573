/* tests/peers/tok-bytes.c: tests-only helper for tests/peers/tok-cross.mjs:
 * tokenizes raw byte strings, which JSON lines (strata tokenize --batch)
 * cannot carry when they are not valid UTF-8.
 *
 *   tok-bytes VOCAB.gguf < hex-lines > results
 *
 * Input: one string a line, hex-encoded bytes ("" is the empty string).
 * Output, one line per input: the ids (no BOS/EOS, special-token text not
 * parsed) separated by spaces, a tab, then the hex of the bytes the ids
 * decode back to (special tokens kept, no leading-space strip). A line
 * "error: MESSAGE" reports an encode/decode error for that input. Exit 1 if
 * the vocabulary does not load or the input is not hex.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tok-bytes VOCAB.gguf < hex-lines\n");
        return 2;
    }
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(argv[1], &err);
    struct tokenizer *tok = f ? tokenizer_init_gguf(f, &err) : NULL;
    gguf_close(f);
    if (!tok) {
        fprintf(stderr, "tok-bytes: %s: %s\n", argv[1], err.message);
        return 1;
    }
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    eo.parse_special = false;
    struct tokenizer_decode_opts dopts = tokenizer_decode_opts_default();
    dopts.skip_special = false;
    dopts.strip_leading_space = false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n % 2) {
            fprintf(stderr, "tok-bytes: odd hex line\n");
            rc = 1;
            break;
        }
        size_t len = (size_t)n / 2;
        char *bytes = malloc(len + 1);
        bool ok = bytes != NULL;
        for (size_t i = 0; ok && i < len; i++) {
            int hi = hexval(line[2 * i]), lo = hexval(line[2 * i + 1]);
            ok = hi >= 0 && lo >= 0;
            if (ok)
                bytes[i] = (char)(hi << 4 | lo);
        }
        if (!ok) {
            fprintf(stderr, "tok-bytes: bad hex\n");
            free(bytes);
            rc = 1;
            break;
        }
        struct tokenizer_ids ids = {0};
        if (tokenizer_encode(tok, bytes, len, &eo, &ids, &err) < 0) {
            printf("error: %s\n", err.message);
        } else {
            size_t dlen = 0;
            char *text = tokenizer_decode(tok, ids.ids, ids.n, &dopts, &dlen, &err);
            for (size_t i = 0; i < ids.n; i++)
                printf(i ? " %d" : "%d", ids.ids[i]);
            putchar('\t');
            if (text) {
                for (size_t i = 0; i < dlen; i++)
                    printf("%02x", (unsigned char)text[i]);
            } else {
                printf("error: %s", err.message);
            }
            putchar('\n');
            free(text);
        }
        tokenizer_ids_free(&ids);
        free(bytes);
    }
    free(line);
    tokenizer_free(tok);
    return rc;
}
