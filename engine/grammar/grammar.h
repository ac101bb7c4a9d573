/* engine/grammar/grammar.h: constrained decoding. A grammar (built from
 * literals, sequences, alternatives, repeats and JSON primitives, or
 * compiled from a JSON Schema) is matched byte by byte; a matcher turns it
 * into a token mask over a model's vocabulary.
 *
 *   struct grammar_builder *b = grammar_builder_init(&err);
 *   int n = grammar_json_schema(b, schema, &err);      // < 0: err names the keyword
 *   struct grammar *g = grammar_build(b, n, &err);     // immutable, shareable
 *   grammar_builder_free(b);
 *
 *   struct grammar_vocab *v = grammar_vocab_init(&vp, &err);  // once per model
 *   struct grammar_matcher *m = grammar_matcher_init(g, v, &err);  // per generation
 *   grammar_matcher_mask(m, bits, &err);   // bits: (n_vocab+31)/32 words, 1 = allowed
 *   ... pick a token whose bit is set ...
 *   grammar_matcher_accept(m, token, &err);
 *   if (grammar_matcher_must_end(m)) ... stop ...
 *   grammar_matcher_free(m); grammar_free(g); grammar_vocab_free(v);
 *
 * Language: a node matches bytes. grammar_lit matches its bytes exactly;
 * seq matches its nodes one after the other; alt any one of them; repeat
 * between min and max copies of its node. The JSON nodes produce compact
 * JSON with bounded whitespace: after '{', '[', ':' and ',' and before '}'
 * and ']' at most one of "", " ", or "\n" followed by up to 16 spaces or
 * tabs (so a random-weight model cannot run away in whitespace). Strings are
 * valid JSON strings of valid UTF-8 (no raw control bytes; escapes allowed
 * except lone surrogates and \u0000, which downstream C code cannot hold);
 * numbers are valid JSON numbers with at most 18 integer digits, 18 fraction
 * digits and 2 exponent digits (so the value
 * stays a finite double); integers at most 18 digits.
 *
 * JSON Schema (grammar_json_schema): type (object, array, string, integer,
 * number, boolean, null, and arrays of those), properties / required /
 * additionalProperties, items, minItems / maxItems, enum, const, minLength /
 * maxLength (code points), minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum on integers (exact), $ref to "#", "#/$defs/..." and
 * "#/definitions/..." (any JSON pointer into the schema, recursion allowed),
 * anyOf, and oneOf read as anyOf (the output matches at least one branch; a
 * schema whose branches overlap may then match several). Objects emit their
 * properties in the order of `properties`; an optional property may be left
 * out. additionalProperties false, true or absent all generate only the
 * listed properties (a valid subset of what the schema allows); an object
 * schema without `properties` takes additionalProperties as the schema of
 * every value (any JSON value when it is absent or true). Annotations
 * (description, title, default, examples, $schema, $id, $comment,
 * deprecated, readOnly, writeOnly) are ignored; every other keyword gives
 * STRATA_E_UNSUPPORTED naming it and where it is. Limits (STRATA_E_LIMIT):
 * 64 levels of schema nesting, 4096 subschemas, 64 KiB of enum/const text,
 * 1024 enum values or anyOf branches, 256 optional properties per object.
 *
 * Ownership: builder, grammar, vocab and matcher are owned by their creator
 * (the *_free functions; NULL is a no-op). A grammar and a vocab are
 * immutable after creation and may be shared by any number of threads;
 * a matcher borrows both (they must outlive it) and belongs to one thread
 * at a time. The schema json_t is borrowed for the call.
 */
#ifndef STRATA_GRAMMAR_H
#define STRATA_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

/* ---- building a grammar ---------------------------------------------------- */

struct grammar_builder; /* owned: grammar_builder_free() */
struct grammar_builder *grammar_builder_init(struct strata_error *err);
void grammar_builder_free(struct grammar_builder *b);
/* Node constructors: return a node id >= 0, or a negative STRATA_E_* with err. */
int grammar_lit(struct grammar_builder *b, const char *text, size_t len,
                struct strata_error *err);                                    /* exact bytes */
