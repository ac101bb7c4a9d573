/* engine/session/session.h: the one prompt and generation path of `strata
 * run` and the server. A session_base holds what every generation of one
 * model shares (tokenizer, chat template, context size); a session is one
 * generation: its sampler, streaming detokenizer, stop matcher and logprob
 * entries, fed one sampled token at a time.
 *
 *   struct session_base_params bp = session_base_params_default();
 *   bp.gguf = model_gguf(m);                  // borrowed for the call
 *   bp.n_vocab = model_n_vocab(m);            // logits row length
 *   bp.n_ctx = model_n_ctx_max(m);            // the per-sequence context
 *   struct session_base *b = session_base_init(&bp, &err);
 *
 *   struct session_input in = {.messages = msgs};      // chat, or {.text = p, .len = n}
 *   struct tokenizer_ids ids = {0};
 *   if (session_prompt(b, &in, &ids, &err) < 0) ...   // CONTEXT_LENGTH, TEMPLATE, ...
 *
 *   struct session_params sp = session_params_default();
 *   sp.sampler.temperature = 0; sp.stops = stops; sp.n_stops = 1;
 *   struct session *s = session_init(b, &sp, &err);
 *   for (;;) {                                 // after each model_forward:
 *       struct sampler_result r;
 *       if (session_sample(s, logits, &r, &err) < 0) break;
 *       struct session_delta d;
 *       if (session_step(s, &r, &d, &err) < 0) break;
 *       fwrite(d.text, 1, d.len, stdout);      // complete UTF-8, stop text held back
 *       if (d.stop) break;                     // EOG token or stop sequence
 *       feed r.token to the model ...
 *   }
 *   session_flush(s, &d);                      // at a length limit: the held-back rest
 *   session_free(s); tokenizer_ids_free(&ids); session_base_free(b);
 *
 * Prompt (session_prompt):
 * - Template: the GGUF's tokenizer.chat_template; ChatML when the key is
 *   absent or does not parse (as llama.cpp falls back);
 *   session_base_template_origin says which. Rendered with
 *   add_generation_prompt, bos_token / eos_token the vocabulary text of the
 *   model's BOS / EOS, and every string from the messages untrusted: the
 *   encoder recognises control-token text only in the template's own bytes
 *   (template.h, tokenizer.h), so a user cannot type "<|im_end|>" into a
 *   turn boundary.
 * - Raw text (completions, `strata run -p`): encoded as is, special-token
 *   text not recognised.
 * - BOS: the encoder adds one where tokenizer.ggml.add_bos_token says so;
 *   a template that writes bos_token itself then yields two, and the second
 *   is dropped (one BOS, as llama.cpp keeps after its warning). Same rule
 *   for raw text.
 * - Checks: no tokens gives STRATA_E_INVALID; n >= n_ctx gives
 *   STRATA_E_CONTEXT_LENGTH (at least one position must be left to
 *   generate), with OpenAI's message.
 *
 * Step (session_step), in one call for the sampled token:
 *   accept into the penalty window -> end of generation? (EOG token, unless
 *   ignore_eos: then d.stop = SESSION_STOP_EOG and d.text is what the
 *   detokenizer and the stop matcher still held) -> streaming detokenizer
 *   (complete UTF-8 only; a character split over byte tokens comes out
 *   whole with the token that completes it) -> the logprob entry (the token's
 *   bytes as the model spells them, its logprob, the top alternatives; the
 *   byte offset of its text) -> the stop matcher (text that may still begin
 *   a stop sequence is held back; on a match d.stop = SESSION_STOP_SEQUENCE
 *   and d.text ends right before the stop string).
 * The EOG token itself gives no logprob entry and no text (OpenAI's and
 * llama-server's responses end before it).
 *
 * Ownership: a session_base owns its tokenizer and template; a session
 * borrows its base (free sessions first). d.text and d.logprob are
 * borrowed from the session until its next call.
 * Threading: a session_base is immutable after init: session_prompt may run
 * on any number of threads at once (the server's prep threads). A session
 * belongs to one thread at a time; session_sample and session_step of one
 * session may run on different threads one after the other (the server
 * samples on pool workers and steps on the scheduler thread).
 */
#ifndef STRATA_SESSION_H
#define STRATA_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/sample/sampler.h"
#include "engine/text/tokenizer.h"

struct gguf_file;
struct grammar;

/* ---- what every session of one model shares ----------------------------- */

struct session_base_params {
    const struct gguf_file *gguf; /* borrowed for init: tokenizer.* and tokenizer.chat_template */
    int n_vocab;                  /* logits row length (model_n_vocab), >= 1 */
    int n_ctx;                    /* per-sequence context in tokens, >= 1 */
    /* borrowed for init (copied): a chat template used instead of the GGUF's
     * tokenizer.chat_template (tests, a --chat-template option); NULL = the GGUF's */
    const char *chat_template;
};
struct session_base_params session_base_params_default(void);

