/* engine/experts/profile.h: routing profile: how often each (layer, expert) was
 * picked by the router while serving, saved to a small file that the next
 * start reads to fill the VRAM arena with the hottest experts first
 * (DESIGN.md "Tiers of an expert's bytes").
 *
 *   struct profile *p = profile_init(n_layer, n_expert, &err);
 *   mp.profile = p;                      // model_forward counts every routed pick
 *   profile_save(p, "routing.prof", &err);
 *   struct profile *q = profile_load("routing.prof", &err);
 *   uint64_t c = profile_count(q, layer, expert);
 *
 * File layout (little-endian):
 *   u32 magic "SPRF" | u32 version (1) | u32 n_layer | u32 n_expert
 *   n_layer x n_expert x u64 count (row-major: layer, then expert)
 * Saved through a temporary file and rename, so a crash never leaves a
 * half-written profile.
 *
 * Threading: profile_add is called by the forward thread; save/load/count
 * from the same thread (the scheduler's). Not internally locked.
 */
#ifndef STRATA_PROFILE_H
#define STRATA_PROFILE_H

#include <stdint.h>

#include "engine/core/error.h"

#define PROFILE_MAGIC 0x46525053u /* "SPRF" as little-endian u32 */
#define PROFILE_VERSION 1u
#define PROFILE_MAX_DIM 65536 /* n_layer and n_expert limit when loading */

struct profile;

struct profile *profile_init(int n_layer, int n_expert,
                             struct strata_error *err); /* owned: free with profile_free() */
void profile_free(struct profile *p);                   /* NULL is a no-op */

int profile_n_layer(const struct profile *p);
int profile_n_expert(const struct profile *p);
/* Counts one pick; out-of-range ids are ignored. */
void profile_add(struct profile *p, int layer, int expert);
uint64_t profile_count(const struct profile *p, int layer, int expert); /* 0 when out of range */
uint64_t profile_total(const struct profile *p);
void profile_reset(struct profile *p);
/* Adds q's counts into p (same shape, else STRATA_E_INVALID). */
int profile_merge(struct profile *p, const struct profile *q, struct strata_error *err);

int profile_save(const struct profile *p, const char *path, struct strata_error *err);
struct profile *profile_load(const char *path,
                             struct strata_error *err); /* owned: free with profile_free() */

#endif
