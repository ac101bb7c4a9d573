/* engine/backend/backend-split.h: one backend over two, by layer: the
 * first n_lo layers on `lo` (a GPU), the rest on `hi` (the CPU) -- the
 * split offload of --gpu-layers N (gpu/gpu-choose.h).
 *
 *   struct backend *gpu = backend_vk_init(&vp, &err), *cpu = backend_cpu_init(&cp, &err);
 *   struct backend *be = backend_split_init(gpu, cpu, 4, n_layer, &err); // steals both
 *   mp.backend = be;                      // model_load binds each weight on its side
 *   ... model_forward as with any backend ...
 *   backend_free(be);                     // frees both
 *
 * Where things run: a weight is bound on the side of its layer
 * (backend_weight_desc.layer, where in_layer); token_embd's rows (embed) on lo,
 * the side of layer 0; the other matrices outside a layer (output, a tied output's token_embd) on
 * hi, the side of the last layer, so the logits come from hi and only the hidden state crosses;
 * vectors outside a layer (output_norm, rope_freqs) on both. An op with a weight runs on that
 * weight's side, and kv_write / attention on their layer's side; an op without either (add, swiglu,
 * rope, ...) on the side of the op before it (every layer of the model's forward pass opens with
 * the attn_norm rmsnorm, so a layer's ops stay on its side).
 *
 * Tensors: each is allocated on both sides; the split tracks which side
 * holds the latest rows. An op on side s reading a tensor last written on
 * the other side first moves it: the other side's recording is submitted
 * and waited for, the rows are read to a host buffer and written on s (its
 * first min(n_rows, the step's n_tok) rows: the model's tensors hold one row
 * per entry of the batch). In the model's step that is the residual stream
 * once, at layer n_lo; the host's tensor_write goes to both sides.
 *
 * KV cache: kv_store_init makes a store whose every block lives on both
 * sides: the lo part's blocks hold only layers [0, n_lo) (laid out as an
 * n_lo-layer cache's), the hi part's whole blocks (block_host gives them to
 * the host's kv_k_head; its rows of layers < n_lo stay unused: host memory,
 * not device memory). Each side finds its own part through kv_store_find,
 * so one kv_cache, one block table and the prefix cache serve both sides;
 * copy-on-write copies each side's runs.
 *
 * weight_host is NULL (the routed experts of MoE layers are served as bound
 * weights, the device tier of engine/experts, on either side); caps are what
 * both sides have.
 *
 * Threading: as backend.h: the forward pass's thread.
 */
#ifndef STRATA_BACKEND_SPLIT_H
#define STRATA_BACKEND_SPLIT_H

#include "engine/backend/backend.h"

/* A split backend (owned: backend_free, which frees lo and hi), or NULL
 * with err (lo and hi freed too). 0 < n_lo < n_layer. */
struct backend *backend_split_init(struct backend *lo, struct backend *hi, int n_lo, int n_layer,
                                   struct strata_error *err);
/* The two sides of a split backend (borrowed), or NULL when be is not one. */
struct backend *backend_split_lo(const struct backend *be);
struct backend *backend_split_hi(const struct backend *be);
/* Matmul and MoE calls each side ran since init (0 when be is not a split):
 * where the weights' work went, for the tests' placement checks. */
void backend_split_counts(const struct backend *be, uint64_t *n_mm_lo, uint64_t *n_mm_hi);

#endif
