/* server/auth.c: API keys (see auth.h). */
#include "server/auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AUTH_MAX_KEYS 4096
#define AUTH_MAX_KEY_LEN 1024

struct auth_keys {
    char **keys; /* owned: n_keys NUL-terminated keys */
    size_t n_keys;
};

static int add_key(struct auth_keys *k, const char *s, size_t len, struct strata_error *err) {
    if (len > AUTH_MAX_KEY_LEN || k->n_keys >= AUTH_MAX_KEYS)
        return strata_error_set(err, STRATA_E_CONFIG,
                                "api keys: more than %d keys or a key over "
                                "%d bytes",
                                AUTH_MAX_KEYS, AUTH_MAX_KEY_LEN);
    char **keys = realloc(k->keys, (k->n_keys + 1) * sizeof(*keys));
    if (!keys)
        return strata_error_set(err, STRATA_E_NOMEM, "api keys: out of memory");
    k->keys = keys;
    if (!(keys[k->n_keys] = strndup(s, len)))
        return strata_error_set(err, STRATA_E_NOMEM, "api keys: out of memory");
    k->n_keys++;
    return 0;
}

struct auth_keys *auth_keys_init(const char *key, const char *key_file, struct strata_error *err) {
    struct auth_keys *k = calloc(1, sizeof(*k));
    FILE *fp = NULL;
    if (!k) {
        strata_error_set(err, STRATA_E_NOMEM, "api keys: out of memory");
        return NULL;
    }
    if (key && *key && add_key(k, key, strlen(key), err))
        goto fail;
    if (key_file && *key_file) {
        /* a regular file only: fopen() of a FIFO with no writer blocked for
         * ever, with SIGTERM already blocked for the daemon's sigwait */
        struct stat st;
        bool regular = stat(key_file, &st) != 0 || S_ISREG(st.st_mode); /* open reports errors */
        int fd = regular ? open(key_file, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
        if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)))
            regular = false;
        int e = errno;
        if (fd >= 0 && regular && !(fp = fdopen(fd, "r")))
            e = errno;
        if (!fp) {
            if (fd >= 0)
                close(fd);
            strata_error_set(err, STRATA_E_CONFIG, "cannot open api-key-file '%s': %s", key_file,
                             regular ? strerror(e) : "not a regular file");
            goto fail;
        }
        char line[AUTH_MAX_KEY_LEN + 64];
        while (fgets(line, sizeof(line), fp)) {
            char *s = line;
            while (isspace((unsigned char)*s))
                s++;
            size_t n = strlen(s);
            while (n && isspace((unsigned char)s[n - 1]))
                n--;
            if (!n || *s == '#')
                continue;
            if (add_key(k, s, n, err))
                goto fail;
        }
        fclose(fp);
        fp = NULL;
        if (!k->n_keys) {
            strata_error_set(err, STRATA_E_CONFIG, "api-key-file '%s' holds no key", key_file);
            goto fail;
        }
    }
    return k;
fail:
    if (fp)
        fclose(fp);
    auth_keys_free(k);
    return NULL;
}

void auth_keys_free(struct auth_keys *k) {
    if (!k)
        return;
    for (size_t i = 0; i < k->n_keys; i++)
        free(k->keys[i]);
    free(k->keys);
    free(k);
}

bool auth_keys_enabled(const struct auth_keys *k) {
    return k && k->n_keys > 0;
}

/* Constant time in the stored key: every byte of `key` is visited whatever
 * `got` holds; a length mismatch only sets a bit. */
static int key_diff(const char *key, const char *got, size_t got_len) {
    size_t len = strlen(key);
    unsigned diff = (unsigned)(len != got_len);
    for (size_t i = 0; i < len; i++) {
        unsigned char g = i < got_len ? (unsigned char)got[i] : 0;
        diff |= (unsigned)((unsigned char)key[i] ^ g);
    }
    return diff != 0;
}

int auth_key_index(const struct auth_keys *k, const char *authorization) {
    if (!auth_keys_enabled(k))
        return 0;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7))
        return -1;
    const char *got = authorization + 7;
    while (*got == ' ')
        got++;
    size_t got_len = strlen(got);
    while (got_len && got[got_len - 1] == ' ')
        got_len--;
    /* no early exit and no branch on a match: all keys are compared, and the
     * index is selected with a mask */
    unsigned found = ~0u;
    for (size_t i = 0; i < k->n_keys; i++) {
        unsigned match = 0u - (unsigned)!key_diff(k->keys[i], got, got_len); /* all ones or 0 */
        found = (found & ~match) | ((unsigned)i & match);
    }
    return found == ~0u ? -1 : (int)found;
}

bool auth_check(const struct auth_keys *k, const char *authorization) {
    return auth_key_index(k, authorization) >= 0;
}
