/* engine/core/buf.h: the one growable-array helper (the capacity doubling
 * that every module used to write by hand).
 *
 *   int32_t *ids = NULL;
 *   size_t n = 0, cap = 0;
 *   if (strata_grow((void **)&ids, &cap, n + 1, sizeof *ids) < 0)
 *       return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
 *   ids[n++] = tok;
 *
 *   char *text = NULL;
 *   size_t len = 0, tcap = 0;                 // text stays NUL-terminated
 *   if (strata_append(&text, &len, &tcap, piece, piece_len) < 0) ...
 *
 * Ownership: *ptr is owned by the caller (free() it); these functions only
 * realloc it. Threading: reentrant (no shared state).
 */
#ifndef STRATA_BUF_H
#define STRATA_BUF_H

#include <stddef.h>

/* Makes *ptr hold at least `need` elements of `elem` bytes; *cap counts
 * elements. The capacity doubles (from 16) and never shrinks. Returns 0, or
 * -1 on overflow or out of memory with *ptr and *cap unchanged. */
int strata_grow(void **ptr, size_t *cap, size_t need, size_t elem);

/* Appends n bytes of src to the NUL-terminated byte string *buf of *len
 * bytes (capacity *cap bytes, the NUL included). Returns 0, or -1 as
 * strata_grow (nothing appended). */
int strata_append(char **buf, size_t *len, size_t *cap, const void *src, size_t n);

#endif
