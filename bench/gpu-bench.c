/* bench/gpu-bench.c: the forward pass on the Vulkan backend (not a test
 * suite; built as bench/gpu-bench, driven by bench/gpu).
 *
 *   gpu-bench MODEL [device=-1] [n_decode=128] [n_prefill=512] [batches=8,32]
 *             [profile=0] [hbm_gbs=4300] [pipeline_cache=FILE] [mm=auto] [fuse=103]
 *
 * Prints, one line each (and one JSON line at the end):
 *   tg: n_decode greedy decode steps of one sequence after a 1-token prompt
 *       (llama-bench's tg128), tok/s;
 *   pp: one chunk of n_prefill tokens (pp512), tok/s: the best of 3 after
 *       a first chunk (its first-use allocations; printed as pp first);
 *   bN: N sequences decoding together, n_decode / 4 steps of N entries each
 *       after a 1-token prompt each, tok/s over every sequence's tokens;
 *   the weight bytes one decode token reads (every tensor but token_embd,
 *   of which one row; routed experts at n_expert_used / n_expert of their
 *   bytes: what a step streams when the picks are spread) and the share of
 *   the device's bandwidth tg achieves: bytes/token x tok/s / hbm_gbs
 *   (4300 GB/s: the H200's ~4.3 TB/s the roofline uses; pass the
 *   device's own figure elsewhere).
 * profile=1 times every dispatch of an extra 16 decode steps
 * (STRATA_GPU_PROFILE's table) and prints it per kernel; profile=2 that of
 * one more prefill chunk. mm: the prefill matmul's path (vkmm_configure:
 * auto, f32, int-dot, coopmat[:tile], and the matvec's shape ",mv=WGxR1xR").
 * fuse: the backend's BACKEND_VK_FUSE_* bits (backend-vk.h; 103 the default,
 * 39 without one dispatch for q, k and v, 7 without the prefill's q8
 * activations either, 3 without the decode's, 0 none: the ops one dispatch
 * each; 8, 16 and 128 the opt-in forms), so one binary
 * compares them; tg also prints
 * the dispatches a decode step records. The model loads
 * with the context n_prefill + n_decode + 8. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "gpu/backend-vk.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* Weight bytes one decode token reads (see the header). */