enum session_template_origin {
    SESSION_TEMPLATE_GGUF,              /* tokenizer.chat_template */
    SESSION_TEMPLATE_CHATML_ABSENT,     /* no tokenizer.chat_template: ChatML */
    SESSION_TEMPLATE_CHATML_UNPARSABLE, /* it did not parse: ChatML (see the note) */
};

struct session_base;

/* Builds the tokenizer and picks the template. NULL and err on a bad
 * vocabulary (tokenizer_init_gguf's errors) or bad params.
 * owned: free with session_base_free() */
struct session_base *session_base_init(const struct session_base_params *params,
                                       struct strata_error *err);
void session_base_free(struct session_base *b); /* NULL is a no-op */

const struct tokenizer *session_base_tokenizer(const struct session_base *b); /* borrowed */
int session_base_n_ctx(const struct session_base *b);
int session_base_n_vocab(const struct session_base *b);
enum session_template_origin session_base_template_origin(const struct session_base *b);
/* Why the GGUF's template was not used ("" when it was): static or owned
 * by b, e.g. "tokenizer.chat_template: line 1, column 4: ...". */
const char *session_base_template_note(const struct session_base *b);
/* The source of the template in use (the GGUF's or ChatML), borrowed from b:
 * toolcall_detect reads the tool-call family from it. */
const char *session_base_template_source(const struct session_base *b, size_t *len);
/* A token to run when any will do (the warm-up step): BOS, else 0. */
int32_t session_base_warmup_token(const struct session_base *b);

/* ---- the prompt ------------------------------------------------------------ */

struct session_input {
    const json_t *messages;   /* borrowed: chat messages (array of {role, content}); or NULL */
    const char *text;         /* borrowed: raw prompt text, used when messages is NULL */
    size_t len;               /* bytes of text (need not be NUL-terminated) */
    const json_t *tools;      /* borrowed: the template's `tools` (chat); NULL = none */
    const json_t *extra_vars; /* borrowed: object of extra template variables
                                 (chat_template_kwargs); NULL = none */
    /* Assistant prefill: the last message is an assistant's whose content
     * the reply continues. Rendered without add_generation_prompt and cut
     * right after that message's content (the template's end of turn
     * removed, as llama.cpp's server does); when the template changes the
     * content so it cannot be found, the messages before it are rendered
     * with add_generation_prompt and the content appended. */
    bool continue_last;
};

/* The context check of every prompt: 0 for 1 <= n_prompt < n_ctx, else
 * STRATA_E_INVALID (empty) or STRATA_E_CONTEXT_LENGTH (OpenAI's message).
 * For prompts given as ids (`strata run --ids`). */
int session_check_prompt(const struct session_base *b, size_t n_prompt, struct strata_error *err);

/* Renders (chat) and encodes the prompt with the BOS rule, and checks it
 * against the context (see above). Appends to *out ({0} or a list the
 * caller owns: tokenizer_ids_free); on failure *out holds no new ids.
 * Errors: STRATA_E_TEMPLATE / STRATA_E_LIMIT (the template), STRATA_E_INVALID
 * (no tokens, NULL input), STRATA_E_CONTEXT_LENGTH, STRATA_E_NOMEM. */
int session_prompt(const struct session_base *b, const struct session_input *in,
                   struct tokenizer_ids *out, struct strata_error *err);

/* The text session_prompt encodes for a chat input (in->messages set):
 * *text owned (free()), NUL-terminated, *len bytes. Errors as session_prompt's
 * template errors. For tests and debugging: the server's prompt, exactly. */
int session_render(const struct session_base *b, const struct session_input *in, char **text,
                   size_t *len, struct strata_error *err);

/* ---- one generation -------------------------------------------------------- */

#define SESSION_PIECE_MAX 256 /* bytes of one token kept for its logprob entry (longer: cut) */

