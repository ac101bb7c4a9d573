/* server/sched-prep.c: the prep thread (see sched.h): every submitted
 * prompt is rendered, tokenized and checked here before the job joins the
 * scheduler's queue. */
#include <stdlib.h>

#include "server/sched-impl.h"

/* Every prompt is rendered, tokenized and checked against the context here,
 * off the scheduler thread, so no request stalls the running streams. On
 * the scheduler thread a 1 MB prompt (refused: context length) froze a
 * decoding stream for 0.475 s, its whole tokenizing time; here the stream's
 * longest gap was 0.010 s (tests/server/test-sched.c
 * test_huge_prompt_does_not_stall, ASan build, stories260K, 2-vCPU Xeon).
 * One thread, FIFO: jobs reach the queue in submit order. */

/* Appends j to incoming and wakes the scheduler; s->mu held. */
void sched_to_incoming(struct sched *s, struct gen_job *j) {
    j->next = NULL;
    if (s->incoming_tail)
        s->incoming_tail->next = j;
    else
        s->incoming = j;
    s->incoming_tail = j;
    atomic_fetch_sub(&s->n_prep, 1);
    pthread_cond_signal(&s->cond);
}

void *sched_prep_main(void *arg) {
    struct sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->prep_stop && !s->prep_head)
            pthread_cond_wait(&s->prep_cond, &s->mu);
        if (s->prep_stop)
            break; /* sched_free hands the rest on untokenized */
        struct gen_job *j = s->prep_head;
        s->prep_head = j->next;
        if (!s->prep_head)
            s->prep_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        if (atomic_load(&j->cancelled)) {
            j->tok_rc = strata_error_set(&j->tok_err, STRATA_E_CANCELLED, "request cancelled");
        } else {
            session_tokenize(s, j);
        }
        j->tokenized = true;
        pthread_mutex_lock(&s->mu);
        sched_to_incoming(s, j);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
