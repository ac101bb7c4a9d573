/* tests/server/test-sched.c: the scheduler driven directly through its
 * gen_ops on the real stories260K model: continuous batching gives every
 * sequence the tokens it gets alone (greedy), prefix reuse prefills only the
 * new suffix and changes nothing in the output, admission waits on a full KV
 * pool, the queue answers QUEUE_FULL, cancellation mid-prefill and mid-decode
 * and the request deadline take effect, and the stats end at 0 active /
 * 0 queued with every KV block back (ASan checks the rest at exit).
 */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/model/model.h"
#include "server/scheduler.h"
#include "tests/harness.h"

/* ---- one request's events ------------------------------------------------ */

struct req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sched *s;
    struct gen_job *job;
    bool done;
    int err_code;
    int n_delta_tokens;
    int64_t n_prompt, n_completion, n_cached;
    char finish[16];
    char *body;            /* DONE json (non-stream success) */
    int cancel_after;      /* cancel this job after that many tokens (0 = never) */
    struct req *other;     /* ... or cancel `other` instead */
    double stall_s;        /* sleep in the first DELTA (holds the scheduler thread) */
    int delay_us;          /* sleep in every DELTA (slows every step down) */
    pthread_mutex_t *gate; /* locked and unlocked in the first event: waits for the test */
    int64_t first_step;    /* scheduler steps published when the first DELTA came (-1: none) */
    atomic_bool at_gate;   /* the scheduler thread reached the gate */
    uint32_t part;         /* gen_submit.cache_partition (the API key) */
    atomic_bool measure;   /* record the longest gap between two DELTAs while set */
    double t_last_delta;   /* monotonic s (scheduler thread) */
    double max_gap;        /* s */
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void req_init(struct req *r, struct sched *s) {
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->s = s;
    r->first_step = -1;
}

static void on_event(void *ctx, const struct gen_event *ev) {
    struct req *r = ctx;
    if (r->gate) {
        atomic_store(&r->at_gate, true);
        pthread_mutex_lock(r->gate);
        pthread_mutex_unlock(r->gate);
        r->gate = NULL;
    }
    pthread_mutex_lock(&r->mu);
    struct gen_job *cancel = NULL;
    switch (ev->type) {
    case GEN_EV_DELTA:
        if (atomic_load(&r->measure)) {
            double now = mono_s();
            if (r->t_last_delta > 0 && now - r->t_last_delta > r->max_gap)
                r->max_gap = now - r->t_last_delta;
            r->t_last_delta = now;
        }
        if (r->n_delta_tokens == 0) { /* stats() never blocks on the scheduler thread */
            struct gen_stats st;
            sched_gen_ops()->stats(r->s, &st);
            r->first_step = (int64_t)st.steps;
        }
        r->n_delta_tokens += ev->n_tokens;
        if (r->cancel_after && r->n_delta_tokens >= r->cancel_after)
            cancel = r->other ? r->other->job : r->job;
        if (r->delay_us > 0)
            usleep((useconds_t)r->delay_us);
        if (r->stall_s > 0) {
            struct timespec ts = {(time_t)r->stall_s,
                                  (long)((r->stall_s - (double)(time_t)r->stall_s) * 1e9)};
            nanosleep(&ts, NULL);
            r->stall_s = 0;
        }
        break;
    case GEN_EV_FINISH:
        snprintf(r->finish, sizeof(r->finish), "%s", ev->finish_reason);
        break;
    case GEN_EV_USAGE:
        r->n_prompt = ev->n_prompt_tokens;
        r->n_completion = ev->n_completion_tokens;
        r->n_cached = ev->n_cached_tokens;
        break;
    case GEN_EV_ERROR:
        r->err_code = ev->error_code;
        break;
    case GEN_EV_DONE:
        if (ev->json)
            r->body = strndup(ev->json, ev->json_len);
        r->done = true;
        pthread_cond_broadcast(&r->cv);
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&r->mu);
    if (cancel)
        sched_gen_ops()->cancel(r->s, cancel);
}

/* Submits a request body (steals it) on the route with r's sink; returns
 * submit's rc. */
static int submit_body(struct req *r, enum gen_route route, json_t *body) {
    struct gen_submit gs = {.route = route, .body = body, .cache_partition = r->part};
    struct gen_submit_out out = {0};
    struct strata_error err = {0};
    pthread_mutex_lock(&r->mu);
    int rc = sched_gen_ops()->submit(r->s, &gs, (struct gen_sink){on_event, r}, &out, &err);
    r->job = out.job;
    pthread_mutex_unlock(&r->mu);
    json_decref(body);
    return rc;
}

/* Submits a completion request (max_tokens < 0: the field is left out);
 * returns submit's rc. */
