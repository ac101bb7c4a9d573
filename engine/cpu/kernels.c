/* engine/cpu/kernels.c: CPU detection, ISA dispatch, activation conversion.
 *
 * The tables are built once (pthread_once) from the lowest ISA upward: the
 * reference fills every type it can compute, then AVX2 and AVX-512 overwrite
 * the entries they accelerate. The active table pointer is the only mutable
 * global (an atomic, written by kernels_isa_force for tests and benchmarks).
 *
 * Measured throughput (GB/s of weights, 4096 columns, n_tok = 1 unless said;
 * `meson setup build-rel --buildtype=release && ninja -C build-rel
 * bench/kernels-bench && build-rel/bench/kernels-bench MB THREADS -1 REPS`,
 * best of REPS). Machine: this 2-vCPU AMD EPYC VM (AVX-512 F/BW/VL/VNNI,
 * 32 MB L3 reported), shared with other builds (load average 5-16
 * during every run, so the DRAM figures are a floor, not the box's peak);
 * 2026-11-30, active ISA avx512-vnni:
 *   MB=1 (L2), 1 thread: q4_0 23.4  q8_0 49.8  q4_K 26.7  q5_K 26.0
 *     q6_K 46.2  mxfp4 19.1  iq4_nl 22.0  f16 37.8  bf16 35.4  f32 34.1
 *     (f32 sums in double since; 73 with float sums, as in the DRAM row)
 *     (avx2 build: q4_0 17.8  q8_0 44.6  q4_K 24.3  q6_K 38.3)
 *     (compute ceilings per thread; 2 threads double them when the second
 *     core is free: MB=8 q4_0 22.5 -> 45.5 with plain read 69 -> 136).
 *   MB=512 (DRAM, load 5-6), 1 thread / 2 threads, and a plain streaming
 *   read of the same bytes in the same run for scale (1 / 2 threads):
 *     q4_0 11.8 / 15.0 (22.0 / 23.0)   q8_0 17.4 / 15.7 (16.7 / 21.0)
 *     q4_K 19.8 / 14.6 (16.3 / 16.1)   q6_K 20.0 / 21.2 (23.0 / 20.7)
 *     f16 15.7 / 17.2 (20.0 / 17.9)    f32 25.8 / 25.5 (15.9 / 31.6)
 *   i.e. decode streams at 55-100+% of what a plain read of the same bytes
 *   got at that moment; the quiet-box figure (~34 GB/s read, llama.cpp at
 *   96% of it) could not be reproduced while the box was shared.
 * These 2026-11-30 figures predate the 8-block AVX-512 units and the decode
 * prefetch: current DRAM decode figures, as multiples of the read probe
 * measured in the same rounds (kernels-bench's "probe" columns), are in the
 * comment of KX_DECODE_PF_BYTES in engine/kernels-x86.inc (K-quants: the
 * comments of kernels-x86-kz.inc).
 */
#include "engine/cpu/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "engine/cpu/kernels-impl.h"

