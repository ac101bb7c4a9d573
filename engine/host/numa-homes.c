/* engine/host/numa-homes.c: the table of memory ranges placed for one pool
 * group (numa-homes.h). A sorted array searched by bisection: the expert
 * store registers one range a node, so it holds a handful of entries. */
#include "engine/host/numa-homes.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct home_range {
    uintptr_t lo, hi; /* [lo, hi) */
    int group;
};

/* Registered global (numa-homes.h): guarded by homes_mu. */
static pthread_mutex_t homes_mu = PTHREAD_MUTEX_INITIALIZER;
static struct home_range *homes; /* (n_homes) ascending by lo, disjoint */
static int n_homes, cap_homes;

/* Index of the first range with lo > a. */
static int upper(uintptr_t a) {
    int lo = 0, hi = n_homes;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (homes[mid].lo <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int find(uintptr_t a) {
    const int i = upper(a) - 1;
    return i >= 0 && a < homes[i].hi ? homes[i].group : -1;
}

int host_numa_homes_add(const void *addr, size_t len, int group, struct strata_error *err) {
    const uintptr_t lo = (uintptr_t)addr, hi = lo + len;
    if ((group != 0 && group != 1) || !addr || !len || hi < lo)
        return strata_error_set(err, STRATA_E_INVALID,
                                "numa homes: bad range %p + %zu for group %d", addr, len, group);
    pthread_mutex_lock(&homes_mu);
    int rc = 0;
    const int i = upper(lo);
    if ((i > 0 && homes[i - 1].hi > lo) || (i < n_homes && homes[i].lo < hi)) {
        rc = strata_error_set(err, STRATA_E_INVALID,
                              "numa homes: %p + %zu overlaps a registered range", addr, len);
        goto out;
    }
    if (n_homes == cap_homes) {
        const int cap = cap_homes ? 2 * cap_homes : 8;
        struct home_range *h = realloc(homes, (size_t)cap * sizeof *h);
        if (!h) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "numa homes: out of memory");
            goto out;
        }
        homes = h;
        cap_homes = cap;
    }
    memmove(homes + i + 1, homes + i, (size_t)(n_homes - i) * sizeof *homes);
    homes[i] = (struct home_range){lo, hi, group};
    n_homes++;
out:
    pthread_mutex_unlock(&homes_mu);
    return rc;
}

void host_numa_homes_remove(const void *addr) {
    const uintptr_t lo = (uintptr_t)addr;
    pthread_mutex_lock(&homes_mu);
    const int i = upper(lo) - 1;
    if (i >= 0 && homes[i].lo == lo) {
        memmove(homes + i, homes + i + 1, (size_t)(n_homes - i - 1) * sizeof *homes);
        if (--n_homes == 0) {
            free(homes);
            homes = NULL;
            cap_homes = 0;
        }
    }
    pthread_mutex_unlock(&homes_mu);
}

void host_numa_homes_remove_within(const void *lo, size_t len) {
    const uintptr_t a = (uintptr_t)lo, b = a + len;
    pthread_mutex_lock(&homes_mu);
    int k = 0;
    for (int i = 0; i < n_homes; i++)
        if (homes[i].lo < a || homes[i].lo >= b)
            homes[k++] = homes[i];
    n_homes = k;
    if (n_homes == 0) {
        free(homes);
        homes = NULL;
        cap_homes = 0;
    }
    pthread_mutex_unlock(&homes_mu);
}

int host_numa_home_of(const void *addr) {
    int g;
    host_numa_homes_lookup(&addr, 1, &g);
    return g;
}

void host_numa_homes_lookup(const void *const *addrs, int n, int *groups) {
    pthread_mutex_lock(&homes_mu);
    for (int i = 0; i < n; i++)
        groups[i] = n_homes ? find((uintptr_t)addrs[i]) : -1;
    pthread_mutex_unlock(&homes_mu);
}

int host_numa_homes_count(void) {
    pthread_mutex_lock(&homes_mu);
    const int n = n_homes;
    pthread_mutex_unlock(&homes_mu);
    return n;
}

int host_numa_home_rule(int e, const int threads[2]) {
    const int64_t t1 = threads[1] > 0 ? threads[1] : 0, t = (threads[0] > 0 ? threads[0] : 0) + t1;
    if (t1 == 0 || e < 0)
        return 0;
    /* group 1's when group 1's running share steps up at e */
    return ((int64_t)e + 1) * t1 / t > (int64_t)e * t1 / t;
}
