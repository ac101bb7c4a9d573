/* engine/core/progress.h: long operations (a model's load) tell how far they
 * are.
 *
 *   struct strata_progress pr = {on_progress, ctx};
 *   strata_progress_report(&pr, "copying weights", done_bytes, total_bytes);
 *
 * fn is called on the working thread, in order, with done <= total and done
 * not decreasing within one phase; the last call of a phase has done ==
 * total. It must be cheap (it may be called every few MB): throttle output
 * in fn. A NULL pointer or fn means nobody listens. */
#ifndef STRATA_PROGRESS_H
#define STRATA_PROGRESS_H

#include <stdint.h>

struct strata_progress {
    void (*fn)(void *arg, const char *phase, uint64_t done, uint64_t total);
    void *arg; /* borrowed */
};

static inline void strata_progress_report(const struct strata_progress *p, const char *phase,
                                          uint64_t done, uint64_t total) {
    if (p && p->fn)
        p->fn(p->arg, phase, done, total);
}

#endif
