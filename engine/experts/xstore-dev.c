/* engine/experts/xstore-dev.c: the store's read queue depth from the block
 * device holding the model file (xstore_params.queue_depth 0): sysfs's
 * queue/nr_requests of the device (or of the disk a partition is on), at
 * most 256 entries (the ring's memory grows with it; a decode step's layer
 * reads n_expert_used x 3 matrices: 24 for top-8, so even 32 never splits
 * a decode batch), at most 32 on a device that says it is rotational (a
 * SATA disk's NCQ holds 32 commands; more wait in the kernel's queue
 * anyway). No block device behind the file (tmpfs, overlay, a network
 * filesystem: major 0) or no sysfs: 64. The rule that gave the depth is
 * kept for the start-up line and /status. */
#include "engine/experts/xstore-impl.h"

#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define XS_QD_DEFAULT 64
#define XS_QD_MAX 256
#define XS_QD_MIN 4
#define XS_QD_ROTATIONAL 32

/* The integer in a sysfs file, or -1. */
static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

int xs_dev_queue_depth(int fd, char *rule, size_t rule_n) {
    struct stat st;
    if (fstat(fd, &st) != 0 || major(st.st_dev) == 0) {
        snprintf(rule, rule_n, "default %d: no block device behind the file", XS_QD_DEFAULT);
        return XS_QD_DEFAULT;
    }
    const unsigned ma = major(st.st_dev), mi = minor(st.st_dev);
    char q[96], path[128];
    /* a whole disk has queue/; a partition's is its parent's */
    snprintf(q, sizeof q, "/sys/dev/block/%u:%u/queue", ma, mi);
    snprintf(path, sizeof path, "%s/nr_requests", q);
    long nr = read_long(path);
    if (nr < 0) {
        snprintf(q, sizeof q, "/sys/dev/block/%u:%u/../queue", ma, mi);
        snprintf(path, sizeof path, "%s/nr_requests", q);
        nr = read_long(path);
    }
    if (nr <= 0) {
        snprintf(rule, rule_n, "default %d: no queue/nr_requests for device %u:%u", XS_QD_DEFAULT,
                 ma, mi);
        return XS_QD_DEFAULT;
    }
    snprintf(path, sizeof path, "%s/rotational", q);
    const long rot = read_long(path);
    long qd = nr > XS_QD_MAX ? XS_QD_MAX : nr < XS_QD_MIN ? XS_QD_MIN : nr;
    if (rot == 1 && qd > XS_QD_ROTATIONAL)
        qd = XS_QD_ROTATIONAL;
    snprintf(rule, rule_n, "device %u:%u nr_requests %ld%s", ma, mi, nr,
             rot == 1 ? ", rotational" : "");
    return (int)qd;
}
