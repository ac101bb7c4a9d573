/* server/daemon.c: process lifecycle of the daemon (see daemon.h). */
#include "server/daemon.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/host/sysinfo.h"
#include "server/auth.h"
#include "server/notify.h"
#include "server/server.h"

static void usage(const char *prog, FILE *out) {
    fprintf(out,
            "usage: %s [MODEL.gguf] [options]\n\n"
            "Serves the model over an OpenAI-compatible HTTP API.\n"
            "Precedence: command line > environment > config file > default.\n\n"
            "  --help               this text\n"
            "  --print-config       print every effective value and its source, then exit\n",
            prog);
    config_print_help(out);
}

/* The one thread policy (sysinfo_threads): the option's value when set
 * (cli > env > file), else available - 1 from the affinity mask and the
 * cgroup CPU quota, capped at 32 either way. The effective number and its
 * source go back into the config, so --print-config and /status show them. */
static int resolve_threads(struct config *cfg, struct sysinfo_limits *lim,
                           struct strata_error *err) {
    struct sysinfo_params sp = sysinfo_params_default();
    sp.root = config_str(cfg, CONFIG_SYS_ROOT);
    const int forced = (int)config_int(cfg, CONFIG_THREADS);
    const enum config_source fsrc = config_source_of(cfg, CONFIG_THREADS);
    struct sysinfo_threads th;
    if (sysinfo_threads(&sp, forced, config_source_name(fsrc), lim, &th, err))
        return err ? err->code : STRATA_E_INVALID;
    if (forced == th.n_threads)
        return 0;
    char text[16], rule[128];
    snprintf(text, sizeof(text), "%d", th.n_threads);
    enum config_source src = forced > 0                     ? fsrc /* capped at 32 */
                             : !strcmp(th.source, "cgroup") ? CONFIG_SOURCE_CGROUP
                                                            : CONFIG_SOURCE_AFFINITY;
    const char *less = lim->n_cpus > 1 ? "minus 1" : "at least 1";
    if (forced > 0)
        snprintf(rule, sizeof rule, "%d asked, capped at %d", forced, SYSINFO_MAX_THREADS);
    else if (src == CONFIG_SOURCE_CGROUP)
        snprintf(rule, sizeof rule, "cgroup CPU quota %.2f -> %d CPUs, %s%s", lim->cpu_quota,
                 lim->n_cpus, less, th.capped ? ", capped at 32" : "");
    else
        snprintf(rule, sizeof rule, "%d CPUs in the affinity mask, %s%s", lim->n_cpus, less,
                 th.capped ? ", capped at 32" : "");
    return config_derive_rule(cfg, CONFIG_THREADS, text, src, rule, err);
}

/* What the daemon sizes itself by, after the options (--print-config). */
static void print_limits(const struct sysinfo_limits *lim, FILE *out) {
    fprintf(out, "# CPUs %d (%s): affinity mask %d", lim->n_cpus, lim->cpu_source,
            lim->n_cpus_affinity);
    if (lim->cpu_quota > 0)
        fprintf(out, ", cgroup quota %.2f", lim->cpu_quota);
    if (lim->mem_budget >= 0)
        fprintf(out, "\n# memory budget %lld MiB (%s): cgroup limit ",
                (long long)(lim->mem_budget >> 20), lim->mem_source);
    else
        fprintf(out, "\n# memory budget unknown: cgroup limit ");
    if (lim->mem_cgroup >= 0)
        fprintf(out, "%lld MiB", (long long)(lim->mem_cgroup >> 20));
    else
        fprintf(out, "none");
    fprintf(out, ", MemAvailable ");
    if (lim->mem_available >= 0)
        fprintf(out, "%lld MiB\n", (long long)(lim->mem_available >> 20));
    else
        fprintf(out, "unknown\n");
}

/* The load's progress on stderr and to systemd (STATUS=): at info a line
 * every LOAD_LOG_EVERY_S seconds while a phase runs and one when a phase
 * that took longer ends; at debug also every phase's start and end. */
#define LOAD_LOG_EVERY_S 2.0
struct load_log {
    const char *prog;
    struct notify *nt;
    int level;
    const char *phase; /* the phase of the last call (static strings) */
    double t_phase, t_last;
    bool printed; /* a progress line of this phase went out */
};

