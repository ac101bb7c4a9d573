/* server/auth.h: Bearer API keys, compared in constant time.
 *
 *   struct auth_keys *k = auth_keys_init("sk-1", "/etc/strata/keys", &err);
 *   if (auth_keys_enabled(k) && !auth_check(k, header_value)) -> 401
 *
 * The key file holds one key a line; blank lines and lines starting with
 * '#' are skipped, surrounding whitespace trimmed.
 * Threading: immutable after init; auth_check is safe from any thread.
 */
#ifndef STRATA_SERVER_AUTH_H
#define STRATA_SERVER_AUTH_H

#include <stdbool.h>

#include "engine/core/error.h"

struct auth_keys;

/* key and key_file may each be NULL or "". owned: free with auth_keys_free() */
struct auth_keys *auth_keys_init(const char *key, const char *key_file, struct strata_error *err);
void auth_keys_free(struct auth_keys *k);          /* NULL is a no-op */
bool auth_keys_enabled(const struct auth_keys *k); /* false for NULL or no keys */
/* authorization: the raw Authorization header value (may be NULL). True when
 * it is "Bearer <key>" for one of the keys. Time depends only on the stored
 * keys' lengths, not on where a presented key differs. */
bool auth_check(const struct auth_keys *k, const char *authorization);
/* The same check, returning which key matched: its index in the order the
 * keys were loaded (--api-key first, then the file's lines), -1 when none;
 * 0 when no keys are configured. Same timing property as auth_check. */
int auth_key_index(const struct auth_keys *k, const char *authorization);

#endif
