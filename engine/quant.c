/* engine/quant.c: placeholder until the reference kernels land. */
#include "engine/quant.h"
