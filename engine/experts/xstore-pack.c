/* engine/experts/xstore-pack.c: a slot's matrices put into the CPU kernels'
 * 16-row packed layout right after their read (xstore_params.pack), the
 * layout the weight arena gives the same matrices (engine/cpu/cpu-weights.c),
 * so an expert computes at the same speed from a slot as from the arena.
 *
 * In place: row group g of the packed layout occupies the same bytes as rows
 * [16g, 16g + 16) of the file's layout (kernels-pack.c), so each group is
 * copied to a scratch of 16 rows and packed back over itself; a group costs
 * one 16-row copy (9 KiB for a 1024-wide Q4_K row) that stays in L1. */
#include "engine/experts/xstore-impl.h"

#include <string.h>

#include "engine/cpu/kernels.h"

bool xs_pack_wanted(enum quant_type type, int64_t rows, int64_t cols) {
    return kernels_pack_wanted(type, rows, cols) != 0;
}

size_t xs_pack_scratch_bytes(size_t row_bytes) {
    return (size_t)KERNELS_PACK_ROWS * row_bytes;
}

int xs_pack_inplace(void *data, enum quant_type type, int64_t rows, int64_t cols, size_t row_bytes,
                    void *scratch) {
    const size_t group = (size_t)KERNELS_PACK_ROWS * row_bytes;
    const struct kern_mat g = {scratch, type, KERNELS_PACK_ROWS, cols, row_bytes, 0};
    if (rows % KERNELS_PACK_ROWS != 0 || !kernels_pack_layout_ok(type, rows, cols))
        return -1;
    for (int64_t r = 0; r < rows; r += KERNELS_PACK_ROWS) {
        uint8_t *p = (uint8_t *)data + (size_t)r * row_bytes;
        memcpy(scratch, p, group);
        if (kernels_pack(&g, p, 0, 1) != 0)
            return -1;
    }
    return 0;
}
