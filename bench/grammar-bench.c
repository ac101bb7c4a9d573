/* bench/grammar-bench.c: the cost of the JSON-schema token mask (not a
 * test; run by hand on a release build).
 *
 *   grammar-bench VOCAB.gguf [RUNS]
 *
 * On the vocabulary of VOCAB.gguf (e.g. Llama 3's 128,256 tokens, made with
 * `strata gguf vocab-from-hf`), with a built-in schema of the usual shape
 * (an object with strings, an integer, an enum, an array of objects):
 * - build: the vocabulary trie (once per model);
 * - doc: a document that fits the schema, tokenized by the model's own
 *   tokenizer, replayed token by token through a fresh matcher per run:
 *   mask time per token (mean, p50, p99, max; the cache starts empty);
 * - random: session_sample with and without the grammar on random logits
 *   (temperature 1) until the grammar ends: the per-token difference is what
 *   constrained sampling costs a decode step (mask + masked copy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/gguf/gguf.h"
#include "engine/grammar/grammar.h"
#include "engine/session/session.h"

static const char *schema_text =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"bio\":{\"type\":\"string\"},"
    "\"items\":{\"type\":\"array\",\"maxItems\":8,\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
    "\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"qty\",\"price\"],"
    "\"additionalProperties\":false}}},"
    "\"required\":[\"name\",\"age\",\"email\",\"role\",\"bio\",\"items\"],"
    "\"additionalProperties\":false}";

static const char *doc =
    "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.org\", \"role\": "
    "\"admin\", \"bio\": \"Mathematician and writer, known for her work on Charles Babbage's "
    "proposed mechanical general-purpose computer, the Analytical Engine. She was the first to "
    "recognise that the machine had applications beyond pure calculation.\", \"items\": "
    "[{\"sku\": \"AE-001\", \"qty\": 2, \"price\": 19.99}, {\"sku\": \"NOTE-G\", \"qty\": 1, "
    "\"price\": 4.5}]}";

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct grammar_vocab *vocab_of(const struct tokenizer *tok, int n) {
    char **pieces = calloc((size_t)n, sizeof *pieces);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    enum grammar_token_kind *kinds = calloc((size_t)n, sizeof *kinds);
    char buf[GRAMMAR_PIECE_MAX];
    for (int i = 0; i < n; i++) {
        kinds[i] = tokenizer_is_eog(tok, i) ? GRAMMAR_TOKEN_EOG
                   : tokenizer_is_special(tok, i) || tokenizer_is_control(tok, i)
                       ? GRAMMAR_TOKEN_NEVER
                       : GRAMMAR_TOKEN_TEXT;
        int k = tokenizer_token_to_piece(tok, i, false, buf, sizeof buf);
        if (k > 0 && k <= (int)sizeof buf) {
            pieces[i] = malloc((size_t)k);
            memcpy(pieces[i], buf, (size_t)k);
            lens[i] = (uint32_t)k;
        }
    }
    struct strata_error err = {0};
    struct grammar_vocab_params vp = {n, (const char *const *)pieces, lens, kinds};
    double t0 = strata_now();
    struct grammar_vocab *v = grammar_vocab_init(&vp, &err);
    printf("build: vocabulary trie of %d tokens in %.1f ms\n", n, (strata_now() - t0) * 1e3);
    for (int i = 0; i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    free(kinds);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf [RUNS]\n", argv[0]);
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(argv[1], &err);
    if (!f) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    struct session_base_params bp = session_base_params_default();
    bp.gguf = f;
    bp.n_vocab = 1;
    bp.n_ctx = 4096;
    struct session_base *b0 = session_base_init(&bp, &err);
    if (!b0) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    bp.n_vocab = tokenizer_n_vocab(session_base_tokenizer(b0));
    session_base_free(b0);
    struct session_base *b = session_base_init(&bp, &err);
    gguf_close(f);
    const struct tokenizer *tok = session_base_tokenizer(b);
    int n = bp.n_vocab;

    json_t *schema = json_loads(schema_text, 0, NULL);
    struct grammar_builder *gb = grammar_builder_init(&err);
    double t0 = strata_now();
    int root = grammar_json_schema(gb, schema, &err);
    struct grammar *g = root >= 0 ? grammar_build(gb, root, &err) : NULL;
    printf("compile: schema -> %d nodes in %.3f ms\n", grammar_n_nodes(g),
           (strata_now() - t0) * 1e3);
    grammar_builder_free(gb);
    json_decref(schema);
    if (!g) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    struct grammar_vocab *v = vocab_of(tok, n);

    /* doc: replay the document's own tokens */
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    struct tokenizer_ids ids = {0};
    if (tokenizer_add_space_prefix(tok)) /* its first token would be " {", which no grammar takes */
        printf("doc: skipped (a SentencePiece vocabulary adds a space before the document)\n");
    else
        tokenizer_encode(tok, doc, strlen(doc), &eo, &ids, &err);
    uint32_t *bits = malloc(sizeof *bits * (((size_t)n + 31) / 32));
    double *ts = malloc(sizeof *ts * ids.n * (size_t)runs);
    size_t nt = 0;
    for (int r = 0; r < runs; r++) {
        struct grammar_matcher *m = grammar_matcher_init(g, v, &err);
        for (size_t i = 0; i < ids.n; i++) {
            double a = strata_now();
            int c = grammar_matcher_mask(m, bits, &err);
            ts[nt++] = (strata_now() - a) * 1e6;
            if (getenv("GB_DEBUG") && ts[nt - 1] > 300) {
                char pb[64];
                int pl = tokenizer_token_to_piece(tok, ids.ids[i], false, pb, sizeof pb);
                fprintf(stderr, "slow %.0f us at token %zu '%.*s' (%d allowed)\n", ts[nt - 1], i,
                        pl, pb, c);
            }
            if (c <= 0 || !((bits[ids.ids[i] >> 5] >> (ids.ids[i] & 31)) & 1u)) {
                fprintf(stderr, "doc token %zu (%d) not allowed\n", i, ids.ids[i]);
                return 1;
            }
            grammar_matcher_accept(m, ids.ids[i], &err);
        }
        grammar_matcher_free(m);
    }
    double sum = 0;
    for (size_t i = 0; i < nt; i++)
        sum += ts[i];
    qsort(ts, nt, sizeof *ts, cmp_d);
    if (nt)
        printf(
            "doc: %zu tokens x %d runs: mask mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n",
            ids.n, runs, sum / (double)nt, ts[nt / 2], ts[nt * 99 / 100], ts[nt - 1]);

    /* random: the sampling step with and without the grammar */
    float *logits = malloc(sizeof *logits * (size_t)n);
    struct strata_rng rng;
    strata_rng_seed(&rng, 1);
    double tg = 0, tu = 0;
    long steps = 0;
    for (int r = 0; r < runs; r++) {
        struct session_params sp = session_params_default();
        sp.sampler.seed = (uint64_t)r;
        struct session *su = session_init(b, &sp, &err);
        sp.grammar = g;
        struct session *sg = session_init(b, &sp, &err);
        for (int step = 0; step < 300; step++) {
            for (int i = 0; i < n; i++)
                logits[i] = (float)(strata_rng_uniform(&rng) * 10.0);
            struct sampler_result ru, rg;
            double a = strata_now();
            session_sample(su, logits, &ru, &err);
            double c = strata_now();
            if (session_sample(sg, logits, &rg, &err) < 0) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
            double e = strata_now();
            tu += c - a;
            tg += e - c;
            steps++;
            struct session_delta d;
            session_step(sg, &rg, &d, &err);
            if (d.stop)
                break;
        }
        session_free(su);
        session_free(sg);
    }
    printf("random: %ld steps: sample %.1f us unconstrained, %.1f us with the grammar (+%.1f us a "
           "token)\n",
           steps, tu / (double)steps * 1e6, tg / (double)steps * 1e6,
           (tg - tu) / (double)steps * 1e6);
    free(logits);
    free(ts);
    free(bits);
    tokenizer_ids_free(&ids);
    grammar_vocab_free(v);
    grammar_free(g);
    session_base_free(b);
    return 0;
}
