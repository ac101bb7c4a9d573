/* engine/cpu/kernels-pack.c: the 16-row interleaved ("packed") weight layout of
 * Q4_K, Q6_K, Q4_0, Q8_0, IQ4_NL and MXFP4 (kernels.h: kernels_pack), its
 * inverse, and the
 * reference matmul over it (each row unpacked back to GGUF blocks, then
 * kern_ref_dot).
 *
 * Why: in the GGUF layout a K-quant row's sub-block sums land in lanes of one
 * zmm next to other sub-blocks of the same row, so every 64 products need a
 * pack and a scale multiply-add of their own (kernels-x86-kz.inc). With 16 rows
 * interleaved dword by dword, lane r of a vpdpbusd is row r, a whole
 * sub-block accumulates in one register against one broadcast activation
 * dword per 4 columns, and its scale is one lane-wise multiply-add per
 * sub-block (kernels-x86-pk.inc has the measurements).
 *
 * Q4_0 on AVX2 (kernels-avx2-pk.inc, which also computes the Q4_K and Q6_K layouts
 * below): a Q4_0 block has one float scale per 32
 * weights, so in the GGUF layout every 32 products of a row need their own
 * int32 widening, conversion and multiply-add; with 16 rows interleaved,
 * the products of 4 columns of 8 rows sit in one ymm, 8 of them add up
 * exactly in int16 and the widening, conversion and scale are done once per
 * 8 rows and block.
 *
 * Layout. A packed matrix is n_rows / 16 groups; group g holds rows 16g ..
 * 16g + 15 as nb = n_cols / QK packed blocks (QK = 256 for the K-quants, 32
 * for Q4_0) of 16 * type_size bytes, block b of group g at byte (g * nb + b)
 * * 16 * type_size: the same bytes as the GGUF tensor, reordered (no size
 * change, so decode reads as many bytes as before). Inside a packed
 * (super-)block, with r the row in the group:
 *   Q4_K (2304 bytes): qs dword (p * 8 + c) * 16 + r = the row's qs[32p + 4c
 *     .. 32p + 4c + 3] (p 0..3, c 0..7), bytes 0..2047; scales byte
 *     2048 + i * 16 + r = the row's scales[i] (i 0..11); d at 2240 + 2r,
 *     dmin at 2272 + 2r (f16).
 *   Q6_K (3360 bytes): ql dword (n * 16 + c) * 16 + r = the row's ql[64n +
 *     4c .. + 3] (n 0..1, c 0..15), bytes 0..2047; qh dword 512 + (n * 8 +
 *     c) * 16 + r = the row's qh[32n + 4c .. + 3] (c 0..7), bytes 2048..
 *     3071; scales byte 3072 + k * 16 + r = the row's scales[k] (k 0..15);
 *     d at 3328 + 2r.
 *   Q4_0 (288 bytes): qs dword c * 16 + r = the row's qs[4c .. 4c + 3] (c
 *     0..3: low nibbles are elements 4c .., high nibbles 16 + 4c ..), bytes
 *     0..255; d at 256 + 2r (f16).
 *   Q8_0 (544 bytes): qs dword c * 16 + r = the row's qs[4c .. 4c + 3]
 *     (elements 4c .., c 0..7), bytes 0..511; d at 512 + 2r (f16).
 *   IQ4_NL (288 bytes): as Q4_0 (the same block: d, then 16 qs bytes).
 *   MXFP4 (272 bytes): qs as Q4_0's, bytes 0..255; e at 256 + r.
 * Threading: all functions are reentrant. */
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/kernels-impl.h"

/* Copies one row's super-block between the GGUF block `blk` and the packed
 * super-block `ps` (to_packed: blk -> ps, else ps -> blk). */
