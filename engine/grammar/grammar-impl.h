/* engine/grammar/grammar-impl.h: the grammar module's internals, shared by
 * grammar.c (builder, build), grammar-json.c (JSON primitives, schema
 * compiler), grammar-match.c (the byte matcher) and grammar-mask.c (the
 * vocabulary trie and the token mask).
 *
 * Execution model: a matcher state is a set of threads; a thread is a stack
 * of frames (persistent: frames are immutable and share their parents), the
 * top frame always a terminal waiting for a byte (LIT, or one of the JSON
 * terminals), or the ACCEPT marker (the stack emptied: a complete sentence).
 * Non-terminals are expanded on the way: SEQ pushes its next child, ALT
 * forks, REPEAT forks into "one more" and "done".
 */
#ifndef STRATA_GRAMMAR_IMPL_H
#define STRATA_GRAMMAR_IMPL_H

#include "engine/grammar/grammar.h"

enum gnode_type {
    GN_LIT, /* bytes lit_off..lit_off+n */
    GN_SEQ, /* children kid_off..kid_off+n */
    GN_ALT, /* children kid_off..kid_off+n */
    GN_REP, /* child kids[kid_off], lo..hi copies (hi -1: unbounded) */
    GN_REF, /* builder only: forwards to `lo` (a node id set later); gone after build */
    GN_WS,  /* bounded JSON whitespace (see grammar.h) */
    GN_STR, /* a JSON string, lo..hi code points (hi -1: unbounded) */
    GN_NUM, /* a JSON number */
    GN_INT, /* a JSON integer in [ilo, ihi] */
};

struct gnode {
    uint8_t type; /* enum gnode_type */
    uint32_t n;   /* bytes (LIT) or children (SEQ, ALT) */
    uint32_t kid_off, lit_off;
    int32_t lo, hi;   /* REP counts, STR lengths, REF target */
    int64_t ilo, ihi; /* INT bounds */
};

#define GRAMMAR_INT_LIM 999999999999999999LL /* 18 digits: fits int64 with room */

struct grammar_builder {
    struct gnode *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *kids;
    size_t n_kids, cap_kids;
    char *lits;
    size_t n_lits, cap_lits;
    int json_value, json_object; /* memoised nodes, -1 until made */
    int ws;                      /* the shared GN_WS node, -1 until made */
};

struct grammar {
    struct gnode *nodes; /* (n_nodes) no GN_REF */
    int n_nodes;
    int32_t *kids;
    char *lits;
    int root;
    bool *nullable; /* (n_nodes) can match "" */
};

/* Builder internals (grammar.c). */
int gb_node(struct grammar_builder *b, const struct gnode *nd, struct strata_error *err);
int gb_ref(struct grammar_builder *b, struct strata_error *err); /* a forward reference */
void gb_ref_set(struct grammar_builder *b, int ref, int target);
int gb_ws(struct grammar_builder *b, struct strata_error *err);
int gb_str(struct grammar_builder *b, int min_len, int max_len, struct strata_error *err);
int gb_num(struct grammar_builder *b, struct strata_error *err);
int gb_int(struct grammar_builder *b, int64_t lo, int64_t hi, struct strata_error *err);
/* seq of up to 8 nodes (convenience): ids < 0 are skipped */
int gb_seq(struct grammar_builder *b, struct strata_error *err, int n, ...);
int gb_lit_str(struct grammar_builder *b, const char *s, struct strata_error *err);

/* Terminal steps (grammar-match.c): a terminal frame's state is (aux, val). */
struct gframe {
    int32_t node;
    uint32_t aux;
    int64_t val;
    int32_t parent; /* frame index, -1: bottom */
    int32_t depth;  /* frames below and this one */
};

#define GRAMMAR_MAX_DEPTH 400 /* frames of one stack: ~130 levels of JSON nesting */
/* Threads of one state; more are dropped (the output stays valid, only less
 * of the grammar is reachable). Each open alternative is a thread: an
 * object's optional properties (the schema compiler allows 256) and enum /
 * anyOf branches (1024). Duplicates are merged while a state has fewer than
 * GRAMMAR_DEDUP threads (quadratic: beyond that the cap bounds the work). */
