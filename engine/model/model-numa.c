/* engine/model/model-numa.c: --numa around a model's load (model-numa.h). */
#include "engine/model/model-numa.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/host/numa-homes.h"
#include "engine/host/pool.h"
#include "engine/model/model.h"

/* 1024 pages of the file: the ~1% resolution the 90% rule needs, and
 * under a millisecond of mincore + move_pages. */
#define NUMA_PRESAMPLES 1024

static int presample(const char *path, const struct host_numa_ops *ops, struct host_numa_share *out,
                     struct strata_error *err) {
    memset(out, 0, sizeof *out);
    out->source = "none";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* model_load reports the missing file */
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            /* a fresh mapping maps no page: mincore still answers from the page cache */
            rc = host_numa_sample(ops, p, (size_t)st.st_size, NUMA_PRESAMPLES, out, err);
            munmap(p, (size_t)st.st_size);
        }
    }
    close(fd);
    return rc;
}

int model_numa_prepare(const char *path, const char *mode, struct pool *pool, int gpu_node,
                       const struct host_numa_ops *ops, struct host_numa_report *rep,
                       struct strata_error *err) {
    memset(rep, 0, sizeof *rep);
    rep->placement = "none";
    rep->share[0] = rep->share[1] = -1;
    rep->before.source = "none";
    struct host_numa_mode m;
    if (host_numa_mode_parse(mode, &m, err) < 0)
        return -1;
    const struct host_numa_topo *t = host_numa_topo();
    if (m.kind != HOST_NUMA_OFF && t && t->n_nodes > 1) {
        struct strata_error se = {0};
        if (presample(path, ops, &rep->before, &se) < 0)
            snprintf(rep->note, sizeof rep->note, "page sample: %.180s", se.message);
    }
    const int n_threads = pool ? pool_n_threads(pool) : 1;
    if (host_numa_decide(t, &m, n_threads, &rep->before, gpu_node, &rep->plan, err) < 0)
        return -1;
    struct strata_error ae = {0};
    if (host_numa_apply(&rep->plan, pool, ops, &ae) < 0) {
        snprintf(rep->note, sizeof rep->note, "%.190s", ae.message);
        snprintf(rep->plan.why + strlen(rep->plan.why),
                 sizeof rep->plan.why - strlen(rep->plan.why), " (refused: unbound)");
        rep->plan.n_groups = 0;
    }
    return 0;
}

int model_numa_gpu_node(const struct host_numa_pci *pci) {
    return pci ? host_numa_gpu_node_by_pci(host_numa_topo(), pci) : -1;
}

/* NUMA_EXPERT_SAMPLES pages of an expert's gate matrix tell where it sits
 * (a 768 x 2048 Q4_K matrix is 216 pages; 8 per expert keep the pass
 * under 50k pages for qwen3-30b-a3b's 6144 experts). */
#define NUMA_EXPERT_SAMPLES 8

/* Where a sample of expert e's gate pages sits under a two-node split: the
 * group whose node holds >= HOST_NUMA_HOME_SHARE of it, or -1 (not
 * resident, spread, or one node: logical halves cannot be told apart).
 * *gate: the layer's gate stack (NULL when ti is not an expert stack). */
