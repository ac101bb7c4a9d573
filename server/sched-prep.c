/* server/sched-prep.c: the prep lanes (see sched.h): every submitted prompt
 * is rendered, tokenized and checked against the context here, before the
 * job joins the scheduler's queue.
 *
 * Why off the scheduler thread: there, a 1 MB prompt (refused: context
 * length) froze a decoding stream for 0.475 s, its whole tokenizing time;
 * here the stream's longest gap was 0.010 s (tests/server/test-sched.c
 * test_huge_prompt_does_not_stall, ASan build, stories260K, 2-vCPU Xeon).
 *
 * Why two lanes: one FIFO thread made every new request wait behind a huge
 * prompt being tokenized (tests/peers/hostile.py: a stream restarted behind
 * 1.9 MB prompts waited 0.56 s for its first token). Prompts of
 * PREP_LONG_BYTES or more go to their own lane, so a client looping huge
 * prompts delays only other huge prompts. Within a lane jobs keep their
 * submit order; across lanes a short prompt may overtake a long one.
 *
 * Threading: each lane is one persistent thread; the queues and prep_stop
 * are guarded by s->mu. job_tokenize touches only its job and reads the
 * immutable session base (engine/session: session_prompt). */
#include <stdlib.h>

#include "server/sched-impl.h"

/* 64 KiB of prompt text tokenizes in ~30 ms in the ASan build (1 MB took
 * 0.475 s in test-sched), a few ms in release: short enough to keep the
 * short lane quick, far above any chat turn. */
#define PREP_LONG_BYTES (64u << 10)

/* Bytes of prompt text a request brings (what tokenizing costs). */
static size_t prompt_bytes(const struct openai_request *rq) {
    if (rq->route != GEN_ROUTE_CHAT)
        return rq->prompt_len;
    size_t n = 0, i, k;
    json_t *m, *part;
    json_array_foreach(rq->messages, i, m) {
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c))
            n += json_string_length(c);
        else if (json_is_array(c))
            json_array_foreach(c, k, part) n += json_string_length(json_object_get(part, "text"));
    }
    return n;
}

/* Appends j to incoming and wakes the scheduler; s->mu held. */
static void to_incoming(struct sched *s, struct gen_job *j) {
    j->next = NULL;
    if (s->incoming_tail)
        s->incoming_tail->next = j;
    else
        s->incoming = j;
    s->incoming_tail = j;
    atomic_fetch_sub(&s->n_prep, 1);
    pthread_cond_signal(&s->cond);
}

static void *lane_main(void *arg) {
    struct sched_prep_lane *lane = arg;
    struct sched *s = lane->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->prep_stop && !lane->head)
            pthread_cond_wait(&lane->cond, &s->mu);
        if (s->prep_stop)
            break; /* sched_prep_stop hands the rest on untokenized */
        /* one job, or the choices of one request (sched_prep_submit_group
         * queued them together): they reach the scheduler together */
        struct gen_job *first = lane->head, *last = first;
        while (last->grp && last->next && last->next->grp == last->grp)
            last = last->next;
        lane->head = last->next;
        if (!lane->head)
            lane->tail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->mu);
        for (struct gen_job *j = first; j; j = j->next) {
            if (atomic_load(&j->cancelled))
                j->tok_rc = strata_error_set(&j->tok_err, STRATA_E_CANCELLED, "request cancelled");
            else
                job_tokenize(s, j);
            j->tokenized = true;
        }
        pthread_mutex_lock(&s->mu);
        for (struct gen_job *j = first, *next; j; j = next) {
            next = j->next;
            to_incoming(s, j);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int sched_prep_start(struct sched *s, struct strata_error *err) {
    for (int i = 0; i < 2; i++) {
        struct sched_prep_lane *lane = &s->prep[i];
        lane->s = s;
        if (pthread_cond_init(&lane->cond, NULL) != 0)
            return strata_error_set(err, STRATA_E_INTERNAL, "sched: cannot make a condition");
        lane->cond_ok = true;
        if (pthread_create(&lane->thread, NULL, lane_main, lane) != 0)
            return strata_error_set(err, STRATA_E_INTERNAL, "sched: cannot start a prompt thread");
        lane->started = true;
    }
    return 0;
}

/* The choices of one request go to one lane (the longest prompt's) in one
 * step, and lane_main hands them to the scheduler in one step: a first
 * choice that was admitted, prefilled and finished before its siblings were
 * tokenized left them nothing to fork (n = 4 with max_tokens 2 computed its
 * prompt four times in 3 of 6 runs of tests/peers/api-real.py on a 2-vCPU
 * Xeon; sched-group.c, KV sharing). */
void sched_prep_submit_group(struct sched *s, struct gen_job **jobs, int n) {
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        const size_t b = prompt_bytes(&jobs[i]->rq);
        most = b > most ? b : most;
    }
    struct sched_prep_lane *lane = &s->prep[most >= PREP_LONG_BYTES ? 1 : 0];
    atomic_fetch_add(&s->n_prep, n);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        struct gen_job *j = jobs[i];
        j->next = NULL;
        if (lane->tail)
            lane->tail->next = j;
        else
            lane->head = j;
        lane->tail = j;
    }
    pthread_cond_signal(&lane->cond);
    pthread_mutex_unlock(&s->mu);
}

void sched_prep_submit(struct sched *s, struct gen_job *j) {
    sched_prep_submit_group(s, &j, 1);
}

void sched_prep_stop(struct sched *s) {
    pthread_mutex_lock(&s->mu);
    s->prep_stop = true;
    for (int i = 0; i < 2; i++)
        if (s->prep[i].cond_ok)
            pthread_cond_signal(&s->prep[i].cond);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < 2; i++) {
        if (s->prep[i].started)
            pthread_join(s->prep[i].thread, NULL);
        s->prep[i].started = false;
    }
    /* The scheduler's stop is set with the hand-over, under one lock: it
     * then ends every untokenized job (CANCELLED) instead of admitting one. */
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    for (int i = 0; i < 2; i++) {
        struct sched_prep_lane *lane = &s->prep[i];
        while (lane->head) {
            struct gen_job *j = lane->head;
            lane->head = j->next;
            to_incoming(s, j);
        }
        lane->tail = NULL;
    }
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < 2; i++) {
        if (s->prep[i].cond_ok)
            pthread_cond_destroy(&s->prep[i].cond);
        s->prep[i].cond_ok = false;
    }
}
