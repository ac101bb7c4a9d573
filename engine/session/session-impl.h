/* engine/session/session-impl.h: the session module's structs, shared by
 * session-prompt.c (the base, the prompt) and session.c (the step). */
#ifndef STRATA_SESSION_IMPL_H
#define STRATA_SESSION_IMPL_H

#include <pthread.h>

#include "engine/grammar/grammar.h"
#include "engine/session/session.h"

struct chat_template;

struct session_base {
    struct tokenizer *tok;      /* owned */
    struct chat_template *tmpl; /* owned: the GGUF's or ChatML */
    char *tmpl_src;             /* owned: copy of tokenizer.chat_template; NULL for ChatML */
    enum session_template_origin origin;
    char note[600]; /* why not the GGUF's template (a parse error: 512 bytes) */
    char *bos_text; /* owned: vocabulary text of BOS ("" if none) */
    char *eos_text; /* owned: ... of EOS */
    int n_vocab, n_ctx;
    /* the vocabulary of constrained sessions: built by the first one
     * (session_base_grammar_vocab), read-only after; gv_lock guards the build */
    pthread_mutex_t gv_lock;
    struct grammar_vocab *gvocab; /* owned; NULL until a grammar session */
};

/* The base's grammar vocabulary, built on first use (session-grammar.c). */
const struct grammar_vocab *session_base_grammar_vocab(struct session_base *b,
                                                       struct strata_error *err);

struct session {
    const struct session_base *b;   /* borrowed */
    struct sampler *smp;            /* owned */
    struct stop_matcher *stop;      /* owned */
    struct tokenizer_stream *detok; /* owned */
    bool logprobs, ignore_eos;
    bool greedy_only; /* argmax is the whole pick (session_sample) */
    bool stopped;     /* an EOG or a stop sequence ended the text */
    int64_t n_gen;
    size_t text_total; /* bytes the detokenizer produced (logprob text_offset) */
    char *buf;         /* (buf_cap) owned: the text of a flush */
    size_t buf_len, buf_cap;
    struct session_logprob lp;  /* the last step's entry */
    struct grammar_matcher *gm; /* owned; NULL: unconstrained */
    uint32_t *gmask;            /* ((n_vocab+31)/32) allowed tokens of the next pick */
    float *glogits;             /* (n_vocab) the logits with disallowed ones at -inf */
};

/* Constrained sampling and stepping (session-grammar.c). */
int session_grammar_init(struct session *s, const struct grammar *g, struct strata_error *err);
void session_grammar_free(struct session *s);
int session_grammar_sample(struct session *s, const float *logits, struct sampler_result *out,
                           struct strata_error *err);

#endif