static int sampled_home(const struct gguf_file *g, const struct gguf_tensor_info *ti, int64_t e,
                        int64_t n_mat, const struct host_numa_plan *plan,
                        const struct host_numa_ops *ops, const struct gguf_tensor_info **gate) {
    int layer = -1;
    char name[96];
    *gate = NULL;
    if (plan->logical || plan->node[0] == plan->node[1] || ti->name.len >= sizeof name)
        return -1;
    memcpy(name, ti->name.ptr, ti->name.len);
    name[ti->name.len] = 0;
    if (sscanf(name, "blk.%d.ffn_", &layer) != 1 || !strstr(name, "_exps"))
        return -1;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", layer);
    const struct gguf_tensor_info *gt = gguf_find_tensor(g, name);
    if (!gt || gt->n_dims < 3 || gt->ne[2] != n_mat)
        return -1;
    *gate = gt;
    const uint64_t mb = gt->n_bytes / (uint64_t)n_mat;
    const uint8_t *a = (const uint8_t *)gt->data + (size_t)e * mb;
    /* the pages wholly inside the expert: an edge page is shared with a
     * neighbour, which may sit elsewhere (1 of 8 samples would sink the 90%) */
    const long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t pg = ps > 0 ? (uintptr_t)ps : 4096, lo = ((uintptr_t)a + pg - 1) & ~(pg - 1);
    const uintptr_t hi = ((uintptr_t)a + mb) & ~(pg - 1);
    struct host_numa_share sh;
    if (host_numa_sample(ops, hi > lo ? (const void *)lo : a, hi > lo ? hi - lo : mb,
                         NUMA_EXPERT_SAMPLES, &sh, NULL) < 0 ||
        !sh.resident)
        return -1;
    for (int k = 0; k < 2; k++)
        if (host_numa_share_of(&sh, plan->node[k]) >= HOST_NUMA_HOME_SHARE)
            return k;
    return -1;
}

/* The home group of expert e (taken in id order, cnt[] the homes given so
 * far in this stack) under a split: where its pages sit (sampled_home),
 * else the rule (host_numa_home_rule), but never more experts for a group
 * than its threads' share of the layer (n_mat * threads[g] / all), so a
 * file first read by one node does not home every expert there (the rest
 * are moved instead). Each of a layer's three stacks gets the same answers
 * (the samples are of the gate's pages, taken before anything moves); a
 * home the rule would not give is registered (numa-homes.h) with the gate,
 * so the MoE division computes the expert where its pages are. */
static int expert_home(const struct gguf_file *g, const struct gguf_tensor_info *ti, int64_t e,
                       int64_t n_mat, const struct host_numa_plan *plan,
                       const struct host_numa_ops *ops, const int threads[2], int cnt[2]) {
    const int rule = host_numa_home_rule((int)e, threads);
    const struct gguf_tensor_info *gate;
    int home = sampled_home(g, ti, e, n_mat, plan, ops, &gate);
    home = home < 0 ? rule : home;
    const int64_t all = (int64_t)threads[0] + threads[1];
    const int64_t q1 = all > 0 ? n_mat * threads[1] / all : 0, quota[2] = {n_mat - q1, q1};
    if (cnt[home] >= quota[home])
        home = 1 - home;
    cnt[home]++;
    if (home != rule && gate == ti) {
        const uint64_t mb = gate->n_bytes / (uint64_t)n_mat;
        /* refused (an overlap): the division uses the rule's group */
        (void)host_numa_homes_add((const uint8_t *)gate->data + (size_t)e * mb, mb, home, NULL);
    }
    return home;
}