static void pack_q4_K_sb(uint8_t *ps, uint8_t *blk, int r, int to_packed) {
    block_q4_K *x = (block_q4_K *)blk;
    uint8_t *d = ps + 2240 + 2 * r, *dm = ps + 2272 + 2 * r;
    if (to_packed) {
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 8; c++)
                memcpy(ps + ((p * 8 + c) * 16 + r) * 4, x->qs + 32 * p + 4 * c, 4);
        for (int i = 0; i < 12; i++)
            ps[2048 + i * 16 + r] = x->scales[i];
        memcpy(d, &x->d, 2);
        memcpy(dm, &x->dmin, 2);
    } else {
        for (int p = 0; p < 4; p++)
            for (int c = 0; c < 8; c++)
                memcpy(x->qs + 32 * p + 4 * c, ps + ((p * 8 + c) * 16 + r) * 4, 4);
        for (int i = 0; i < 12; i++)
            x->scales[i] = ps[2048 + i * 16 + r];
        memcpy(&x->d, d, 2);
        memcpy(&x->dmin, dm, 2);
    }
}

static void pack_q6_K_sb(uint8_t *ps, uint8_t *blk, int r, int to_packed) {
    block_q6_K *x = (block_q6_K *)blk;
    for (int n = 0; n < 2; n++) {
        for (int c = 0; c < 16; c++) {
            uint8_t *p = ps + ((n * 16 + c) * 16 + r) * 4, *q = x->ql + 64 * n + 4 * c;
            memcpy(to_packed ? p : q, to_packed ? q : p, 4);
        }
        for (int c = 0; c < 8; c++) {
            uint8_t *p = ps + 2048 + ((n * 8 + c) * 16 + r) * 4, *q = x->qh + 32 * n + 4 * c;
            memcpy(to_packed ? p : q, to_packed ? q : p, 4);
        }
    }
    for (int k = 0; k < 16; k++) {
        uint8_t *p = ps + 3072 + k * 16 + r, *q = (uint8_t *)&x->scales[k];
        *(to_packed ? p : q) = *(to_packed ? q : p);
    }
    uint8_t *p = ps + 3328 + 2 * r;
    memcpy(to_packed ? p : (uint8_t *)&x->d, to_packed ? (uint8_t *)&x->d : p, 2);
}

static void pack_q4_0_b(uint8_t *ps, uint8_t *blk, int r, int to_packed) {
    block_q4_0 *x = (block_q4_0 *)blk;
    for (int c = 0; c < 4; c++) {
        uint8_t *p = ps + (c * 16 + r) * 4, *q = x->qs + 4 * c;
        memcpy(to_packed ? p : q, to_packed ? q : p, 4);
    }
    uint8_t *p = ps + 256 + 2 * r;
    memcpy(to_packed ? p : (uint8_t *)&x->d, to_packed ? (uint8_t *)&x->d : p, 2);
}

static void pack_mxfp4_b(uint8_t *ps, uint8_t *blk, int r, int to_packed) {
    block_mxfp4 *x = (block_mxfp4 *)blk;
    for (int c = 0; c < 4; c++) {
        uint8_t *p = ps + (c * 16 + r) * 4, *q = x->qs + 4 * c;
        memcpy(to_packed ? p : q, to_packed ? q : p, 4);
    }
    *(to_packed ? ps + 256 + r : &x->e) = *(to_packed ? &x->e : ps + 256 + r);
}

static void pack_q8_0_b(uint8_t *ps, uint8_t *blk, int r, int to_packed) {
    block_q8_0 *x = (block_q8_0 *)blk;
    for (int c = 0; c < 8; c++) {
        uint8_t *p = ps + (c * 16 + r) * 4, *q = (uint8_t *)x->qs + 4 * c;
        memcpy(to_packed ? p : q, to_packed ? q : p, 4);
    }
    uint8_t *p = ps + 512 + 2 * r;
    memcpy(to_packed ? p : (uint8_t *)&x->d, to_packed ? (uint8_t *)&x->d : p, 2);
}

/* One row's (super-)block of any packed type (kernels_pack_layout_ok's). */
static void pack_sb(enum quant_type type, uint8_t *ps, uint8_t *blk, int r, int to_packed) {
    if (type == QUANT_Q4_K)
        pack_q4_K_sb(ps, blk, r, to_packed);
    else if (type == QUANT_Q6_K)
        pack_q6_K_sb(ps, blk, r, to_packed);
    else if (type == QUANT_Q8_0)
        pack_q8_0_b(ps, blk, r, to_packed);
    else if (type == QUANT_MXFP4)
        pack_mxfp4_b(ps, blk, r, to_packed);
    else /* Q4_0, IQ4_NL: the same block layout */
        pack_q4_0_b(ps, blk, r, to_packed);
}

