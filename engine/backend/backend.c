/* engine/backend/backend.c: what every backend shares (backend.h). */
#include "engine/backend/backend.h"

#include <stdlib.h>

void backend_free(struct backend *be) {
    if (!be)
        return;
    if (be->ops && be->ops->free)
        be->ops->free(be->ctx);
    free(be);
}