int model_numa_finish(const struct model *m, struct pool *pool, const struct host_numa_ops *ops,
                      bool force, struct host_numa_report *rep, struct strata_error *err) {
    const char *layout = model_weights_layout(m);
    if (!rep->plan.n_groups) {
        host_numa_report_publish(rep);
        return 0;
    }
    if (strncmp(layout, "arena", 5) == 0) {
        rep->placement = "first touch (arena)";
        rep->bytes_first_touched = model_copied_bytes(m);
        host_numa_report_publish(rep);
        return 0;
    }
    /* the weights stay in the file: its page-cache pages are placed */
    const struct gguf_file *g = model_gguf(m);
    const uint8_t *base = gguf_file_base(g);
    const int64_t n = gguf_n_tensors(g);
    /* two spans a matrix, or an expert of a stack (n_dims 3: its matmuls run
     * per expert over ne[1] rows) */
    size_t cap = 1;
    for (int64_t i = 0; i < n; i++) {
        const struct gguf_tensor_info *ti = gguf_tensor_at(g, i);
        cap += ti && ti->n_dims >= 3 && ti->ne[2] > 0 ? 2 * (size_t)ti->ne[2] : 2;
    }
    int threads[2] = {0, 0}; /* per pool group */
    for (int w = 0; pool && pool_n_groups(pool) == 2 && w < pool_n_threads(pool); w++)
        threads[pool_group_of(pool, w)]++;
    struct host_numa_span *sp = calloc(cap, sizeof *sp);
    int fd = open(gguf_path(g), O_RDONLY | O_CLOEXEC);
    int rc = 0, k = 0;
    if (!sp || fd < 0) {
        rc = strata_error_set(err, sp ? STRATA_E_IO : STRATA_E_NOMEM,
                              "numa: cannot place the file's pages (%s)", gguf_path(g));
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const struct gguf_tensor_info *ti = gguf_tensor_at(g, i);
        if (!ti || !ti->n_bytes)
            continue;
        const int64_t n_mat = ti->n_dims >= 3 && ti->ne[2] > 0 ? ti->ne[2] : 1;
        int64_t rows = 1;
        for (uint32_t d = 1; d < ti->n_dims; d++)
            rows *= ti->ne[d];
        rows /= n_mat; /* rows of one matrix (one expert of a stack) */
        const uint64_t mat_bytes = ti->n_bytes / (uint64_t)n_mat;
        const uint64_t row_bytes = rows > 0 ? mat_bytes / (uint64_t)rows : mat_bytes;
        /* rows [0, cut) are group 0's in every kernel over this matrix */
        const int64_t cut =
            pool && pool_n_groups(pool) == 2 ? pool_group_bound(pool, rows, 0) : rows;
        int homes[2] = {0, 0}; /* experts of this stack homed per group so far */
        for (int64_t e = 0; e < n_mat; e++) {
            const uint8_t *a = (const uint8_t *)ti->data + (size_t)e * mat_bytes;
            const uint64_t off = (uint64_t)(a - base);
            uint64_t b0 = (uint64_t)cut * row_bytes;
            if (n_mat > 1 && pool &&
                pool_n_groups(pool) == 2) /* split: an expert whole on its home's node */
                b0 = expert_home(g, ti, e, n_mat, &rep->plan, ops, threads, homes) ? 0 : mat_bytes;
            if (b0)
                sp[k++] = (struct host_numa_span){a, b0, off, 0};
            if (mat_bytes > b0)
                sp[k++] = (struct host_numa_span){a + b0, mat_bytes - b0, off + b0, 1};
        }
    }
    struct host_numa_placement pl;
    if (host_numa_place_file_pages(&rep->plan, pool, ops, fd, sp, k, force, &pl, err) < 0) {
        rc = -1;
        goto done;
    }
    rep->placement = "page cache";
    rep->bytes_moved = pl.bytes_moved;
    rep->bytes_filled = pl.bytes_filled;
    rep->share[0] = pl.share_after[0];
    rep->share[1] = rep->plan.n_groups == 2 ? pl.share_after[1] : -1;
    rep->place_ms = pl.ms;
    host_numa_report_publish(rep);
done:
    if (fd >= 0)
        close(fd);
    free(sp);
    return rc;
}

void model_numa_line(const struct host_numa_report *rep, char *buf, size_t cap) {
    const struct host_numa_topo *t = host_numa_topo();
    char sh[64] = "";
    if (rep->share[0] >= 0 && rep->share[1] >= 0)
        snprintf(sh, sizeof sh, ", shares %.1f%% / %.1f%%", rep->share[0] * 100,
                 rep->share[1] * 100);
    else if (rep->share[0] >= 0)
        snprintf(sh, sizeof sh, ", share %.1f%%", rep->share[0] * 100);
    snprintf(
        buf, cap,
        "%d node%s, %d packages, %d cores, %d CPUs%s; %s; placement %s (%.1f MB first-touched, "
        "%.1f MB moved, %.1f MB filled%s, %.0f ms)%s%s",
        t ? t->n_nodes : 0, t && t->n_nodes == 1 ? "" : "s", t ? t->n_packages : 0,
        t ? t->n_cores : 0, t ? t->n_pus : 0, t && t->smt ? " (SMT)" : "", rep->plan.why,
        rep->placement, (double)rep->bytes_first_touched / 1e6, (double)rep->bytes_moved / 1e6,
        (double)rep->bytes_filled / 1e6, sh, rep->place_ms, rep->note[0] ? "; " : "", rep->note);
}