static int submit(struct req *r, const char *prompt, int max_tokens) {
    json_t *body = json_pack("{s:s, s:s, s:i, s:f}", "model", "stories260K", "prompt", prompt,
                             "max_tokens", max_tokens, "temperature", 0.0);
    if (max_tokens < 0)
        json_object_del(body, "max_tokens");
    return submit_body(r, GEN_ROUTE_COMPLETION, body);
}

/* Submits a sampled completion request (temperature, top_p, seed). */
static int submit_sampled(struct req *r, const char *prompt, int max_tokens, int seed) {
    json_t *body =
        json_pack("{s:s, s:s, s:i, s:f, s:f, s:i}", "model", "stories260K", "prompt", prompt,
                  "max_tokens", max_tokens, "temperature", 0.9, "top_p", 0.95, "seed", seed);
    return submit_body(r, GEN_ROUTE_COMPLETION, body);
}

/* Submits a chat request with the messages array (borrowed). */
static int submit_chat(struct req *r, json_t *messages, int max_tokens) {
    json_t *body = json_pack("{s:s, s:O, s:i, s:f}", "model", "stories260K", "messages", messages,
                             "max_tokens", max_tokens, "temperature", 0.0);
    return submit_body(r, GEN_ROUTE_CHAT, body);
}

static void wait_done(struct req *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    sched_gen_ops()->release(r->s, r->job);
    r->job = NULL;
}