struct session_params {
    struct sampler_params sampler; /* copied; sampler.bias borrowed for init only */
    const char *const *stops;      /* borrowed for init (copied): stop sequences, UTF-8 */
    int n_stops;                   /* 0..SAMPLER_MAX_STOPS */
    bool logprobs;                 /* fill d.logprob, with sampler.n_top_logprobs alternatives;
                                      sets sampler.want_logprob. default false */
    bool ignore_eos;               /* EOG tokens end nothing (strata run --ignore-eos) */
    /* Drop the first token's leading space on SentencePiece models
     * (tokenizer_decode_opts.strip_leading_space). Default false: generated
     * text continues the prompt, as llama-server's per-token pieces do;
     * `strata run` prints it as llama-cli does (true). */
    bool strip_leading_space;
    /* Control tokens give their text (tokenizer_decode_opts.skip_special
     * false): tool-call and reasoning markers such as [TOOL_CALLS] or
     * <|python_tag|> are control tokens the output parser must see. Default false. */
    bool keep_special;
    /* Constrained decoding (engine/grammar): session_sample only picks tokens
     * that keep the output a prefix of a sentence of the grammar; an EOG token
     * only where the grammar can end (it then ends the text, ignore_eos or not); when nothing else
     * may follow, the step ends the generation as an EOG stop. At a length limit the text is an
     * incomplete prefix. Logprobs are those of the masked distribution. */
    const struct grammar *grammar; /* borrowed, must outlive the session; NULL = unconstrained */
};
/* Sampler defaults (sampler_params_default), no stops, no logprobs. */
struct session_params session_params_default(void);

enum session_stop {
    SESSION_STOP_NONE = 0,
    SESSION_STOP_EOG,      /* an end-of-generation token (OpenAI finish_reason "stop") */
    SESSION_STOP_SEQUENCE, /* a stop sequence completed ("stop") */
};

/* One token as the model spells it (tokenizer_token_to_piece, special
 * tokens included): bytes may be part of a UTF-8 character. */
struct session_piece {
    int32_t token;
    float logprob;                 /* sampler.h's definition */
    uint16_t n_bytes;              /* <= SESSION_PIECE_MAX */
    char bytes[SESSION_PIECE_MAX]; /* (n_bytes), not NUL-terminated */
};

struct session_logprob {
    struct session_piece pick;
    int n_top; /* <= sampler.n_top_logprobs */
    struct session_piece top[SAMPLER_MAX_TOP_LOGPROBS];
    size_t text_offset; /* bytes of generated text (detokenized, before stop
                           handling) before this token's text */
};

struct session_delta {
    const char *text; /* borrowed until the next call on the session; "" when none */
    size_t len;       /* bytes of text: safe to emit, complete UTF-8 */
    enum session_stop stop;
    const struct session_logprob *logprob; /* borrowed likewise; NULL when none */
};

struct session;

/* The base is borrowed and must outlive the session. Errors: sampler_init's
 * (a bias token out of range: STRATA_E_RANGE), stop_matcher_init's
 * (STRATA_E_RANGE), STRATA_E_NOMEM. owned: free with session_free() */
struct session *session_init(const struct session_base *b, const struct session_params *params,
                             struct strata_error *err);
void session_free(struct session *s); /* NULL is a no-op */

/* Picks the next token from logits (n_vocab f32, borrowed, not modified).
 * Greedy without logprobs, bias or penalties takes the argmax only (the
 * same pick as sampler_sample, without its log-sum-exp over the vocabulary:
 * 0.5 ms a row on a 128,256-entry vocabulary, 2-vCPU EPYC). Touches only
 * s's sampler: rows of different sessions may be sampled concurrently.
 * STRATA_E_INVALID when every logit is -inf or NaN. */
int session_sample(struct session *s, const float *logits, struct sampler_result *out,
                   struct strata_error *err);
/* Device sampling (model_forward_sample): 1 when the next pick needs only
 * the logits on the device: no grammar mask, and the sampler's rule is one
 * the device takes (sampler_device_rule: no logit bias, penalties or
 * logprobs; greedy, or top_k 1..top_k_max); *rule gets it. 0: the host
 * samples (session_sample). */
int session_device_rule(const struct session *s, int top_k_max, struct sampler_rule *rule);
/* The uniform the next sampler_sample would draw (sampler_next_uniform), for
 * a device draw at temperature > 0; then pass the pick to session_step. */
float session_next_uniform(struct session *s);
/* Takes the sampled token (r borrowed for the call) and fills *d (see the
 * step above). After d->stop was set, further steps give no text. Errors:
 * STRATA_E_RANGE (a token outside the vocabulary), STRATA_E_NOMEM; *d is
 * then empty. */
int session_step(struct session *s, const struct sampler_result *r, struct session_delta *d,
                 struct strata_error *err);
/* Generation ends without a stop (a length limit): fills *d with the text
 * still held (an incomplete character becomes U+FFFD; a held-back stop
 * prefix is released), or, when that text completes a stop sequence, the
 * part before it with d->stop = SESSION_STOP_SEQUENCE. No logprob. */
void session_flush(struct session *s, struct session_delta *d);
/* Tokens stepped so far (EOG included). */
int64_t session_n_gen(const struct session *s);

#endif