/* The decode prefetch by CPU vendor. prefetchnta fills L1 only, and what
 * that does to the hardware prefetchers differs:
 *   AMD (the 2-vCPU EPYC Zen 5 VMs of the earlier benchmarks): NTA 8 KB
 *     ahead put decode 1.1-1.35x above a plain read of the same bytes, T0
 *     at 8-16 KB 3-10% under NTA (the measurements at the top of
 *     kernels-x86.inc).
 *   Intel (this 2-vCPU Xeon VM, AVX-512 with FP16: a plain 256-bit read of
 *     512 MB, 3 interleaved rounds, GB/s 1 / 2 threads, /tmp copy of the
 *     probe loop with one prefetch per line, 2026-12-01): none 10.3-13.1 /
 *     24.7-25.0; NTA 1-16 KB 5.8-7.9 / 11.2-15.2 (NTA halves the stream);
 *     T0 1-16 KB 11.6-13.4 / 22.2-26.4; T1 1 KB 12.6-13.0 / 25.5-26.0,
 *     2 KB 13.3-13.9 / 27.2-27.5, 4-16 KB 12.4-13.2 / 24.6-26.0. The
 *     decode kernels with NTA 8 KB ran at 0.65x this box's probe
 *     (`kernels-bench 256 2 3 4 q4_0,q4_K,q6_K,q8_0 1`). The AVX2 decode
 *     kernels, `kernels-bench 256 2 1 3 q4_0,q8_0,q4_K,q6_K 1 PF`, two
 *     interleaved rounds, GB/s at 2 threads (probe loop 20.7-22): off /
 *     T1 2 KB / T1 4 KB / T1 8 KB / T0 4 KB: packed q4_0 17.5-18.5 /
 *     21.9-22.4 / 22.6-24.4 / 22.8-24.1 / 18.1-18.6; q8_0 12.9-13.0 /
 *     19.8-19.9 / 19.7-21.1 / 20.9-21.3 / 16.7-18.0; q4_K 4.5-9.3 /
 *     18.0-18.4 / 16.7-17.9 / 17.8-18.2 / 16.9-18.0; q6_K 14.0-15.6 /
 *     18.9-19.3 / 18.9-19.6 / 19.3 / 17.7-19.0. End to end, from the huge-
 *     page weight arena, `bench-model llama-3.2-1b-q4_0.gguf 2 64 16 1
 *     763097088 ISA PF` (decode/roofline against the interleaved probe,
 *     two rounds): AVX2 off 73.2-73.7%, T1 2 KB 80.1-80.8%, T1 4 KB
 *     75.6-76.6%, T1 16 KB 71.9-72.4%, T0 4 KB 65.8-66.5%; AVX-512 VNNI
 *     T1 2 KB / 4 KB 69.3 / 68.2% (Q4_0), 81.1 / 79.7% (Q4_K_M), 78.0 /
 *     76.5% (qwen3 Q8_0). So T1 2 KB. (This VM's probe reads anonymous
 *     huge pages at ~33 GB/s while the kernels stream at 24-28: neither
 *     ISA reaches 95% of it here, unlike the AMD VMs.)
 * AMD CPUs other than Zen 5 (the AVX2-only EPYCs) keep NTA by vendor: not
 * measured here. */
static struct kern_prefetch kern_prefetch_default(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_is("amd"))
        return (struct kern_prefetch){KERN_PF_NTA, 8192};
#endif
    return (struct kern_prefetch){KERN_PF_T1, 2048};
}

struct kern_prefetch kern_pf = {KERN_PF_NTA, 8192};

void kern_prefetch_set(struct kern_prefetch pf) {
    kernels_init();
    kern_pf = pf;
}

const char *kern_prefetch_name(int hint) {
    static const char *names[] = {"off", "nta", "t0", "t1"};
    return hint >= 0 && hint < 4 ? names[hint] : "?";
}

/* Detected once by kernels_init; read-only afterwards. */
static struct kern_table kern_tables[KERNELS_ISA_AVX512_VNNI + 1];
/* kern_has[isa]: the CPU runs that level's kernels (the levels are not a
 * strict chain: AVX-VNNI is absent from some AVX-512 CPUs, Ice Lake) */
static bool kern_has[KERNELS_ISA_AVX512_VNNI + 1];
static enum kernels_isa kern_detected = KERNELS_ISA_REF;
static pthread_once_t kern_once = PTHREAD_ONCE_INIT;
/* Which table kernels_matmul uses; written by kernels_isa_force (tests). */
static _Atomic int kern_active = KERNELS_ISA_REF;

