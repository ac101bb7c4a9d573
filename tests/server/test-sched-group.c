/* tests/server/test-sched-group.c: requests of several choices through the
 * real scheduler (server/sched-group.c, sched.c's fork at admission) on
 * stories260K: the later choices share the first one's prompt KV also with
 * the prefix cache off (counted, and no block leaks afterwards), one
 * sequence runs the choices one after the other, a cancel ends every
 * choice with one DONE, a failing choice fails the request once, and more
 * choices than the server can hold is refused at submit. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/scheduler.h"
#include "tests/harness.h"

struct greq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sched *s;
    struct gen_job *job;
    int n_done, n_error, n_usage, n_finish, n_delta;
    int err_code;
    int64_t n_prompt, n_completion;
    char *body;
    int cancel_after; /* cancel the job at that many DELTA events (0 = never) */
};

static void on_event(void *ctx, const struct gen_event *ev) {
    struct greq *r = ctx;
    pthread_mutex_lock(&r->mu);
    switch (ev->type) {
    case GEN_EV_DELTA:
        if (++r->n_delta == r->cancel_after && r->job)
            sched_gen_ops()->cancel(r->s, r->job);
        break;
    case GEN_EV_FINISH:
        r->n_finish++;
        break;
    case GEN_EV_USAGE:
        r->n_usage++;
        r->n_prompt = ev->n_prompt_tokens;
        r->n_completion = ev->n_completion_tokens;
        break;
    case GEN_EV_ERROR:
        r->n_error++;
        r->err_code = ev->error_code;
        break;
    case GEN_EV_DONE:
        r->n_done++;
        if (ev->json)
            r->body = strndup(ev->json, ev->json_len);
        pthread_cond_broadcast(&r->cv);
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&r->mu);
}

static struct sched *open_sched(int parallel, int queue, bool prefix) {
    char path[1024];
    struct sched_params sp = sched_params_default();
    sp.model_path = test_shared_path(path, sizeof(path), "models/stories260K.gguf");
    sp.n_threads = 1;
    sp.n_ctx = 256;
    sp.parallel = parallel;
    sp.queue = queue;
    sp.prefix_cache = prefix;
    struct strata_error err = {0};
    struct sched *s = sched_init(&sp, &err);
    ck_assert_msg(s != NULL, "sched_init: %s", err.message);
    return s;
}

/* Submits the JSON text; returns submit's rc (param: error.param). */
static int submit(struct greq *r, struct sched *s, const char *text, char *param) {
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->s = s;
    json_t *body = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(body);
    struct gen_submit gs = {.route = GEN_ROUTE_COMPLETION, .body = body};
    struct gen_submit_out out = {0};
    struct strata_error err = {0};
    pthread_mutex_lock(&r->mu);
    int rc = sched_gen_ops()->submit(s, &gs, (struct gen_sink){on_event, r}, &out, &err);
    r->job = out.job;
    pthread_mutex_unlock(&r->mu);
    if (param)
        snprintf(param, 64, "%s", out.error_param);
    json_decref(body);
    return rc;
}

static void wait_done(struct greq *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->n_done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    usleep(20000); /* a second DONE would arrive now */
    ck_assert_int_eq(r->n_done, 1);
    sched_gen_ops()->release(r->s, r->job);
    r->job = NULL;
}

