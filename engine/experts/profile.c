/* engine/experts/profile.c: per (layer, expert) routing counts and their file (see
 * profile.h for the byte layout). */
#include "engine/experts/profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct profile {
    int n_layer, n_expert;
    uint64_t *counts; /* (n_layer, n_expert) */
};

struct profile *profile_init(int n_layer, int n_expert, struct strata_error *err) {
    if (n_layer < 1 || n_expert < 1 || n_layer > PROFILE_MAX_DIM || n_expert > PROFILE_MAX_DIM) {
        strata_error_set(err, STRATA_E_INVALID, "profile: shape %d x %d outside [1, %d]", n_layer,
                         n_expert, PROFILE_MAX_DIM);
        return NULL;
    }
    struct profile *p = calloc(1, sizeof *p);
    if (!p)
        goto fail;
    p->n_layer = n_layer;
    p->n_expert = n_expert;
    p->counts = calloc((size_t)n_layer * (size_t)n_expert, sizeof *p->counts);
    if (!p->counts)
        goto fail;
    return p;
fail:
    profile_free(p);
    strata_error_set(err, STRATA_E_NOMEM, "profile: out of memory");
    return NULL;
}

void profile_free(struct profile *p) {
    if (!p)
        return;
    free(p->counts);
    free(p);
}

int profile_n_layer(const struct profile *p) {
    return p->n_layer;
}

int profile_n_expert(const struct profile *p) {
    return p->n_expert;
}

void profile_add(struct profile *p, int layer, int expert) {
    if (layer < 0 || layer >= p->n_layer || expert < 0 || expert >= p->n_expert)
        return;
    p->counts[(size_t)layer * p->n_expert + expert]++;
}

uint64_t profile_count(const struct profile *p, int layer, int expert) {
    if (layer < 0 || layer >= p->n_layer || expert < 0 || expert >= p->n_expert)
        return 0;
    return p->counts[(size_t)layer * p->n_expert + expert];
}

uint64_t profile_total(const struct profile *p) {
    uint64_t t = 0;
    for (size_t i = 0; i < (size_t)p->n_layer * p->n_expert; i++)
        t += p->counts[i];
    return t;
}

void profile_reset(struct profile *p) {
    memset(p->counts, 0, (size_t)p->n_layer * p->n_expert * sizeof *p->counts);
}

int profile_merge(struct profile *p, const struct profile *q, struct strata_error *err) {
    if (p->n_layer != q->n_layer || p->n_expert != q->n_expert)
        return strata_error_set(err, STRATA_E_INVALID, "profile: merge of %dx%d into %dx%d",
                                q->n_layer, q->n_expert, p->n_layer, p->n_expert);
    for (size_t i = 0; i < (size_t)p->n_layer * p->n_expert; i++)
        p->counts[i] += q->counts[i];
    return 0;
}

static void put_u32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int profile_save(const struct profile *p, const char *path, struct strata_error *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return strata_error_set(err, STRATA_E_INVALID, "profile: path too long");
    FILE *fp = fopen(tmp, "wb");
    if (!fp)
        return strata_error_set(err, STRATA_E_IO, "profile: cannot create %s: %s", tmp,
                                strerror(errno));
    uint8_t hdr[16];
    put_u32(hdr, PROFILE_MAGIC);
    put_u32(hdr + 4, PROFILE_VERSION);
    put_u32(hdr + 8, (uint32_t)p->n_layer);
    put_u32(hdr + 12, (uint32_t)p->n_expert);
    int ok = fwrite(hdr, 1, sizeof hdr, fp) == sizeof hdr;
    for (size_t i = 0; ok && i < (size_t)p->n_layer * p->n_expert; i++) {
        uint8_t b[8];
        for (int j = 0; j < 8; j++)
            b[j] = (uint8_t)(p->counts[i] >> (8 * j));
        ok = fwrite(b, 1, 8, fp) == 8;
    }
    if (fclose(fp) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return strata_error_set(err, STRATA_E_IO, "profile: cannot write %s", path);
    }
    return 0;
}

struct profile *profile_load(const char *path, struct strata_error *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        strata_error_set(err, STRATA_E_IO, "profile: cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct profile *p = NULL;
    uint8_t hdr[16];
    if (fread(hdr, 1, sizeof hdr, fp) != sizeof hdr || get_u32(hdr) != PROFILE_MAGIC ||
        get_u32(hdr + 4) != PROFILE_VERSION) {
        strata_error_set(err, STRATA_E_FORMAT, "profile: %s: bad header", path);
        goto out;
    }
    uint32_t nl = get_u32(hdr + 8), ne = get_u32(hdr + 12);
    if (nl < 1 || ne < 1 || nl > PROFILE_MAX_DIM || ne > PROFILE_MAX_DIM) {
        strata_error_set(err, STRATA_E_FORMAT, "profile: %s: shape %ux%u out of range", path, nl,
                         ne);
        goto out;
    }
    p = profile_init((int)nl, (int)ne, err);
    if (!p)
        goto out;
    for (size_t i = 0; i < (size_t)nl * ne; i++) {
        uint8_t b[8];
        if (fread(b, 1, 8, fp) != 8) {
            strata_error_set(err, STRATA_E_FORMAT, "profile: %s: truncated", path);
            profile_free(p);
            p = NULL;
            goto out;
        }
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            v |= (uint64_t)b[j] << (8 * j);
        p->counts[i] = v;
    }
out:
    fclose(fp);
    return p;
}