static void req_free(struct req *r) {
    free(r->body);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

/* choices[0].text of the body (owned). */
static char *body_text(const char *body) {
    json_t *o = body ? json_loads(body, 0, NULL) : NULL;
    const char *t = NULL;
    json_unpack(o, "{s:[{s:s}]}", "choices", "text", &t);
    char *out = t ? strdup(t) : NULL;
    json_decref(o);
    return out;
}

/* choices[0].message.content of a chat body (owned). */
static char *body_content(const char *body) {
    json_t *o = body ? json_loads(body, 0, NULL) : NULL;
    const char *t = NULL;
    json_unpack(o, "{s:[{s:{s:s}}]}", "choices", "message", "content", &t);
    char *out = t ? strdup(t) : NULL;
    json_decref(o);
    return out;
}

static struct sched *open_sched_threads(int parallel, int queue, int n_batch, int64_t kv_mem,
                                        bool prefix, int n_threads) {
    char path[1024];
    struct sched_params sp = sched_params_default();
    sp.model_path = test_shared_path(path, sizeof(path), "models/stories260K.gguf");
    sp.n_threads = n_threads;
    sp.n_ctx = 256;
    sp.parallel = parallel;
    sp.queue = queue;
    sp.n_batch = n_batch;
    sp.kv_mem = kv_mem;
    sp.prefix_cache = prefix;
    struct strata_error err = {0};
    struct sched *s = sched_init(&sp, &err);
    ck_assert_msg(s != NULL, "sched_init: %s", err.message);
    return s;
}

static struct sched *open_sched(int parallel, int queue, int n_batch, int64_t kv_mem, bool prefix) {
    return open_sched_threads(parallel, queue, n_batch, kv_mem, prefix, 1);
}

static struct gen_stats stats_of(struct sched *s) {
    struct gen_stats st;
    sched_gen_ops()->stats(s, &st);
    return st;
}

/* Waits (bounded) for the scheduler to publish 0 active / 0 queued. */
static struct gen_stats settled(struct sched *s) {
    struct gen_stats st = stats_of(s);
    for (int i = 0; i < 200 && (st.n_active || st.n_queued); i++) {
        usleep(10000);
        st = stats_of(s);
    }
    return st;
}

static void check_settled(struct sched *s) {
    struct gen_stats st = settled(s);
    ck_assert_int_eq(st.n_active, 0);
    ck_assert_int_eq(st.n_queued, 0);
    ck_assert_int_eq(st.kv_blocks_used, 0);
    ck_assert_int_eq(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
}

static const char *const PROMPTS[] = {
    "Once upon a time",
    "Lily and Ben went to the park. They saw a big dog. The dog was",
    "Tom",
    "One day, a little bird flew over the river and found a shiny stone. It picked up the "
    "stone and flew home to show its mother. Its mother said",
    "The sun was hot. Sam wanted",
    "There was a girl named Sue who liked to draw. She drew a cat, a house and a tree. "
    "Then she",
};
#define N_PROMPTS (int)(sizeof(PROMPTS) / sizeof(PROMPTS[0]))
static const int MAX_TOK[N_PROMPTS] = {40, 25, 60, 30, 12, 50};

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_batched_equals_alone) {
    /* alone: one request at a time, no prefix cache */
    struct sched *s1 = open_sched(1, 8, 0, 0, false);
    char *alone[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        struct req r;
        req_init(&r, s1);
        ck_assert_int_eq(submit(&r, PROMPTS[i], MAX_TOK[i]), 0);
        wait_done(&r);
        ck_assert_int_eq(r.err_code, 0);
        alone[i] = body_text(r.body);
        ck_assert(alone[i] != NULL);
        req_free(&r);
    }
    sched_free(s1);
    /* batched: 4 sessions, a 16-token step (chunked prefill), staggered arrivals */
    struct sched *s = open_sched(4, 16, 16, 0, false);
    struct req r[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        req_init(&r[i], s);
        ck_assert_int_eq(submit(&r[i], PROMPTS[i], MAX_TOK[i]), 0);
        usleep((useconds_t)(i % 3) * 3000);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        wait_done(&r[i]);
        ck_assert_int_eq(r[i].err_code, 0);
        char *t = body_text(r[i].body);
        ck_assert_msg(t && !strcmp(t, alone[i]), "prompt %d: batched '%s' vs alone '%s'", i,
                      t ? t : "(null)", alone[i]);
        free(t);
        free(alone[i]);
        req_free(&r[i]);
    }
    struct gen_stats st = settled(s);
    ck_assert_uint_gt(st.tokens_generated, 100);
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_sampled_batched_equals_alone) {
    /* seeded sampling: the rows of a step are sampled on the pool's threads
     * (2 here), each session with its own sampler, so a batched session
     * draws exactly the tokens it draws alone */
    char *alone[N_PROMPTS], *batched[N_PROMPTS];
    for (int pass = 0; pass < 2; pass++) {
        struct sched *s = open_sched_threads(pass ? 6 : 1, 8, 0, 0, false, 2);
        struct req r[N_PROMPTS];
        for (int i = 0; i < N_PROMPTS; i++) {
            req_init(&r[i], s);
            ck_assert_int_eq(submit_sampled(&r[i], PROMPTS[i], MAX_TOK[i], 100 + i), 0);
            if (!pass)
                wait_done(&r[i]);
        }
        for (int i = 0; i < N_PROMPTS; i++) {
            if (pass)
                wait_done(&r[i]);
            ck_assert_int_eq(r[i].err_code, 0);
            (pass ? batched : alone)[i] = body_text(r[i].body);
            ck_assert((pass ? batched : alone)[i] != NULL);
            req_free(&r[i]);
        }
        check_settled(s);
        sched_free(s);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        ck_assert_msg(!strcmp(batched[i], alone[i]), "prompt %d: batched '%s' vs alone '%s'", i,
                      batched[i], alone[i]);
        free(alone[i]);
        free(batched[i]);
    }
}
END_TEST

START_TEST(test_prefix_reuse) {
    struct sched *s = open_sched(2, 8, 0, 0, true);
    struct sched *cold = open_sched(2, 8, 0, 0, false);
    const char *p1 = "Once upon a time, there was a little girl named Lily. She loved to play";
    struct req a;
    req_init(&a, s);
    ck_assert_int_eq(submit(&a, p1, 24), 0);
    wait_done(&a);
    ck_assert_int_eq(a.n_cached, 0);
    char *t1 = body_text(a.body);
    ck_assert(t1 != NULL);
    /* second turn: the first prompt, its answer, and a new sentence */
    char p2[1024];
    snprintf(p2, sizeof(p2), "%s%s Then her mom said", p1, t1);
    uint64_t prompt_before = stats_of(s).tokens_prompt;
    struct req b, c;
    req_init(&b, s);
    req_init(&c, cold);
    ck_assert_int_eq(submit(&b, p2, 20), 0);
    ck_assert_int_eq(submit(&c, p2, 20), 0);
    wait_done(&b);
    wait_done(&c);
    ck_assert_int_eq(b.err_code, 0);
    ck_assert_int_eq(c.n_cached, 0);
    /* everything but the new suffix came from the cache: the first turn's
     * prompt + answer tokens (the answer's last token was never fed back) */
    ck_assert_int_ge(b.n_cached, a.n_prompt + a.n_completion - 2);
    ck_assert_int_lt(b.n_cached, b.n_prompt);
    struct gen_stats st = settled(s);
    ck_assert_uint_eq(st.tokens_prompt - prompt_before, (uint64_t)(b.n_prompt - b.n_cached));
    ck_assert_uint_eq(st.cache_hits, 1);
    ck_assert_uint_eq(st.cache_misses, 1);
    ck_assert_uint_eq(st.cached_tokens, (uint64_t)b.n_cached);
    ck_assert_int_gt(st.kv_blocks_cached, 0);
    char *tb = body_text(b.body), *tc = body_text(c.body);
    ck_assert_msg(tb && tc && !strcmp(tb, tc), "cached '%s' vs cold '%s'", tb, tc);
    /* the same prompt again: all but its last token cached, same answer */
    struct req d;
    req_init(&d, s);
    ck_assert_int_eq(submit(&d, p2, 20), 0);
    wait_done(&d);
    ck_assert_int_eq(d.n_cached, d.n_prompt - 1);
    char *td = body_text(d.body);
    ck_assert_str_eq(td, tc);
    free(t1);
    free(tb);
    free(tc);
    free(td);
    req_free(&a);
    req_free(&b);
    req_free(&c);
    req_free(&d);
    check_settled(s);
    check_settled(cold);
    sched_free(cold);
    sched_free(s);
}
END_TEST

/* Cache partitions (one per API key): a prompt cached by partition 1 is a
 * miss for partition 2, so cached_tokens cannot tell key B how far its
 * guess matches key A's prompt; partition 1 still reuses it. Before, one
 * cache served every key (26 cached tokens for a wrong secret digit, 90
 * for the right one). */
START_TEST(test_prefix_partitions) {
    struct sched *s = open_sched(1, 8, 0, 0, true);
    const char *secret = "Once upon a time, there was a little girl named Lily. Her secret number "
                         "was 7 and she told nobody about it.";
    const uint32_t parts[] = {1, 2, 1, 0, 0};
    struct req r[5];
    char *text[5];
    for (int i = 0; i < 5; i++) {
        req_init(&r[i], s);
        r[i].part = parts[i];
        ck_assert_int_eq(submit(&r[i], secret, 6), 0);
        wait_done(&r[i]);
        ck_assert_int_eq(r[i].err_code, 0);
        text[i] = body_text(r[i].body);
        ck_assert_ptr_nonnull(text[i]);
    }
    ck_assert_int_eq(r[0].n_cached, 0);
    ck_assert_msg(r[1].n_cached == 0, "partition 2 reused %lld tokens of partition 1",
                  (long long)r[1].n_cached);
    ck_assert_int_eq(r[2].n_cached, r[2].n_prompt - 1); /* the owner still reuses it */
    ck_assert_int_eq(r[3].n_cached, 0);                 /* partition 0 is one more tenant */
    ck_assert_int_eq(r[4].n_cached, r[4].n_prompt - 1);
    for (int i = 1; i < 5; i++) /* greedy: the cache never changes the answer */
        ck_assert_str_eq(text[i], text[0]);
    struct gen_stats st = settled(s);
    ck_assert_uint_eq(st.cache_hits, 2);
    ck_assert_uint_eq(st.cache_misses, 3);
    for (int i = 0; i < 5; i++) {
        free(text[i]);
        req_free(&r[i]);
    }
    check_settled(s);
    sched_free(s);
}
END_TEST

/* A huge prompt is tokenized off the scheduler thread: on it, one 1.9 MB
 * prompt (refused with 400 context_length_exceeded) froze every running
 * stream for as long as tokenizing took. While a stream decodes, a ~1 MB
 * prompt is submitted; the stream's longest gap between two tokens during
 * the huge prompt's life (submit to its error) must stay under a quarter of
 * that life. On the scheduler thread the gap was that whole time. */
START_TEST(test_huge_prompt_does_not_stall) {
    char path[1024];
    struct sched_params sp = sched_params_default();
    sp.model_path = test_shared_path(path, sizeof(path), "models/stories260K.gguf");
    sp.n_threads = 1;
    sp.n_ctx = 2048; /* a stream long enough to outlast the tokenizing */
    sp.parallel = 2;
    struct strata_error err = {0};
    struct sched *s = sched_init(&sp, &err);
    ck_assert_msg(s != NULL, "sched_init: %s", err.message);
    struct req lng, big;
    req_init(&lng, s);
    req_init(&big, s);
    json_t *body = json_pack("{s:s, s:s, s:i, s:f, s:{s:i}}", "model", "stories260K", "prompt",
                             "Once upon a time", "max_tokens", 2000, "temperature", 0.0,
                             "logit_bias", "2", -100); /* no EOS: it runs until cancelled */
    ck_assert_int_eq(submit_body(&lng, GEN_ROUTE_COMPLETION, body), 0);
    for (int i = 0; i < 500; i++) { /* decoding */
        pthread_mutex_lock(&lng.mu);
        int n = lng.n_delta_tokens;
        pthread_mutex_unlock(&lng.mu);
        if (n >= 8)
            break;
        usleep(10000);
    }
    const size_t n_big = 1u << 20;
    char *text = malloc(n_big + 1);
    ck_assert_ptr_nonnull(text);
    static const char unit[] = "Once upon a time there was a cat. ";
    for (size_t i = 0; i < n_big; i++)
        text[i] = unit[i % (sizeof(unit) - 1)];
    text[n_big] = '\0';
    atomic_store(&lng.measure, true);
    const double t0 = mono_s();
    ck_assert_int_eq(submit(&big, text, 4), 0);
    free(text);
    pthread_mutex_lock(&big.mu);
    while (!big.done)
        pthread_cond_wait(&big.cv, &big.mu);
    pthread_mutex_unlock(&big.mu);
    const double life = mono_s() - t0;
    atomic_store(&lng.measure, false);
    ck_assert_int_eq(big.err_code, STRATA_E_CONTEXT_LENGTH);
    pthread_mutex_lock(&lng.mu);
    const double gap = lng.max_gap;
    const bool still_running = !lng.done;
    pthread_mutex_unlock(&lng.mu);
    fprintf(stderr, "# huge prompt: %.3f s from submit to its error, longest stream gap %.3f s\n",
            life, gap);
    ck_assert_msg(still_running, "the stream ended before the huge prompt did (%.3f s)", life);
    ck_assert_msg(gap < life / 4, "a stream stalled %.3f s while a %zu-byte prompt took %.3f s",
                  gap, n_big, life);
    sched_gen_ops()->cancel(s, lng.job);
    wait_done(&lng);
    sched_gen_ops()->release(s, big.job);
    big.job = NULL;
    req_free(&lng);
    req_free(&big);
    check_settled(s);
    sched_free(s);
}
END_TEST

/* The first generated token is EOS (a +100 logit bias on </s>): the session
 * finishes at once and flushes a stop matcher that was never fed, which
 * passed NULL to memcpy/memmove (UBSan: engine/sample/sampler.c release()). */
START_TEST(test_first_token_eos) {
    struct sched *s = open_sched(1, 4, 0, 0, true);
    for (int stream = 0; stream < 2; stream++) {
        struct req r;
        req_init(&r, s);
        json_t *body =
            json_pack("{s:s, s:s, s:i, s:f, s:b, s:{s:i}, s:[s]}", "model", "stories260K", "prompt",
                      "Once upon a time", "max_tokens", 5, "temperature", 0.0, "stream", stream,
                      "logit_bias", "2", 100, "stop", "END");
        ck_assert_int_eq(submit_body(&r, GEN_ROUTE_COMPLETION, body), 0);
        wait_done(&r);
        ck_assert_int_eq(r.err_code, 0);
        ck_assert_str_eq(r.finish, "stop");
        ck_assert_int_eq(r.n_completion, 1);
        if (!stream) {
            char *t = body_text(r.body);
            ck_assert_str_eq(t, "");
            free(t);
        }
        req_free(&r);
    }
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_chat_second_turn) {
    /* a conversation's second turn (chat template, ChatML fallback) reuses
     * the first turn's prompt and answer and answers like a cold run */
    struct sched *s = open_sched(2, 8, 0, 0, true);
    struct sched *cold = open_sched(2, 8, 0, 0, false);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "Tell me about Lily.");
    struct req a;
    req_init(&a, s);
    ck_assert_int_eq(submit_chat(&a, msgs, 30), 0);
    wait_done(&a);
    ck_assert_int_eq(a.err_code, 0);
    char *answer = body_content(a.body);
    ck_assert(answer != NULL);
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", answer));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", "And Ben?"));
    uint64_t before = stats_of(s).tokens_prompt;
    struct req b, c;
    req_init(&b, s);
    req_init(&c, cold);
    ck_assert_int_eq(submit_chat(&b, msgs, 20), 0);
    ck_assert_int_eq(submit_chat(&c, msgs, 20), 0);
    wait_done(&b);
    wait_done(&c);
    ck_assert_int_eq(b.err_code, 0);
    ck_assert_int_eq(c.n_cached, 0);
    ck_assert_int_ge(b.n_cached, a.n_prompt); /* at least the whole first prompt */
    ck_assert_int_lt(b.n_cached, b.n_prompt);
    ck_assert_uint_eq(settled(s).tokens_prompt - before, (uint64_t)(b.n_prompt - b.n_cached));
    char *tb = body_content(b.body), *tc = body_content(c.body);
    ck_assert_msg(tb && tc && !strcmp(tb, tc), "cached '%s' vs cold '%s'", tb, tc);
    free(answer);
    free(tb);
    free(tc);
    json_decref(msgs);
    req_free(&a);
    req_free(&b);
    req_free(&c);
    check_settled(s);
    sched_free(cold);
    sched_free(s);
}
END_TEST