static void greq_free(struct greq *r) {
    free(r->body);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static struct gen_stats settled(struct sched *s) {
    struct gen_stats st;
    for (int i = 0; i < 300; i++) {
        sched_gen_ops()->stats(s, &st);
        if (!st.n_active && !st.n_queued && !st.kv_blocks_used)
            break;
        usleep(10000);
    }
    ck_assert_int_eq(st.n_active, 0);
    ck_assert_int_eq(st.n_queued, 0);
    ck_assert_int_eq(st.kv_blocks_used, 0);
    ck_assert_int_eq(st.kv_blocks_free + st.kv_blocks_cached, st.kv_blocks_total);
    return st;
}

#define LONG_PROMPT                                                                                \
    "Once upon a time there was a little girl named Lily. She loved to play in the park with "     \
    "her friends and her dog. One day"

/* Prefix cache off: the sharing is the fork, not a cache hit. */
START_TEST(fork_without_prefix_cache) {
    struct sched *s = open_sched(4, 8, false);
    struct gen_stats s0 = settled(s);
    struct greq r;
    ck_assert_int_eq(submit(&r, s,
                            "{\"model\":\"stories260K\",\"prompt\":\"" LONG_PROMPT
                            "\",\"n\":3,\"max_tokens\":4,\"ignore_eos\":true}",
                            NULL),
                     0);
    wait_done(&r);
    ck_assert_int_eq(r.n_error, 0);
    ck_assert_int_eq(r.n_usage, 1);  /* one, summed */
    ck_assert_int_eq(r.n_finish, 3); /* one per choice */
    ck_assert_int_eq(r.n_completion, 12);
    const int64_t p = r.n_prompt;
    ck_assert_int_gt(p, 20);
    struct gen_stats s1 = settled(s);
    /* the first computes the prompt, the others its last token */
    ck_assert_int_eq((int64_t)(s1.tokens_prompt - s0.tokens_prompt), p + 2);
    ck_assert_int_eq((int64_t)(s1.shared_tokens - s0.shared_tokens), 2 * (p - 1));
    json_t *b = json_loads(r.body, 0, NULL);
    ck_assert_int_eq(json_array_size(json_object_get(b, "choices")), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(json_object_get(b, "choices"), i);
        ck_assert_int_eq(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
        ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
    }
    json_decref(b);
    greq_free(&r);
    sched_free(s);
}
END_TEST

/* One sequence: the choices run one after the other (no fork: the first has
 * ended when the next is admitted) and the request still completes. */
START_TEST(one_sequence_runs_them_in_turn) {
    struct sched *s = open_sched(1, 8, false);
    struct gen_stats s0 = settled(s);
    struct greq r;
    ck_assert_int_eq(submit(&r, s,
                            "{\"model\":\"stories260K\",\"prompt\":\"" LONG_PROMPT
                            "\",\"n\":3,\"max_tokens\":3,\"ignore_eos\":true,\"seed\":4}",
                            NULL),
                     0);
    wait_done(&r);
    ck_assert_int_eq(r.n_error, 0);
    ck_assert_int_eq(r.n_completion, 9);
    struct gen_stats s1 = settled(s);
    ck_assert_int_eq((int64_t)(s1.tokens_prompt - s0.tokens_prompt), 3 * r.n_prompt);
    ck_assert_int_eq((int64_t)(s1.shared_tokens - s0.shared_tokens), 0);
    greq_free(&r);
    sched_free(s);
}
END_TEST

START_TEST(cancel_ends_every_choice) {
    struct sched *s = open_sched(2, 8, true);
    struct greq r;
    ck_assert_int_eq(submit(&r, s,
                            "{\"model\":\"stories260K\",\"prompt\":\"Lily\",\"n\":4,\"max_tokens\":"
                            "200,\"ignore_eos\":true,\"stream\":true}",
                            NULL),
                     0);
    r.cancel_after = 5;
    wait_done(&r);
    ck_assert_int_eq(r.n_error, 1);
    ck_assert_int_eq(r.err_code, STRATA_E_CANCELLED);
    ck_assert_int_eq(r.n_usage, 0);
    settled(s);
    greq_free(&r);
    sched_free(s);
}
END_TEST

START_TEST(a_failing_choice_fails_the_request_once) {
    struct sched *s = open_sched(4, 8, true);
    /* the second prompt is longer than the context (256) */
    char *text = malloc(8192);
    int n = snprintf(text, 8192,
                     "{\"model\":\"stories260K\",\"n\":2,\"max_tokens\":8,\"prompt\":[\"a\",\"");
    for (int i = 0; i < 400; i++)
        n += snprintf(text + n, 8192 - (size_t)n, "dog ");
    snprintf(text + n, 8192 - (size_t)n, "\"]}");
    struct greq r;
    ck_assert_int_eq(submit(&r, s, text, NULL), 0);
    wait_done(&r);
    ck_assert_int_eq(r.n_error, 1);
    ck_assert_int_eq(r.err_code, STRATA_E_CONTEXT_LENGTH);
    ck_assert_ptr_null(r.body);
    settled(s);
    greq_free(&r);
    free(text);
    sched_free(s);
}
END_TEST

START_TEST(more_choices_than_the_server_holds) {
    struct sched *s = open_sched(1, 2, true);
    struct greq r;
    char param[64];
    ck_assert_int_eq(submit(&r, s, "{\"model\":\"stories260K\",\"prompt\":\"a\",\"n\":4}", param),
                     STRATA_E_RANGE);
    ck_assert_str_eq(param, "n");
    ck_assert_ptr_null(r.job);
    greq_free(&r);
    ck_assert_int_eq(submit(&r, s,
                            "{\"model\":\"stories260K\",\"prompt\":\"a\",\"n\":3,\"max_tokens\":2}",
                            NULL),
                     0);
    wait_done(&r);
    ck_assert_int_eq(r.n_error, 0);
    settled(s);
    greq_free(&r);
    sched_free(s);
}
END_TEST

static Suite *sched_group_suite(void) {
    Suite *s = suite_create("sched-group");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fork_without_prefix_cache);
    tcase_add_test(tc, one_sequence_runs_them_in_turn);
    tcase_add_test(tc, cancel_ends_every_choice);
    tcase_add_test(tc, a_failing_choice_fails_the_request_once);
    tcase_add_test(tc, more_choices_than_the_server_holds);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("sched-group", sched_group_suite)