int kernels_pack_layout_ok(enum quant_type type, int64_t n_rows, int64_t n_cols) {
    switch (type) {
    case QUANT_Q4_K:
    case QUANT_Q6_K:
    case QUANT_Q4_0:
    case QUANT_Q8_0:
    case QUANT_IQ4_NL:
    case QUANT_MXFP4:
        break;
    default:
        return 0;
    }
    const int64_t bs = quant_type_traits(type)->block_size;
    return n_rows > 0 && n_rows % KERNELS_PACK_ROWS == 0 && n_cols > 0 && n_cols % bs == 0;
}

int kernels_pack_wanted(enum quant_type type, int64_t n_rows, int64_t n_cols) {
    kernels_init();
    return kernels_pack_layout_ok(type, n_rows, n_cols) &&
           kern_table_active()->matmul_packed[type] != NULL;
}

/* One direction of the layout change for row groups [g0, g1). */
static void pack_groups(const struct kern_mat *w, const uint8_t *src, uint8_t *dst, int64_t g0,
                        int64_t g1, int to_packed) {
    const size_t ts = quant_type_traits(w->type)->type_size;
    const int64_t nb = w->n_cols / quant_type_traits(w->type)->block_size;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *ps = (uint8_t *)(to_packed ? dst : src) +
                          ((size_t)g * (size_t)nb + (size_t)b) * KERNELS_PACK_ROWS * ts;
            for (int r = 0; r < KERNELS_PACK_ROWS; r++) {
                const size_t off = (size_t)(g * KERNELS_PACK_ROWS + r) * w->row_bytes + b * ts;
                pack_sb(w->type, ps, (uint8_t *)(to_packed ? src : dst) + off, r, to_packed);
            }
        }
}

int kernels_pack(const struct kern_mat *w, void *dst, int64_t g0, int64_t g1) {
    if (!w || w->packed || !kernels_pack_layout_ok(w->type, w->n_rows, w->n_cols) ||
        w->row_bytes != quant_row_size(w->type, w->n_cols) || g0 < 0 || g0 > g1 ||
        g1 > w->n_rows / KERNELS_PACK_ROWS)
        return -1;
    pack_groups(w, w->data, dst, g0, g1, 1);
    return 0;
}

int kernels_unpack(const struct kern_mat *w, void *dst) {
    if (!w || !w->packed || !kernels_pack_layout_ok(w->type, w->n_rows, w->n_cols) ||
        w->row_bytes != quant_row_size(w->type, w->n_cols))
        return -1;
    pack_groups(w, w->data, dst, 0, w->n_rows / KERNELS_PACK_ROWS, 0);
    return 0;
}

/* Reference over the packed layout: unpack each row's blocks, then the same
 * dot as kern_ref_matmul. */
void kern_ref_matmul_packed(const struct kern_mat *w, const void *xq, size_t xq_stride,
                            int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const size_t ts = quant_type_traits(w->type)->type_size;
    const int64_t nb = w->n_cols / quant_type_traits(w->type)->block_size;
    uint8_t *row = malloc(w->row_bytes);
    if (!row)
        return; /* out of memory: y untouched, as for a malformed shape */
    for (int64_t r = r0; r < r1; r++) {
        const int64_t g = r / KERNELS_PACK_ROWS;
        const int rr = (int)(r % KERNELS_PACK_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *ps =
                (uint8_t *)w->data + ((size_t)g * (size_t)nb + (size_t)b) * KERNELS_PACK_ROWS * ts;
            pack_sb(w->type, ps, row + b * ts, rr, 0);
        }
        for (int64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] =
                kern_ref_dot(w->type, w->n_cols, row, (const uint8_t *)xq + (size_t)t * xq_stride);
    }
    free(row);
}
