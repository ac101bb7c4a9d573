/* bench/attn-bench.c: decode attention throughput (ops_attn_group
 * over an f16 cache laid out like kv.c's: one row of n_kv_head * 128 values a
 * position, n_layer layers, one query token), 1 thread. Not a test suite
 * (numbers depend on the box); build it in a release build directory and run
 * it by hand, under the bench lock:
 *
 *   ninja -C build-rel bench/attn-bench
 *   flock /tmp/strata-bench.lock build-rel/bench/attn-bench 512 8 2 20
 *   (args: positions, KV heads, query heads per KV head, reps, block; 28 layers;
 *   block 16 lays K and V out as kv.c does, 0 as whole rows a position)
 *
 * Prints the best rep's time a token and the K+V bytes it read per second;
 * "chk" is a checksum of the outputs (the same across builds that keep the
 * arithmetic). The engine/cpu/ops.c comment at OPS_ATTN_PF has its figures. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/cpu/ops.h"

#define N_LAYER 28
#define HEAD_DIM 128

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int n_kv = argc > 1 ? atoi(argv[1]) : 512;
    const int n_head_kv = argc > 2 ? atoi(argv[2]) : 8;
    const int group = argc > 3 ? atoi(argv[3]) : 2;
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    const int blk = argc > 5 ? atoi(argv[5]) : 16;
    if (n_kv < 1 || n_kv > 1 << 16 || n_head_kv < 1 || n_head_kv > 64 || group < 1 ||
        group > OPS_ATTN_GROUP_MAX || reps < 1 || blk < 0 || blk > 1024) {
        fprintf(stderr,
                "usage: attn-bench [positions 1..65536] [kv heads 1..64] "
                "[group 1..%d] [reps >= 1] [block 0..1024: 0 whole rows, else kv.c's per-head "
                "parts in blocks of that many positions; 16]\n",
                OPS_ATTN_GROUP_MAX);
        return 2;
    }
    const size_t row = (size_t)n_head_kv * HEAD_DIM; /* values a position */
    const int n_blk = blk > 0 ? (n_kv + blk - 1) / blk : 1;
    const size_t n_val = (size_t)N_LAYER * (size_t)(blk > 0 ? n_blk * blk : n_kv) * row;
    uint16_t *k = malloc(n_val * sizeof *k), *v = malloc(n_val * sizeof *v);
    const uint16_t **kr = malloc((size_t)n_kv * sizeof *kr),
                   **vr = malloc((size_t)n_kv * sizeof *vr);
    float *scores = malloc((size_t)OPS_ATTN_GROUP_MAX * (size_t)n_kv * sizeof *scores);
    float q[OPS_ATTN_GROUP_MAX * HEAD_DIM], out[OPS_ATTN_GROUP_MAX * HEAD_DIM];
    if (!k || !v || !kr || !vr || !scores) {
        fprintf(stderr, "attn-bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n_val; i++) { /* finite f16 values around 1 and 0.5 */
        k[i] = (uint16_t)(0x3c00 ^ (i & 0x3ff));
        v[i] = (uint16_t)(0x3800 ^ ((i * 7) & 0x3ff));
    }
    for (int i = 0; i < OPS_ATTN_GROUP_MAX * HEAD_DIM; i++)
        q[i] = (float)(i % 13) * 0.01f;
    double best = 1e30, chk = 0.0;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        for (int l = 0; l < N_LAYER; l++)
            for (int h = 0; h < n_head_kv; h++) {
                for (int p = 0; p < n_kv; p++) {
                    /* whole rows: (layer, pos, head); per-head parts: (block, layer, head,
                     * pos in block) */
                    const size_t o =
                        blk > 0
                            ? ((((size_t)(p / blk) * N_LAYER + (size_t)l) * (size_t)n_head_kv +
                                (size_t)h) *
                                   (size_t)blk +
                               (size_t)(p % blk)) *
                                  HEAD_DIM
                            : ((size_t)l * (size_t)n_kv + (size_t)p) * row + (size_t)h * HEAD_DIM;
                    kr[p] = k + o;
                    vr[p] = v + o;
                }
                ops_attn_group(q, group, kr, vr, n_kv, HEAD_DIM, HEAD_DIM, 0.088f, scores, out);
                chk += out[0];
            }
        const double t = now_s() - t0;
        best = t < best ? t : best;
    }
    printf("positions %d kv heads %d group %d block %d: best %.3f ms a token (%.1f GB/s of K+V) "
           "chk %g\n",
           n_kv, n_head_kv, group, blk, best * 1e3, 2.0 * (double)n_val * 2.0 / best / 1e9, chk);
    free(scores);
    free(vr);
    free(kr);
    free(v);
    free(k);
    return 0;
}