START_TEST(test_pool_exhaustion_waits) {
    /* a pool of 8 blocks (128 positions, n_ctx capped to it) and 3 sessions:
     * each request reserves prompt + max_tokens, so only one fits at a time;
     * the others wait in FIFO order and all finish, none fails */
    /* stories260K: 5 layers, K and V rows of 4 heads x 8 dims, f16, 16 positions */
    const int64_t blk_bytes = 5 * 16 * (32 + 32) * 2;
    struct sched *s = open_sched(3, 8, 0, 8 * blk_bytes, true);
    struct gen_stats st = stats_of(s);
    ck_assert_int_eq(st.kv_blocks_total, 8);
    ck_assert_int_eq(st.n_ctx, 128);
    struct req r[3];
    for (int i = 0; i < 3; i++) {
        req_init(&r[i], s);
        ck_assert_int_eq(submit(&r[i], PROMPTS[i], 100), 0);
    }
    int max_active = 0;
    for (int k = 0; k < 400; k++) {
        st = stats_of(s);
        max_active = st.n_active > max_active ? st.n_active : max_active;
        ck_assert_int_le(st.kv_blocks_used, 8);
        if (st.tokens_generated >= 3 * 90)
            break;
        usleep(2000);
    }
    for (int i = 0; i < 3; i++) {
        wait_done(&r[i]);
        ck_assert_int_eq(r[i].err_code, 0);
        ck_assert_int_gt(r[i].n_completion, 0);
        req_free(&r[i]);
    }
    ck_assert_int_le(max_active, 1);
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_no_max_tokens_cannot_hold_the_pool) {
    /* requests without max_tokens reserve a whole context (n_ctx - prompt
     * tokens of generation): with a pool of exactly one context (8 blocks,
     * n_ctx capped to 128) they run one at a time, each ends by n_ctx at the
     * latest ("length") and hands its blocks back, so the queue drains and
     * nothing fails */
    const int64_t blk_bytes = 5 * 16 * (32 + 32) * 2; /* see test_pool_exhaustion_waits */
    struct sched *s = open_sched(3, 8, 0, 8 * blk_bytes, true);
    struct req r[3];
    for (int i = 0; i < 3; i++) {
        req_init(&r[i], s);
        ck_assert_int_eq(submit(&r[i], PROMPTS[i], -1), 0);
    }
    int max_active = 0;
    for (int k = 0; k < 2000; k++) {
        struct gen_stats st = stats_of(s);
        max_active = st.n_active > max_active ? st.n_active : max_active;
        ck_assert_int_le(st.kv_blocks_used, 8);
        pthread_mutex_lock(&r[2].mu);
        bool last_done = r[2].done;
        pthread_mutex_unlock(&r[2].mu);
        if (last_done)
            break;
        usleep(1000);
    }
    for (int i = 0; i < 3; i++) {
        wait_done(&r[i]);
        ck_assert_int_eq(r[i].err_code, 0);
        ck_assert_int_gt(r[i].n_completion, 0);
        ck_assert_int_le(r[i].n_prompt + r[i].n_completion, 128);
        ck_assert_msg(!strcmp(r[i].finish, "length") || !strcmp(r[i].finish, "stop"), "finish '%s'",
                      r[i].finish);
        if (!strcmp(r[i].finish, "length"))
            ck_assert_int_eq(r[i].n_prompt + r[i].n_completion, 128);
        req_free(&r[i]);
    }
    ck_assert_int_le(max_active, 1); /* one whole-context reservation at a time */
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_joins_bounded_while_decoding) {
    /* one stream decodes; four requests arrive together (queued while the
     * first stream's first event holds the scheduler thread): while it
     * decodes, a step carries at most 16 tokens (server/sched.c), so their
     * ~90 prompt tokens take at least ceil(P / 15) steps instead of freezing
     * the running stream for one long step */
    struct sched *s = open_sched(5, 8, 0, 0, false);
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&gate);
    struct req r[5];
    for (int i = 0; i < 5; i++)
        req_init(&r[i], s);
    r[0].gate = &gate;
    ck_assert_int_eq(submit(&r[0], PROMPTS[0], 40), 0);
    /* r[0]'s first event arrives (and blocks) on the scheduler thread */
    for (int k = 0; k < 30000 && !atomic_load(&r[0].at_gate); k++)
        usleep(1000);
    ck_assert(atomic_load(&r[0].at_gate));
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq(submit(&r[i], PROMPTS[i], 4), 0);
    pthread_mutex_unlock(&gate);
    for (int i = 0; i < 5; i++) {
        wait_done(&r[i]);
        ck_assert_int_eq(r[i].err_code, 0);
    }
    int64_t prompt = 0, last = 0;
    for (int i = 1; i < 5; i++) {
        prompt += r[i].n_prompt - r[i].n_cached;
        last = r[i].first_step > last ? r[i].first_step : last;
    }
    ck_assert_int_gt(prompt, 45);
    ck_assert_int_eq(r[0].finish[0], 'l'); /* r[0] decoded through every joining step */
    ck_assert_msg(last - r[0].first_step >= (prompt + 14) / 15,
                  "%lld prompt tokens joined within %lld steps of a decoding stream",
                  (long long)prompt, (long long)(last - r[0].first_step));
    /* step accounting: every prompt token went through a step */
    struct gen_stats st = settled(s);
    ck_assert_uint_eq(st.step_prefill, st.tokens_prompt);
    ck_assert_uint_gt(st.step_decode, 0);
    ck_assert_uint_le(st.step_decode, st.tokens_generated);
    ck_assert(st.step_forward_s > 0);
    for (int i = 0; i < 5; i++)
        req_free(&r[i]);
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_queue_full) {
    /* parallel 1 + queue 1: the third request in flight is refused. The first
     * request's first event waits on a gate, so nothing finishes meanwhile. */
    struct sched *s = open_sched(1, 1, 0, 0, false);
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&gate);
    struct req r[3];
    for (int i = 0; i < 3; i++)
        req_init(&r[i], s);
    r[0].gate = &gate;
    ck_assert_int_eq(submit(&r[0], PROMPTS[0], 8), 0);
    ck_assert_int_eq(submit(&r[1], PROMPTS[1], 8), 0);
    ck_assert_int_eq(submit(&r[2], PROMPTS[2], 8), STRATA_E_QUEUE_FULL);
    ck_assert(r[2].job == NULL);
    pthread_mutex_unlock(&gate);
    for (int i = 0; i < 2; i++) {
        wait_done(&r[i]);
        ck_assert_int_eq(r[i].err_code, 0);
    }
    /* room again */
    ck_assert_int_eq(submit(&r[2], PROMPTS[2], 8), 0);
    wait_done(&r[2]);
    ck_assert_int_eq(r[2].err_code, 0);
    for (int i = 0; i < 3; i++)
        req_free(&r[i]);
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_cancel_mid_decode_and_prefill) {
    /* 8-token steps, each slowed to >= 20 ms by b's event hook: a's ~40-token
     * prompt takes several steps while b decodes; the test cancels a once
     * part of its prompt is in (mid-prefill), then b cancels itself 4 tokens
     * later (mid-decode) */
    struct sched *s = open_sched(2, 4, 8, 0, true);
    struct req a, b;
    req_init(&a, s);
    req_init(&b, s);
    b.delay_us = 20000;
    ck_assert_int_eq(submit(&b, PROMPTS[0], 200), 0);
    while (stats_of(s).tokens_generated < 1)
        usleep(500);
    uint64_t before = stats_of(s).tokens_prompt;
    ck_assert_int_eq(submit(&a, PROMPTS[3], 50), 0);
    while (stats_of(s).tokens_prompt < before + 7)
        usleep(500);
    sched_gen_ops()->cancel(s, a.job);
    wait_done(&a);
    ck_assert_int_eq(a.err_code, STRATA_E_CANCELLED);
    ck_assert_int_eq(a.n_delta_tokens, 0); /* it never got to decode */
    ck_assert_uint_lt(stats_of(s).tokens_prompt - before, 40);
    pthread_mutex_lock(&b.mu);
    b.cancel_after = b.n_delta_tokens + 4;
    pthread_mutex_unlock(&b.mu);
    wait_done(&b);
    ck_assert_int_eq(b.err_code, STRATA_E_CANCELLED);
    ck_assert_int_lt(b.n_delta_tokens, 200);
    req_free(&a);
    req_free(&b);
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_deadline) {
    char path[1024];
    struct sched_params sp = sched_params_default();
    sp.model_path = test_shared_path(path, sizeof(path), "models/stories260K.gguf");
    sp.n_threads = 1;
    sp.n_ctx = 256;
    sp.parallel = 1;
    sp.queue = 4;
    sp.request_timeout = 0.2;
    struct strata_error err = {0};
    struct sched *s = sched_init(&sp, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    /* the first token's event holds the scheduler for 0.3 s: the deadline
     * passes, the job ends at the next step with TIMEOUT */
    struct req a;
    req_init(&a, s);
    a.stall_s = 0.3;
    ck_assert_int_eq(submit(&a, PROMPTS[0], 200), 0);
    wait_done(&a);
    ck_assert_int_eq(a.err_code, STRATA_E_TIMEOUT);
    ck_assert_int_le(a.n_delta_tokens, 2);
    req_free(&a);
    check_settled(s);
    sched_free(s);
}
END_TEST

START_TEST(test_shutdown_with_live_jobs) {
    struct sched *s = open_sched(2, 8, 8, 0, true);
    struct req r[4];
    for (int i = 0; i < 4; i++) {
        req_init(&r[i], s);
        ck_assert_int_eq(submit(&r[i], PROMPTS[i], 200), 0);
    }
    sched_free(s); /* every live job gets DONE (after ERROR cancelled) */
    for (int i = 0; i < 4; i++) {
        ck_assert(r[i].done);
        ck_assert(r[i].err_code == STRATA_E_CANCELLED || r[i].err_code == 0);
        sched_gen_ops()->release(NULL, r[i].job); /* allowed after DONE, sched gone */
        req_free(&r[i]);
    }
}
END_TEST

/* sched_plan: the one sizing rule of the daemon and --print-config. A
 * llama-like shape: 5 layers, 4 KV heads of 8 dims, F16 KV: a block of 16
 * positions is 5 * 16 * (32 + 32) * 2 = 10240 bytes. */
START_TEST(test_plan_rules) {
    struct model_hparams hp = {.n_ctx_train = 2048,
                               .n_layer = 5,
                               .n_head = 8,
                               .n_head_kv = 4,
                               .head_dim_k = 8,
                               .head_dim_v = 8};
    struct sched_params p = sched_params_default();
    p.parallel = 4;
    p.kv_block = 16;
    struct sched_plan pl;
    struct strata_error err = {0};
    ck_assert_int_eq(sched_plan(&p, &hp, 512, &pl, &err), 0);
    ck_assert_int_eq(pl.n_ctx, 2048);
    ck_assert_str_eq(pl.ctx_rule, "the model's trained context");
    ck_assert_int_eq(pl.n_batch, 512);
    ck_assert_str_eq(pl.batch_rule, "default 512 tokens a step");
    ck_assert_uint_eq(pl.block_bytes, 10240);
    ck_assert_int_eq(pl.n_blocks, 4 * 2048 / 16); /* parallel full contexts */
    ck_assert_uint_eq(pl.kv_bytes, 512u * 10240u);
    ck_assert_ptr_nonnull(strstr(pl.kv_rule, "parallel 4 x context 2048"));
    ck_assert_str_eq(pl.parallel_rule, "");
    /* the default pool above half the memory budget is capped there */
    p.kv_mem_max = 100 * 10240 + 5;
    ck_assert_int_eq(sched_plan(&p, &hp, 512, &pl, &err), 0);
    ck_assert_int_eq(pl.n_blocks, 100);
    ck_assert_ptr_nonnull(strstr(pl.kv_rule, "capped at half the memory budget"));
    ck_assert_int_eq(pl.n_ctx, 1600); /* one session never needs more than the pool */
    ck_assert_ptr_nonnull(strstr(pl.ctx_rule, "cut to the KV pool's 1600 positions"));
    /* set values: kv-mem in whole blocks, batch capped, parallel lowered */
    p.kv_mem_max = 0;
    p.kv_mem = 64 * 10240 + 100;
    p.n_ctx = 300;
    p.n_batch = 2048;
    ck_assert_int_eq(sched_plan(&p, &hp, 512, &pl, &err), 0);
    ck_assert_int_eq(pl.n_blocks, 64);
    ck_assert_int_eq(pl.n_ctx, 300);
    ck_assert_str_eq(pl.ctx_rule, "");
    ck_assert_int_eq(pl.n_batch, 512);
    ck_assert_str_eq(pl.batch_rule, "2048 asked, capped at 512 entries a forward pass");
    p.n_batch = 3;
    ck_assert_int_eq(sched_plan(&p, &hp, 512, &pl, &err), 0);
    ck_assert_int_eq(pl.parallel, 2);
    ck_assert_ptr_nonnull(strstr(pl.parallel_rule, "4 asked, lowered"));
    p.kv_mem = 100; /* less than a block */
    ck_assert_int_eq(sched_plan(&p, &hp, 512, &pl, &err), STRATA_E_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.message, "less than one KV block"));
    /* a trained context over 1M is capped */
    p.kv_mem = 0;
    p.n_ctx = 0;
    p.n_batch = 0;
    hp.n_ctx_train = 1 << 22;
    ck_assert_int_eq(sched_plan(&p, &hp, 512, &pl, &err), 0);
    ck_assert_int_eq(pl.n_ctx, 1 << 20);
    ck_assert_ptr_nonnull(strstr(pl.ctx_rule, "capped at 1048576"));
}
END_TEST

static Suite *sched_suite(void) {
    Suite *su = suite_create("sched");
    TCase *tc = tcase_create("sched");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_batched_equals_alone);
    tcase_add_test(tc, test_sampled_batched_equals_alone);
    tcase_add_test(tc, test_prefix_reuse);
    tcase_add_test(tc, test_prefix_partitions);
    tcase_add_test(tc, test_huge_prompt_does_not_stall);
    tcase_add_test(tc, test_first_token_eos);
    tcase_add_test(tc, test_chat_second_turn);
    tcase_add_test(tc, test_pool_exhaustion_waits);
    tcase_add_test(tc, test_no_max_tokens_cannot_hold_the_pool);
    tcase_add_test(tc, test_joins_bounded_while_decoding);
    tcase_add_test(tc, test_queue_full);
    tcase_add_test(tc, test_cancel_mid_decode_and_prefill);
    tcase_add_test(tc, test_deadline);
    tcase_add_test(tc, test_shutdown_with_live_jobs);
    tcase_add_test(tc, test_plan_rules);
    suite_add_tcase(su, tc);
    return su;
}

STRATA_TEST_MAIN("sched", sched_suite)