static void kern_detect(void) {
    enum kernels_isa best = KERNELS_ISA_REF;
    kern_has[KERNELS_ISA_REF] = true;
#if defined(__x86_64__) && defined(STRATA_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    kern_has[KERNELS_ISA_AVX2] = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                 __builtin_cpu_supports("f16c");
    kern_has[KERNELS_ISA_AVX2_VNNI] =
        kern_has[KERNELS_ISA_AVX2] && __builtin_cpu_supports("avxvnni");
    kern_has[KERNELS_ISA_AVX512] =
        kern_has[KERNELS_ISA_AVX2] && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    kern_has[KERNELS_ISA_AVX512_VNNI] =
        kern_has[KERNELS_ISA_AVX512] && __builtin_cpu_supports("avx512vnni");
    for (int isa = KERNELS_ISA_AVX2; isa <= KERNELS_ISA_AVX512_VNNI; isa++)
        if (kern_has[isa])
            best = (enum kernels_isa)isa;
#endif
    /* The reference leaves matmul_packed NULL: an entry there means "this
     * ISA has a packed kernel" (kernels_pack_wanted), and kernels_matmul
     * takes kern_ref_matmul_packed for a packed matrix without one. */
    kern_ref_fill(&kern_tables[KERNELS_ISA_REF]);
    for (int isa = KERNELS_ISA_AVX2; isa <= (int)best; isa++) {
        kern_tables[isa] = kern_tables[isa - 1];
        if (!kern_has[isa]) /* a level this CPU lacks: the one below's table, whole */
            continue;
        /* packed kernels are not inherited: an ISA packs a type only where it
         * has a packed kernel of its own (AVX-512 keeps Q4_0 in the GGUF
         * layout, where its 8-block kernels are at home) */
        memset(kern_tables[isa].matmul_packed, 0, sizeof kern_tables[isa].matmul_packed);
        struct kern_table add;
        memset(&add, 0, sizeof add);
#if defined(__x86_64__) && defined(STRATA_HAVE_X86_KERNELS)
        if (isa == KERNELS_ISA_AVX2)
            kern_avx2_fill(&add);
        else if (isa == KERNELS_ISA_AVX2_VNNI)
            kern_avx2vnni_fill(&add);
        else if (isa == KERNELS_ISA_AVX512)
            kern_avx512_fill(&add);
        else
            kern_avx512vnni_fill(&add);
#endif
        for (int t = 0; t < QUANT_TYPE_COUNT; t++) {
            if (add.matmul[t])
                kern_tables[isa].matmul[t] = add.matmul[t];
            if (add.matmul_packed[t])
                kern_tables[isa].matmul_packed[t] = add.matmul_packed[t];
        }
        if (add.quantize_q8_0)
            kern_tables[isa].quantize_q8_0 = add.quantize_q8_0;
        if (add.quantize_q8_K)
            kern_tables[isa].quantize_q8_K = add.quantize_q8_K;
    }
    kern_detected = best;
    kern_pf = kern_prefetch_default();
    atomic_store(&kern_active, (int)best);
}

void kernels_init(void) {
    pthread_once(&kern_once, kern_detect);
}

enum kernels_isa kernels_isa_detected(void) {
    kernels_init();
    return kern_detected;
}

enum kernels_isa kernels_isa_active(void) {
    kernels_init();
    return (enum kernels_isa)atomic_load(&kern_active);
}

void kernels_isa_force(enum kernels_isa isa) {
    kernels_init();
    int v = (int)isa;
    if (v < 0)
        v = 0;
    if (v > (int)kern_detected)
        v = (int)kern_detected;
    while (!kern_has[v])
        v--;
    atomic_store(&kern_active, v);
}

int kernels_isa_parse(const char *name, enum kernels_isa *out) {
    if (!name)
        return -1;
    if (!strcmp(name, "auto")) {
        *out = kernels_isa_detected();
        return 0;
    }
    for (int i = KERNELS_ISA_REF; i <= KERNELS_ISA_AVX512_VNNI; i++)
        if (!strcmp(name, kernels_isa_name((enum kernels_isa)i))) {
            *out = (enum kernels_isa)i;
            return 0;
        }
    return -1;
}

const char *kernels_isa_name(enum kernels_isa isa) {
    switch (isa) {
    case KERNELS_ISA_REF:
        return "ref";
    case KERNELS_ISA_AVX2:
        return "avx2";
    case KERNELS_ISA_AVX2_VNNI:
        return "avx2-vnni";
    case KERNELS_ISA_AVX512:
        return "avx512";
    case KERNELS_ISA_AVX512_VNNI:
        return "avx512-vnni";
    }
    return "?";
}