#define GRAMMAR_MAX_THREADS 1024
#define GRAMMAR_DEDUP 64
#define GRAMMAR_ACCEPT (-1) /* the thread of a complete sentence */

/* Frames and thread lists of a matcher: the committed state first, the
 * temporaries of a mask or an accept after it (reset by moving n back). */
struct garena {
    struct gframe *f; /* (n) frames */
    size_t n, cap;
    int32_t *th; /* thread lists: top frame index or GRAMMAR_ACCEPT */
    size_t n_th, cap_th;
    bool oom;
};

/* Advances the n threads at a->th[in_off..] by byte c, appending the new
 * threads to a->th; returns their count (0: dead). */
int gm_advance(const struct grammar *g, struct garena *a, size_t in_off, int n, uint8_t c);
/* The start state's threads, appended to a->th; returns their count. */
int gm_start(const struct grammar *g, struct garena *a);

/* ---- vocabulary and matcher (grammar-mask.c, grammar-match.c) -------------- */

struct vnode {
    uint32_t end;    /* index past this node's subtree (preorder) */
    uint32_t tok_lo; /* tokens whose piece ends here: sorted[tok_lo..tok_hi) */
    uint32_t tok_hi;
    uint16_t depth; /* bytes from the root, >= 1 */
    uint8_t byte;
};

/* A byte trie over some of the TEXT tokens. */
struct vtrie {
    int32_t *sorted; /* (n_sorted) token ids by piece bytes */
    int n_sorted;
    struct vnode *nodes; /* (n_nodes) preorder */
    uint32_t n_nodes;
    int max_depth;
};

struct grammar_vocab {
    int n_vocab;
    uint8_t *kind; /* (n_vocab) enum grammar_token_kind */
    uint32_t *off; /* (n_vocab + 1) piece offsets into bytes */
    char *bytes;   /* every piece */
    int32_t *eog;  /* (n_eog) */
    int n_eog;
    struct vtrie all;  /* every TEXT token */
    struct vtrie rest; /* the TEXT tokens that are not clean (below) */
    /* "Clean" tokens: whole UTF-8 characters, none of them '"', '\' or a
     * control byte: inside a JSON string body they are always allowed while
     * there is room for their code points, whatever the grammar around. */
    int32_t *clean;      /* (n_clean) ids by code point count */
    uint32_t *clean_off; /* (max_clean_cp + 2): clean[clean_off[k]..] have k code points */
    int n_clean, max_clean_cp;
};

#define GRAMMAR_CACHE 16 /* masks kept per matcher, by state */

struct gcache_entry {
    uint8_t *key; /* owned: the serialized state */
    size_t key_len;
    uint64_t hash;
    uint32_t *bits; /* owned: (n_vocab+31)/32 */
    int count;
    uint64_t used;
};

struct grammar_matcher {
    const struct grammar *g;       /* borrowed */
    const struct grammar_vocab *v; /* borrowed; may be NULL (grammar_match) */
    struct garena a;               /* committed frames [0, a.n), threads th[0, n_th) */
    int n_th;
    bool ended;   /* an EOG token was accepted */
    uint8_t *key; /* the committed state serialized (cache key) */
    size_t key_len, key_cap;
    uint64_t hash;
    struct gcache_entry cache[GRAMMAR_CACHE];
    uint64_t tick;
    /* scratch of the mask walk: per trie depth the thread list and marks */
    size_t *lv_off, *lv_f, *lv_t;
    int *lv_n;
};

/* STR terminal state bits (aux) */
#define STR_PHASE(a) ((a)&15u)       /* 0 open, 1 body, 2 '\', 3..6 \u hex i, 7 closed */
#define STR_REM(a) (((a) >> 4) & 7u) /* UTF-8 continuation bytes still due */
#define STR_CLS(a) (((a) >> 7) & 7u) /* range of the next continuation byte */
#define STR_SURR (1u << 10)          /* \u first hex digit was d/D */
#define STR_ZERO (1u << 11)          /* \u hex digits so far all '0' */
#define STR_MAKE(ph, rem, cls, flags) ((ph) | ((rem) << 4) | ((cls) << 7) | (flags))

/* Re-serializes the committed state into m->key / m->hash. */
int gm_rekey(struct grammar_matcher *m);

#endif
