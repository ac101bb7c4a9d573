/* engine/experts/xstore-plan.c: whether the expert store runs and with what
 * budget (xstore.h "the start-up decision"), from the options and the
 * machine's memory budget. */
#include <stdio.h>
#include <string.h>

#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"

#define MIB (1024.0 * 1024.0)

uint64_t xstore_expert_bytes(const struct gguf_file *f) {
    static const char tail[] = "_exps.weight";
    const uint64_t n = sizeof tail - 1;
    uint64_t bytes = 0;
    for (int64_t i = 0; f && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        if (t && t->name.len > n && !memcmp(t->name.ptr + t->name.len - n, tail, n) &&
            t->name.len > 4 && !memcmp(t->name.ptr, "blk.", 4))
            bytes += t->n_bytes;
    }
    return bytes;
}

static int pick(const char *v, const char *const *names, int n, const char *opt, int *out,
                struct strata_error *err) {
    for (int i = 0; i < n; i++)
        if (v && !strcmp(v, names[i])) {
            *out = i;
            return 0;
        }
    char list[64] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "", names[i]);
    return strata_error_set(err, STRATA_E_INVALID, "%s: '%s' is not one of %s", opt,
                            v ? v : "(null)", list);
}

int xstore_plan(const struct xstore_plan_in *in, struct xstore_plan *out,
                struct strata_error *err) {
    static const char *const modes[3] = {"auto", "on", "off"};
    static const char *const ios[3] = {"auto", "io_uring", "pread"};
    static const char *const directs[3] = {"auto", "on", "off"};
    int mode = 0, io = 0, direct = 0, fixed = 0, rc; /* pick sets each on success */
    memset(out, 0, sizeof *out);
    out->params = xstore_params_default();
    if ((rc = pick(in->mode, modes, 3, "--expert-store", &mode, err)) ||
        (rc = pick(in->io, ios, 3, "--expert-io", &io, err)) ||
        (rc = pick(in->direct, directs, 3, "--expert-direct", &direct, err)) ||
        (rc = pick(in->fixed ? in->fixed : "auto", directs, 3, "--expert-fixed", &fixed, err)))
        return rc;
    if (in->ram < 0)
        return strata_error_set(err, STRATA_E_INVALID, "--expert-ram: %lld bytes",
                                (long long)in->ram);
    out->params.io = io == 1 ? XSTORE_IO_URING : io == 2 ? XSTORE_IO_PREAD : XSTORE_IO_AUTO;
    out->params.direct = direct == 1   ? XSTORE_DIRECT_ON
                         : direct == 2 ? XSTORE_DIRECT_OFF
                                       : XSTORE_DIRECT_AUTO;
    out->params.fixed = fixed == 1   ? XSTORE_FIXED_ON
                        : fixed == 2 ? XSTORE_FIXED_OFF
                                     : XSTORE_FIXED_AUTO;
    const int64_t budget = in->mem_budget;
    int64_t margin = budget > 0 ? budget / 16 : 0;
    margin = margin < (256 << 20) ? (256 << 20) : margin;
    const uint64_t need = in->model_bytes + in->kv_bytes + (uint64_t)margin;
    if (in->expert_bytes == 0) {
        snprintf(out->rule, sizeof out->rule, "off: no routed experts");
        return 0;
    }
    if (mode == 2) {
        snprintf(out->rule, sizeof out->rule, "off (--expert-store off)");
        return 0;
    }
    if (mode == 0 && (budget <= 0 || need <= (uint64_t)budget)) {
        if (budget <= 0)
            snprintf(out->rule, sizeof out->rule, "auto: off (memory budget unknown)");
        else
            snprintf(out->rule, sizeof out->rule,
                     "auto: off (%.0f MiB of weights + %.0f MiB KV + %.0f MiB margin fit the "
                     "%.0f MiB budget)",
                     (double)in->model_bytes / MIB, (double)in->kv_bytes / MIB,
                     (double)margin / MIB, (double)budget / MIB);
        return 0;
    }
    out->on = true;
    uint64_t ram = (uint64_t)in->ram;
    const char *ram_rule = "--expert-ram";
    if (!ram && budget > 0) {
        const int64_t left =
            budget - (int64_t)(in->model_bytes - in->expert_bytes) - (int64_t)in->kv_bytes - margin;
        ram = left > (64 << 20) ? (uint64_t)left : (64 << 20);
        ram_rule = "budget - skeleton - KV - margin";
    } else if (!ram) {
        ram_rule = "a slot for every expert (no budget known)"; /* xstore_init's 0 */
    }
    out->params.ram_bytes = ram;
    out->params.prefetch = in->prefetch < 0                     ? 0
                           : in->prefetch > XSTORE_PREFETCH_MAX ? XSTORE_PREFETCH_MAX
                                                                : in->prefetch;
    out->params.pack = true; /* the CPU computes the slots (cpu_moe_run) */
    out->params.warm = true; /* the slots filled at load, not by the first requests' misses */
    snprintf(out->rule, sizeof out->rule, "%s: expert RAM %.0f MiB (%s) for %.0f MiB of experts",
             mode == 1 ? "on (--expert-store on)" : "auto: on (the model does not fit the budget)",
             ram ? (double)ram / MIB : (double)in->expert_bytes / MIB, ram_rule,
             (double)in->expert_bytes / MIB);
    return 0;
}