enum quant_type kernels_act_type(enum quant_type wtype) {
    const struct quant_traits *tr = quant_type_traits((uint32_t)wtype);
    return tr ? tr->vec_dot_type : QUANT_F32;
}

size_t kernels_act_row_size(enum quant_type wtype, int64_t n_cols) {
    return quant_row_size(kernels_act_type(wtype), n_cols);
}

/* The table of the active ISA (after kernels_init). */
static const struct kern_table *active_table(void) {
    return &kern_tables[atomic_load_explicit(&kern_active, memory_order_relaxed)];
}

const struct kern_table *kern_table_active(void) {
    kernels_init();
    return active_table();
}

void kernels_quantize_act(enum quant_type wtype, const float *x, void *xq, int64_t n_cols) {
    switch (kernels_act_type(wtype)) {
    case QUANT_F32:
        memcpy(xq, x, (size_t)n_cols * sizeof(float));
        break;
    case QUANT_F16: {
        uint16_t *h = xq;
        for (int64_t i = 0; i < n_cols; i++)
            h[i] = kern_f32_to_f16(x[i]);
        break;
    }
    case QUANT_BF16: {
        uint16_t *h = xq;
        for (int64_t i = 0; i < n_cols; i++)
            h[i] = kern_f32_to_bf16(x[i]);
        break;
    }
    case QUANT_Q8_0: {
        kernels_init();
        kern_quant_fn q = active_table()->quantize_q8_0;
        (q ? q : kern_quantize_q8_0)(x, xq, n_cols);
        break;
    }
    case QUANT_Q8_1:
        kern_quantize_q8_1(x, xq, n_cols);
        break;
    case QUANT_Q8_K: {
        kernels_init();
        kern_quant_fn q = active_table()->quantize_q8_K;
        (q ? q : kern_quantize_q8_K)(x, xq, n_cols);
        break;
    }
    default:
        break;
    }
}

int kernels_supports(enum quant_type wtype) {
    return kern_ref_has_dot(wtype);
}

/* Shapes a kernel can run on: a known type, whole blocks per row, rows at
 * least that long, an in-range row interval. Anything else is a caller bug;
 * the kernels then leave y untouched rather than read out of bounds. */
static int kern_shape_ok(const struct kern_mat *w, int64_t n_tok, int64_t r0, int64_t r1) {
    if (!w || (unsigned)w->type >= QUANT_TYPE_COUNT || n_tok <= 0 || r0 < 0 || r0 >= r1 ||
        r1 > w->n_rows || w->n_cols <= 0)
        return 0;
    size_t rs = quant_row_size(w->type, w->n_cols);
    if (w->packed) /* groups of 16 whole rows, no padding between rows */
        return kernels_pack_layout_ok(w->type, w->n_rows, w->n_cols) && w->row_bytes == rs;
    return rs != 0 && w->row_bytes >= rs;
}

void kernels_matmul(const struct kern_mat *w, const void *xq, size_t xq_stride, int64_t n_tok,
                    float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kernels_init();
    if (!kern_shape_ok(w, n_tok, r0, r1))
        return;
    const struct kern_table *tb = active_table();
    kern_matmul_fn f = w->packed ? tb->matmul_packed[w->type] : tb->matmul[w->type];
    if (!f && w->packed)
        f = kern_ref_matmul_packed;
    if (f)
        f(w, xq, xq_stride, n_tok, y, ldy, r0, r1);
}

void kernels_matmul_ref(const struct kern_mat *w, const void *xq, size_t xq_stride, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kernels_init();
    if (!kern_shape_ok(w, n_tok, r0, r1))
        return;
    kern_matmul_fn f =
        w->packed ? kern_ref_matmul_packed : kern_tables[KERNELS_ISA_REF].matmul[w->type];
    if (f)
        f(w, xq, xq_stride, n_tok, y, ldy, r0, r1);
}
