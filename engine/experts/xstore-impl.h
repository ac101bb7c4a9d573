/* engine/experts/xstore-impl.h: the expert store's internals shared between
 * its files (private to engine/experts): the packing of a slot's matrices
 * into the CPU kernels' layout (xstore-pack.c), the read queue's depth from
 * the device (xstore-dev.c).
 *
 *   if (xs_pack_wanted(type, rows, cols))      // at init, per (layer, which)
 *       xs_pack_inplace(mat, type, rows, cols, row_bytes, scratch);   // after its read
 *
 * Threading: the forward thread (the packing runs where the read completed). */
#ifndef STRATA_XSTORE_IMPL_H
#define STRATA_XSTORE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/quant/quant.h"

/* Whether the active ISA has packed kernels for this type and shape
 * (kernels_pack_wanted): the store then packs it on fill. */
bool xs_pack_wanted(enum quant_type type, int64_t rows, int64_t cols);
/* The scratch xs_pack_inplace needs for rows of row_bytes. */
size_t xs_pack_scratch_bytes(size_t row_bytes);
/* The matrix at data (rows x row_bytes, GGUF rows) rewritten in the packed
 * layout in place. 0, or -1 for a type or shape without that layout. */
int xs_pack_inplace(void *data, enum quant_type type, int64_t rows, int64_t cols, size_t row_bytes,
                    void *scratch);

/* The io_uring depth for reads of fd (xstore-dev.c has the rule); rule gets
 * what it came from ("device 254:0 nr_requests 256, rotational"). */
int xs_dev_queue_depth(int fd, char *rule, size_t rule_n);

#endif
