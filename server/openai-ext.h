/* server/openai-ext.h: the request fields beyond one prompt and one choice,
 * parsed for server/openai.c: `n` and `best_of`, /v1/completions' prompt
 * forms (a string, strings, token ids, arrays of token ids) and `echo`, the
 * llama.cpp parameter names (honoured or refused, see openai-ext.c's
 * table), and the names of fields nobody knows (for the debug log).
 *
 *   if ((rc = openai_ext_prompt(body, n_vocab, &rq, param, cap, &err)) < 0) ... 400
 *   if ((rc = openai_ext_parse(body, n_vocab, &rq, param, cap, &err)) < 0) ... 400
 *   ...
 *   openai_ext_free(&rq);   // from openai_request_free
 *
 * Errors as openai_parse's: STRATA_E_INVALID / STRATA_E_RANGE (400) or
 * STRATA_E_UNSUPPORTED (400, code "unsupported"), param naming the field
 * ("prompt[1][3]", "mirostat").
 *
 * Ownership: what the calls set in rq is rq's (openai_ext_free).
 * Threading: no shared state; any thread.
 */
#ifndef STRATA_SERVER_OPENAI_EXT_H
#define STRATA_SERVER_OPENAI_EXT_H

#include <jansson.h>
#include <stddef.h>

#include "engine/core/error.h"
#include "server/openai.h"

/* /v1/completions' "prompt" into rq->prompts (and, for one prompt,
 * rq->prompt or rq->prompt_ids). Token ids must be in [0, n_vocab). */
int openai_ext_prompt(json_t *body, int n_vocab, struct openai_request *rq, char *param,
                      size_t param_cap, struct strata_error *err);
/* n, best_of, echo, the llama.cpp names and the unknown fields; after the
 * prompt, the sampling fields and logprobs are parsed (n_predict yields to
 * max_tokens; n_probs to logprobs). */
int openai_ext_parse(json_t *body, int n_vocab, struct openai_request *rq, char *param,
                     size_t param_cap, struct strata_error *err);
/* Frees what the two calls set (not the rest of rq). */
void openai_ext_free(struct openai_request *rq);
/* "a,b,c": the unknown field names (rq->unknown) for the log, cut at cap. */
void openai_ext_unknown_list(const struct openai_request *rq, char *buf, size_t cap);

#endif
