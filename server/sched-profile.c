/* server/sched-profile.c: the routing profile's owner (see sched.h,
 * "Routing profile"): created for a MoE model, loaded and merged at start,
 * counted by model_forward, saved periodically by the scheduler thread and
 * once more at shutdown.
 *
 * Threading: sched_profile_start runs in sched_init before the scheduler
 * thread exists; tick and due on the scheduler thread (the thread that runs
 * model_forward, so the counts are never read while being written), tick
 * with force once more in sched_free after the thread joined; stats under
 * s->stats.mu from publish_stats (scheduler thread). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/core/clock.h"
#include "engine/experts/profile.h"
#include "server/sched-impl.h"

/* Moves a refused file aside (PATH.refused) so the first save does not
 * destroy what may be another model's profile; records why in the state. */
static void refuse(struct sched *s, const char *why) {
    char aside[sizeof s->profile_path + 16];
    snprintf(aside, sizeof aside, "%s.refused", s->profile_path);
    if (rename(s->profile_path, aside) == 0)
        snprintf(s->profile_state, sizeof s->profile_state,
                 "refused (%.400s); kept as %s; recording a fresh profile", why, aside);
    else
        snprintf(s->profile_state, sizeof s->profile_state,
                 "refused (%.400s); could not move it aside (%s): the first save replaces it; "
                 "recording a fresh profile",
                 why, strerror(errno));
}

/* Loads an existing file into s->profile (same shape: merged), or refuses it. */
static void load_existing(struct sched *s, const struct model_hparams *hp) {
    struct strata_error lerr = {0};
    struct profile *q = profile_load(s->profile_path, &lerr);
    if (!q) {
        refuse(s, lerr.message);
        return;
    }
    if (profile_n_layer(q) != hp->n_layer || profile_n_expert(q) != hp->n_expert) {
        char why[160];
        snprintf(why, sizeof why, "it counts %d layers x %d experts, the model has %d x %d",
                 profile_n_layer(q), profile_n_expert(q), hp->n_layer, hp->n_expert);
        profile_free(q);
        refuse(s, why);
        return;
    }
    profile_merge(s->profile, q, NULL); /* same shape: cannot fail */
    profile_free(q);
    s->profile_loaded = profile_total(s->profile);
    snprintf(s->profile_state, sizeof s->profile_state, "loaded %llu picks (%llu tokens)",
             (unsigned long long)s->profile_loaded,
             (unsigned long long)(s->profile_loaded / (uint64_t)s->profile_per_token));
}

int sched_profile_start(struct sched *s, struct strata_error *err) {
    const char *path = s->p.expert_profile;
    s->p.expert_profile = NULL; /* borrowed for sched_init only */
    if (!path || !*path)
        return 0;
    if (snprintf(s->profile_path, sizeof s->profile_path, "%s", path) >=
        (int)sizeof s->profile_path)
        return strata_error_set(err, STRATA_E_CONFIG, "expert-profile: path longer than %zu bytes",
                                sizeof s->profile_path - 1);
    const struct model_hparams *hp = model_hparams(s->model);
    if (hp->n_expert <= 0 || hp->n_expert_used <= 0) {
        snprintf(s->profile_state, sizeof s->profile_state, "off: a dense model routes no experts");
        return 0;
    }
    if (!(s->profile = profile_init(hp->n_layer, hp->n_expert, err)))
        return err && err->code ? err->code : STRATA_E_NOMEM;
    s->profile_per_token = (int64_t)hp->n_layer * hp->n_expert_used;
    struct stat st;
    if (stat(s->profile_path, &st) == 0)
        load_existing(s, hp);
    else if (errno == ENOENT)
        snprintf(s->profile_state, sizeof s->profile_state,
                 "fresh (no file yet: the first save creates it)");
    else
        snprintf(s->profile_state, sizeof s->profile_state, "fresh (cannot read the file: %s)",
                 strerror(errno));
    if (model_set_profile(s->model, s->profile, err) < 0)
        return err && err->code ? err->code : STRATA_E_INVALID;
    s->profile_saved = s->profile_picks = profile_total(s->profile);
    s->profile_t_save = strata_now();
    return 0;
}

void sched_profile_tick(struct sched *s, double now, bool force) {
    if (!s->profile)
        return;
    /* n_layer x n_expert adds (48 x 128 for qwen3-30b-a3b): microseconds a step */
    s->profile_picks = profile_total(s->profile);
    if (s->profile_picks == s->profile_saved)
        return;
    if (!force && now - s->profile_t_save < s->p.profile_interval_s)
        return;
    s->profile_t_save = now;
    struct strata_error err = {0};
    if (profile_save(s->profile, s->profile_path, &err) < 0) {
        if (strcmp(err.message, s->profile_error)) /* once per distinct failure */
            fprintf(stderr, "strata: expert profile: %s\n", err.message);
        snprintf(s->profile_error, sizeof s->profile_error, "%s", err.message);
        return;
    }
    s->profile_error[0] = '\0';
    s->profile_saved = s->profile_picks;
    s->profile_saves++;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->profile_last_save = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sched_profile_due(const struct sched *s) {
    if (!s->profile || s->profile_picks == s->profile_saved)
        return 0;
    return s->profile_t_save + s->p.profile_interval_s;
}

void sched_profile_stats(const struct sched *s, struct gen_stats *st) {
    snprintf(st->profile_path, sizeof st->profile_path, "%s", s->profile_path);
    snprintf(st->profile_state, sizeof st->profile_state, "%s", s->profile_state);
    st->profile_active = s->profile != NULL;
    st->profile_picks = s->profile_picks;
    st->profile_tokens =
        s->profile_per_token > 0 ? s->profile_picks / (uint64_t)s->profile_per_token : 0;
    st->profile_loaded_picks = s->profile_loaded;
    st->profile_saves = s->profile_saves;
    st->profile_last_save = s->profile_last_save;
    snprintf(st->profile_save_error, sizeof st->profile_save_error, "%s", s->profile_error);
}