static double bytes_per_token(const char *path) {
    struct gguf_file *f = gguf_open(path, NULL);
    if (!f)
        return 0;
    uint64_t n_exp = 0, n_used = 0;
    char arch[64] = "", key[128];
    gguf_get_str_buf(f, "general.architecture", arch, sizeof arch, NULL);
    snprintf(key, sizeof key, "%s.expert_count", arch);
    gguf_get_uint(f, key, &n_exp, NULL);
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    gguf_get_uint(f, key, &n_used, NULL);
    double sum = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (strcmp(name, "token_embd.weight") == 0) {
            sum += (double)t->n_bytes / (double)(t->ne[1] > 0 ? t->ne[1] : 1);
            continue;
        }
        const bool routed = n_exp > 1 && strstr(name, "_exps.") != NULL;
        sum += routed ? (double)t->n_bytes * (double)n_used / (double)n_exp : (double)t->n_bytes;
    }
    gguf_close(f);
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpu-bench MODEL [device=-1] [n_decode=128] [n_prefill=512] "
                        "[batches=8,32] [profile=0] [hbm_gbs=4300] [pipeline_cache] [mm=auto] "
                        "[fuse=103]\n");
        return 2;
    }
    const char *path = argv[1];
    const int device = argc > 2 ? atoi(argv[2]) : -1;
    const int n_decode = argc > 3 ? atoi(argv[3]) : 128;
    const int n_prefill = argc > 4 ? atoi(argv[4]) : 512;
    const char *batches = argc > 5 ? argv[5] : "8,32";
    const int prof_mode = argc > 6 ? atoi(argv[6]) : 0;
    const bool profile = prof_mode == 1;
    const double hbm_gbs = argc > 7 ? atof(argv[7]) : 4300.0;
    const char *pcache = argc > 8 && *argv[8] ? argv[8] : NULL;
    const char *mm_path = argc > 9 && *argv[9] ? argv[9] : "auto";
    const unsigned fuse = argc > 10 ? (unsigned)atoi(argv[10]) : BACKEND_VK_FUSE_ALL;
    int nb[8], n_nb = 0;
    for (const char *p = batches; *p && n_nb < 8;) {
        int v = atoi(p);
        if (v > 0)
            nb[n_nb++] = v;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    int max_seq = 1;
    for (int i = 0; i < n_nb; i++)
        max_seq = nb[i] > max_seq ? nb[i] : max_seq;

    struct strata_error err = {0};
    struct backend_vk_params vp = backend_vk_params_default();
    vp.device = device;
    vp.pipeline_cache = pcache;
    vp.mm_path = mm_path;
    vp.fuse = fuse;
    double t_init = now_s();
    struct backend *be = backend_vk_init(&vp, &err);
    t_init = now_s() - t_init;
    if (!be) {
        fprintf(stderr, "gpu-bench: %s\n", err.message);
        return 1;
    }
    const struct vk_dev_info *in = backend_vk_info(be);
    char mmd[256];
    backend_vk_mm_describe(be, mmd, sizeof mmd);
    printf("device: %s (%s), %.1f GiB, subgroup %u%s%s\nprefill matmul (mm=%s): %s\n", in->name,
           in->driver, (double)in->vram_bytes / (1 << 30), in->subgroup_size,
           in->coopmat_nv ? ", coopmat-nv" : "", in->int_dot_accel ? ", int-dot-accel" : "",
           mm_path, mmd);
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.n_ctx_max = n_prefill + n_decode + 8;
    mp.n_batch_max = n_prefill > max_seq ? n_prefill : max_seq;
    double t0 = now_s();
    struct model *m = model_load(path, &mp, &err);
    if (!m) {
        fprintf(stderr, "gpu-bench: %s\n", err.message);
        backend_free(be);
        return 1;
    }
    printf("init: %.2f s (device, op pipelines%s); load: %.2f s (matmul pipelines, upload), "
           "%.2f GiB on the device\n",
           t_init, pcache ? ", pipeline cache" : "", now_s() - t0,
           (double)backend_vk_device_bytes(be) / (1 << 30));
    const int V = model_n_vocab(m);
    const int n_seq = max_seq > 1 ? max_seq : 1;
    struct kv_cache *kv = model_kv_init(m, n_seq, mp.n_ctx_max, &err);
    float *logits = malloc((size_t)(n_prefill > n_seq ? n_prefill : n_seq) * V * sizeof(float));
    struct model_batch_entry *e = malloc((size_t)mp.n_batch_max * sizeof *e);
    if (!kv || !logits || !e) {
        fprintf(stderr, "gpu-bench: %s\n", kv ? "out of memory" : err.message);
        return 1;
    }
    int rc = 1;
#define FWD(N)                                                                                     \
    do {                                                                                           \
        struct model_batch b_ = {e, (N)};                                                          \
        if (model_forward(m, kv, &b_, logits, &err)) {                                             \
            fprintf(stderr, "gpu-bench: %s\n", err.message);                                       \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

    /* warm-up: pipelines, first-use allocations */
    e[0] = (struct model_batch_entry){0, 0, 1, true};
    FWD(1);
    kv_seq_clear(kv, 0, NULL);

    /* tg: 1-token prompt, then n_decode greedy steps */
    e[0] = (struct model_batch_entry){0, 0, 1, true};
    FWD(1);
    int tok = argmax(logits, V);
    const uint64_t disp0 = backend_vk_dispatches(be);
    t0 = now_s();
    for (int i = 0; i < n_decode; i++) {
        e[0] = (struct model_batch_entry){0, 1 + i, tok, true};
        FWD(1);
        tok = argmax(logits, V);
    }
    const double tg = n_decode / (now_s() - t0);
    const double disp = (double)(backend_vk_dispatches(be) - disp0) / n_decode;
    kv_seq_clear(kv, 0, NULL);

    /* pp: one chunk of n_prefill tokens, logits of the last */
    for (int i = 0; i < n_prefill; i++)
        e[i] = (struct model_batch_entry){0, i, (int32_t)(1 + (i * 7919) % (V - 1)),
                                          i == n_prefill - 1};
    double pp = 0, pp_first = 0;
    for (int r = 0; r < 4; r++) {
        t0 = now_s();
        FWD(n_prefill);
        const double v = n_prefill / (now_s() - t0);
        kv_seq_clear(kv, 0, NULL);
        if (r == 0)
            pp_first = v;
        else if (v > pp)
            pp = v;
    }
    if (prof_mode == 2) { /* one more chunk, every dispatch timed */
        backend_vk_profile_enable(be, true);
        FWD(n_prefill);
        backend_vk_profile_enable(be, false);
        kv_seq_clear(kv, 0, NULL);
        printf("-- profile of one %d-token prefill chunk --\n", n_prefill);
        backend_vk_profile_report(be, stdout);
    }

    /* batched decode */
    double bt[8] = {0};
    const int b_steps = n_decode / 4 > 4 ? n_decode / 4 : 4;
    for (int k = 0; k < n_nb; k++) {
        const int N = nb[k];
        for (int q = 0; q < N; q++)
            e[q] = (struct model_batch_entry){q, 0, (int32_t)(1 + q % (V - 1)), true};
        FWD(N);
        t0 = now_s();
        for (int s = 0; s < b_steps; s++) {
            for (int q = 0; q < N; q++)
                e[q] =
                    (struct model_batch_entry){q, 1 + s, argmax(logits + (size_t)q * V, V), true};
            FWD(N);
        }
        bt[k] = (double)N * b_steps / (now_s() - t0);
        for (int q = 0; q < N; q++)
            kv_seq_clear(kv, q, NULL);
    }

    const double bpt = bytes_per_token(path);
    const double share = bpt * tg / (hbm_gbs * 1e9);
    printf("tg%d: %.1f tok/s (%.3f ms a token, %.0f dispatches a token, fuse %u)\n", n_decode, tg,
           1e3 / tg, disp, fuse);
    printf("pp%d: %.1f tok/s (best of 3; first chunk %.1f)\n", n_prefill, pp, pp_first);
    for (int k = 0; k < n_nb; k++)
        printf("b%d: %.1f tok/s (%d steps of %d sequences)\n", nb[k], bt[k], b_steps, nb[k]);
    printf("weights read a token: %.3f GiB; decode at %.1f%% of %.0f GB/s\n", bpt / (1 << 30),
           100.0 * share, hbm_gbs);

    if (profile) { /* 16 more decode steps, every dispatch timed (not the runs above) */
        e[0] = (struct model_batch_entry){0, 0, 1, true};
        FWD(1);
        tok = argmax(logits, V);
        printf("-- profile of 16 decode steps (one sequence) --\n");
        backend_vk_profile_enable(be, true);
        for (int i = 0; i < 16; i++) {
            e[0] = (struct model_batch_entry){0, 1 + i, tok, true};
            FWD(1);
            tok = argmax(logits, V);
        }
        backend_vk_profile_report(be, stdout);
        kv_seq_clear(kv, 0, NULL);
    }
    printf("{\"device\":\"%s\",\"tg\":%.2f,\"pp\":%.2f", in->name, tg, pp);
    for (int k = 0; k < n_nb; k++)
        printf(",\"b%d\":%.2f", nb[k], bt[k]);
    printf(",\"bytes_per_token\":%.0f,\"hbm_share\":%.4f,\"dispatches\":%.0f,\"fuse\":%u}\n", bpt,
           share, disp, fuse);
    rc = 0;
done:
    free(e);
    free(logits);
    kv_free(kv);
    model_free(m);
    backend_free(be);
    return rc;
}
