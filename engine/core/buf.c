/* engine/core/buf.c: see buf.h. */
#include "engine/core/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int strata_grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    if (elem == 0 || need > SIZE_MAX / elem)
        return -1;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    if (n > SIZE_MAX / elem)
        n = need;
    void *p = realloc(*ptr, n * elem);
    if (!p)
        return -1;
    *ptr = p;
    *cap = n;
    return 0;
}

int strata_append(char **buf, size_t *len, size_t *cap, const void *src, size_t n) {
    if (n > SIZE_MAX - *len - 1)
        return -1;
    if (strata_grow((void **)buf, cap, *len + n + 1, 1) < 0)
        return -1;
    if (n)
        memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}