/* "812.4 MB" below a GB, "4.21 GB" above. */
static const char *bytes_text(uint64_t n, char *buf, size_t cap) {
    if (n < 1000000000ull)
        snprintf(buf, cap, "%.1f MB", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.2f GB", (double)n / 1e9);
    return buf;
}

static void load_log_fn(void *arg, const char *phase, uint64_t done, uint64_t total) {
    struct load_log *l = arg;
    const double now = strata_now();
    char a[32], b[32];
    if (!l->phase || strcmp(l->phase, phase) || done == 0) {
        l->phase = phase;
        l->t_phase = l->t_last = now;
        l->printed = false;
        if (l->level >= 3)
            fprintf(stderr, "%s: loading: %s, %s\n", l->prog, phase,
                    bytes_text(total, a, sizeof a));
        return;
    }
    const bool end = done >= total;
    const double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    if (end && (l->printed || l->level >= 3 || now - l->t_phase >= LOAD_LOG_EVERY_S)) {
        if (l->level >= 2)
            fprintf(stderr, "%s: loading: %s done, %s in %.1f s\n", l->prog, phase,
                    bytes_text(total, a, sizeof a), now - l->t_phase);
    } else if (!end && now - l->t_last >= LOAD_LOG_EVERY_S) {
        const double rate = (double)done / 1e9 / (now - l->t_phase);
        if (l->level >= 2)
            fprintf(stderr, "%s: loading: %s %s of %s (%.0f%%), %.2f GB/s\n", l->prog, phase,
                    bytes_text(done, a, sizeof a), bytes_text(total, b, sizeof b), pct, rate);
        notify_sendf(l->nt, NULL, "STATUS=loading: %s %.0f%%", phase, pct);
        l->t_last = now;
        l->printed = true;
    }
}

int daemon_main(int argc, char **argv, const struct daemon_hooks *hooks) {
    const char *prog = hooks && hooks->prog ? hooks->prog : "strata serve";
    bool print_config = false;
    /* Take out the two action flags; the rest is the option table's. */
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    if (!args)
        return 1;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
            usage(prog, stdout);
            free(args);
            return 0;
        }
        if (i > 0 && !strcmp(argv[i], "--print-config"))
            print_config = true;
        else
            args[n++] = argv[i];
    }
    struct strata_error err = {0};
    struct config *cfg = config_load(&(struct config_params){n, args, NULL}, &err);
    free(args);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        return 2;
    }
    struct sysinfo_limits lim;
    if (resolve_threads(cfg, &lim, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        config_free(cfg);
        return 2;
    }
    if (print_config) {
        if (hooks && hooks->plan)
            hooks->plan(cfg, stdout);
        config_print(cfg, stdout);
        print_limits(&lim, stdout);
        config_free(cfg);
        return 0;
    }

    int rc = 1;
    bool info = config_int(cfg, CONFIG_LOG_LEVEL) >= 2; /* error 0, warn 1, info 2, debug 3 */
    struct auth_keys *keys = NULL;
    struct server *srv = NULL;
    struct gen_backend be = {NULL, NULL};
    bool be_open = false;
    struct notify *nt = NULL;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPIPE); /* a vanished client must not kill the daemon */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (info)
        fprintf(stderr,
                "%s: %d CPU(s) available (%s), memory budget %lld MiB (%s), %lld thread(s) (%s)\n",
                prog, lim.n_cpus, lim.cpu_source,
                lim.mem_budget >= 0 ? (long long)(lim.mem_budget >> 20) : -1LL, lim.mem_source,
                config_int(cfg, CONFIG_THREADS),
                config_source_name(config_source_of(cfg, CONFIG_THREADS)));

    /* systemd Type=notify (server/notify.h); a bad NOTIFY_SOCKET is a
     * warning: the daemon still serves, systemd then times the start out. */
    nt = notify_init(config_str(cfg, CONFIG_NOTIFY_SOCKET), config_int(cfg, CONFIG_WATCHDOG_USEC),
                     (int)config_int(cfg, CONFIG_WATCHDOG_PID), &err);
    if (!nt || notify_watchdog_start(nt, &err))
        fprintf(stderr, "%s: warning: %s\n", prog, err.message);
    strata_error_clear(&err);

    keys =
        auth_keys_init(config_str(cfg, CONFIG_API_KEY), config_str(cfg, CONFIG_API_KEY_FILE), &err);
    if (!keys) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        rc = 2;
        goto out;
    }
    /* The HTTP server starts first so /health answers 503 while loading; its
     * generation backend is filled in below, before ready is set. */
    struct server_params p = server_params_default();
    p.host = config_str(cfg, CONFIG_HOST);
    p.port = (int)config_int(cfg, CONFIG_PORT);
    p.max_body = (size_t)config_int(cfg, CONFIG_MAX_BODY);
    p.timeout_s = (int)config_int(cfg, CONFIG_TIMEOUT);
    p.max_connections = (int)config_int(cfg, CONFIG_MAX_CONNECTIONS);
    p.keepalive_ms = (int)config_int(cfg, CONFIG_KEEPALIVE_MS);
    p.cors_origins = config_str(cfg, CONFIG_CORS_ORIGIN);
    p.web_ui = config_bool(cfg, CONFIG_WEB_UI);
    p.log_level = (int)config_int(cfg, CONFIG_LOG_LEVEL);
    p.always_usage = config_bool(cfg, CONFIG_ALWAYS_USAGE);
    p.auth = keys;
    srv = server_init(&p, &err);
    if (!srv) {
        fprintf(stderr, "%s: %s\n", prog, err.message);
        goto out;
    }
    /* an IPv6 literal goes in brackets in a URL */
    const bool v6 = strchr(p.host, ':') && p.host[0] != '[';
    if (info)
        fprintf(stderr, "%s: listening on http://%s%s%s:%d%s\n", prog, v6 ? "[" : "", p.host,
                v6 ? "]" : "", server_port(srv),
                auth_keys_enabled(keys) ? " (API key required)" : "");
    fflush(stderr);
    if (hooks && hooks->open) {
        /* the open hook loads the weights and runs one warm-up forward step */
        notify_sendf(nt, NULL, "STATUS=loading model %s, then warming up",
                     config_str(cfg, CONFIG_MODEL));
        struct load_log ll = {
            .prog = prog, .nt = nt, .level = (int)config_int(cfg, CONFIG_LOG_LEVEL)};
        const struct strata_progress progress = {load_log_fn, &ll};
        if (hooks->open(cfg, &progress, &be, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.message);
            rc = err.code == STRATA_E_CONFIG ? 2 : 1;
            goto out;
        }
        be_open = true;
        server_set_gen(srv, be);
    }
    server_set_ready(srv, true);
    notify_sendf(nt, NULL, "READY=1\nSTATUS=serving on %s:%d", p.host, server_port(srv));

    int sig = 0;
    sigset_t wait_set;
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGTERM);
    sigaddset(&wait_set, SIGINT);
    while (sigwait(&wait_set, &sig) != 0)
        ;
    notify_sendf(nt, NULL, "STOPPING=1\nSTATUS=draining (up to %llds)",
                 config_int(cfg, CONFIG_SHUTDOWN_TIMEOUT));
    if (info)
        fprintf(stderr, "%s: signal %d: draining (up to %llds)\n", prog, sig,
                config_int(cfg, CONFIG_SHUTDOWN_TIMEOUT));
    int n_cancelled = server_shutdown(srv, (int)config_int(cfg, CONFIG_SHUTDOWN_TIMEOUT) * 1000);
    if (info)
        fprintf(stderr, "%s: stopped (%d request(s) cancelled)\n", prog, n_cancelled);
    rc = 0;
out:
    if (rc)
        notify_sendf(nt, NULL, "STATUS=failed: %s", err.message);
    server_shutdown(srv, 0); /* no-op after a drain; needed on the error paths */
    if (be_open && hooks->close)
        hooks->close(&be); /* every job gets DONE: exchanges are freed */
    server_free(srv);
    auth_keys_free(keys);
    notify_free(nt); /* last: the watchdog pings until the very end */
    config_free(cfg);
    return rc;
}