int grammar_json_value(struct grammar_builder *b, struct strata_error *err);  /* any JSON value */
int grammar_json_object(struct grammar_builder *b, struct strata_error *err); /* any JSON object */
/* A JSON Schema (borrowed for the call). Unsupported keywords give
 * STRATA_E_UNSUPPORTED with a message naming the keyword and its JSON
 * pointer ("JSON schema keyword 'patternProperties' is not supported (at
 * /properties/a)"); an invalid schema (wrong types, dangling $ref, min >
 * max) gives STRATA_E_INVALID naming where. */
int grammar_json_schema(struct grammar_builder *b, const json_t *schema, struct strata_error *err);
int grammar_seq(struct grammar_builder *b, const int *nodes, int n, struct strata_error *err);
int grammar_alt(struct grammar_builder *b, const int *nodes, int n, struct strata_error *err);
int grammar_repeat(struct grammar_builder *b, int node, int min, int max /* -1: unbounded */,
                   struct strata_error *err);
/* Freezes the builder's graph rooted at `root` into an immutable,
 * thread-shareable grammar. STRATA_E_INVALID for a graph that can loop
 * without consuming a byte (left recursion, an unbounded repeat of a node
 * that can match nothing). owned: grammar_free() */
struct grammar *grammar_build(struct grammar_builder *b, int root, struct strata_error *err);
void grammar_free(struct grammar *g);
int grammar_n_nodes(const struct grammar *g);

/* ---- a model's vocabulary ---------------------------------------------------- */

enum grammar_token_kind {
    GRAMMAR_TOKEN_TEXT = 0, /* its bytes may appear in constrained text */
    GRAMMAR_TOKEN_EOG,      /* end of generation: allowed only where the grammar may end */
    GRAMMAR_TOKEN_NEVER,    /* control/special/unused: never allowed */
};

struct grammar_vocab_params {
    int n_vocab;                          /* >= 1 */
    const char *const *pieces;            /* borrowed for init: (n_vocab) the bytes of each token */
    const uint32_t *lens;                 /* borrowed for init: (n_vocab) bytes of each piece */
    const enum grammar_token_kind *kinds; /* borrowed for init: (n_vocab) */
};

#define GRAMMAR_PIECE_MAX 1024 /* longer pieces are never allowed (no vocabulary has one) */

/* Sorts the pieces into a byte trie (built once per model: 79-142 ms for
 * Llama 3's 128,256 tokens on a 2-vCPU Xeon VM, bench/grammar-bench). TEXT tokens with an empty
 * piece count as NEVER. owned: grammar_vocab_free() */
struct grammar_vocab *grammar_vocab_init(const struct grammar_vocab_params *p,
                                         struct strata_error *err);
void grammar_vocab_free(struct grammar_vocab *v);
int grammar_vocab_n(const struct grammar_vocab *v);

/* ---- matching --------------------------------------------------------------- */

struct grammar_matcher; /* owned: grammar_matcher_free() */
struct grammar_matcher *grammar_matcher_init(const struct grammar *g, const struct grammar_vocab *v,
                                             struct strata_error *err);
void grammar_matcher_free(struct grammar_matcher *m);
/* Sets bit t of bits ((n_vocab+31)/32 words, overwritten) for every token t
 * whose bytes keep the output a prefix of a sentence of the grammar, and for
 * EOG tokens where the grammar can end. Returns the number of allowed
 * tokens (0: nothing can follow), or STRATA_E_NOMEM. */
int grammar_matcher_mask(struct grammar_matcher *m, uint32_t *bits, struct strata_error *err);
/* Advances by one token. STRATA_E_INVALID (state unchanged) when the token
 * is not allowed; STRATA_E_RANGE outside the vocabulary. An EOG token is
 * accepted where the grammar can end and then ends it. */
int grammar_matcher_accept(struct grammar_matcher *m, int32_t token, struct strata_error *err);
/* Advances by bytes (tests, prefills): STRATA_E_INVALID (state unchanged)
 * when they do not continue a sentence. */
int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *bytes, size_t len,
                                 struct strata_error *err);
bool grammar_matcher_can_end(const struct grammar_matcher *m);  /* a complete sentence */
bool grammar_matcher_must_end(const struct grammar_matcher *m); /* ... and nothing may follow */
void grammar_matcher_reset(struct grammar_matcher *m);          /* back to the start */

/* Whole-text check (tests): 1 a complete sentence, 0 a proper prefix of
 * one, STRATA_E_INVALID neither, STRATA_E_NOMEM. */
int grammar_match(const struct grammar *g, const char *bytes, size_t len, struct strata_error *err);

#endif
