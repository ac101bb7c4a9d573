/* tests/server/fake-gen.h: a FAKE generation layer for the HTTP tests only.
 * It implements server/gen.h without a model: each request streams
 * `max_tokens` (default 8, at most 256) deltas "tok0 ", "tok1 ", ... one every
 * `fake_delay_ms` (default 5 ms, at most 5000) from one worker thread, at most
 * `parallel` requests at a time, `queue` more waiting (then 429). The JSON it
 * emits is a minimal OpenAI shape, enough for the HTTP layer's tests.
 * Threading: as gen.h requires. */
#ifndef STRATA_TESTS_FAKE_GEN_H
#define STRATA_TESTS_FAKE_GEN_H

#include "server/gen.h"

struct fake_gen;

struct fake_gen *fake_gen_init(int parallel, int queue); /* owned: fake_gen_free() */
/* Stops the worker; every live job gets GEN_EV_DONE first. */
void fake_gen_free(struct fake_gen *g);
struct gen_backend fake_gen_backend(struct fake_gen *g);

#endif
