/* config/config.c: option table, parsing and precedence (see config.h). */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const struct config_option options[CONFIG_N_OPTIONS] = {
#define CONFIG_ROW(id, name, env, flag, type, min, max, def, doc)                                  \
    {name, env, flag, type, min, max, def, doc},
    CONFIG_OPTIONS(CONFIG_ROW)
#undef CONFIG_ROW
};

/* The short flags `strata run` and llama-server take, as aliases of table
 * rows (the table keeps one long flag each; --help lists these beside it). */
static const struct {
    const char *flag;
    enum config_id id;
} short_flags[] = {
    {"-m", CONFIG_MODEL}, {"-t", CONFIG_THREADS},   {"-c", CONFIG_CTX_SIZE},
    {"-b", CONFIG_BATCH}, {"-np", CONFIG_PARALLEL}, {"-a", CONFIG_API_KEY},
};

static int find_short(const char *flag, size_t len) {
    for (size_t i = 0; i < sizeof short_flags / sizeof short_flags[0]; i++)
        if (strlen(short_flags[i].flag) == len && !strncmp(short_flags[i].flag, flag, len))
            return (int)short_flags[i].id;
    return -1;
}

struct config {
    char *text[CONFIG_N_OPTIONS];     /* owned: effective value as text */
    long long ival[CONFIG_N_OPTIONS]; /* parsed INT/BOOL/LEVEL value */
    enum config_source src[CONFIG_N_OPTIONS];
    char *rule[CONFIG_N_OPTIONS]; /* owned or NULL: how a derived value was found */
};

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const struct config_option *config_option(enum config_id id) {
    STRATA_ASSERT(id >= 0 && id < CONFIG_N_OPTIONS);
    return &options[id];
}

const char *config_source_name(enum config_source src) {
    switch (src) {
    case CONFIG_SOURCE_DEFAULT:
        return "default";
    case CONFIG_SOURCE_FILE:
        return "file";
    case CONFIG_SOURCE_ENV:
        return "env";
    case CONFIG_SOURCE_CLI:
        return "cli";
    case CONFIG_SOURCE_CGROUP:
        return "cgroup";
    case CONFIG_SOURCE_AFFINITY:
        return "affinity";
    case CONFIG_SOURCE_AUTO:
        return "auto";
    }
    return "?";
}

/* Where a value came from, for messages: "--port", "STRATA_PORT", ... */
static const char *where(enum config_source src, const struct config_option *o) {
    switch (src) {
    case CONFIG_SOURCE_CLI:
        return o->flag;
    case CONFIG_SOURCE_ENV:
        return o->env;
    case CONFIG_SOURCE_FILE:
        return "the config file";
    case CONFIG_SOURCE_CGROUP:
    case CONFIG_SOURCE_AFFINITY:
        return "the CPU limits";
    case CONFIG_SOURCE_AUTO:
        return "the automatic sizing";
    default:
        return "the default";
    }
}

static int parse_int(const char *s, long long *out) {
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno)
        return -1;
    long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024LL, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024LL * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024LL * 1024 * 1024, end++;
    if (*end)
        return -1;
    if (v > 0 && v > (long long)(9e18 / (double)mul))
        return -1;
    if (v < 0 && v < -(long long)(9e18 / (double)mul))
        return -1;
    *out = v * mul;
    return 0;
}

static int parse_bool(const char *s, long long *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i]))
            return *out = 1, 0;
        if (!strcasecmp(s, no[i]))
            return *out = 0, 0;
    }
    return -1;
}

/* Validates `value` for option id and stores it with its source. */
static int config_set(struct config *cfg, enum config_id id, const char *value,
                      enum config_source src, struct strata_error *err) {
    const struct config_option *o = &options[id];
    long long v = 0;
    switch (o->type) {
    case CONFIG_TYPE_INT:
        if (parse_int(value, &v) || v < o->min || v > o->max)
            return strata_error_set(err, STRATA_E_CONFIG,
                                    "invalid value '%s' for option %s (from %s): allowed integers "
                                    "%lld..%lld",
                                    value, o->name, where(src, o), o->min, o->max);
        break;
    case CONFIG_TYPE_BOOL:
        if (parse_bool(value, &v))
            return strata_error_set(err, STRATA_E_CONFIG,
                                    "invalid value '%s' for option %s (from %s): allowed "
                                    "true|false|1|0|yes|no|on|off",
                                    value, o->name, where(src, o));
        break;
    case CONFIG_TYPE_LEVEL:
        v = -1;
        for (int i = 0; i < 4; i++)
            if (!strcasecmp(value, level_names[i]))
                v = i;
        if (v < 0)
            return strata_error_set(err, STRATA_E_CONFIG,
                                    "invalid value '%s' for option %s (from %s): allowed "
                                    "error|warn|info|debug",
                                    value, o->name, where(src, o));
        break;
    case CONFIG_TYPE_STRING:
    case CONFIG_TYPE_PATH:
        if (strlen(value) > 4096)
            return strata_error_set(err, STRATA_E_CONFIG,
                                    "value for option %s (from %s) is longer than 4096 bytes",
                                    o->name, where(src, o));
        break;
    }
    char *copy = strdup(value);
    if (!copy)
        return strata_error_set(err, STRATA_E_NOMEM, "config: out of memory");
    free(cfg->text[id]);
    cfg->text[id] = copy;
    cfg->ival[id] = v;
    cfg->src[id] = src;
    return 0;
}

static int find_by_name(const char *name) {
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (!strcmp(options[i].name, name))
            return i;
    return -1;
}

static int find_by_flag(const char *flag, size_t len) {
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (strlen(options[i].flag) == len && !strncmp(options[i].flag, flag, len))
            return i;
    return -1;
}

static const char *env_lookup(const struct config_params *p, const char *name) {
    if (!p->envp)
        return getenv(name); /* the one place in strata that reads the environment */
    size_t n = strlen(name);
    for (const char *const *e = p->envp; *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int load_file(struct config *cfg, const char *path, struct strata_error *err) {
    FILE *fp = fopen(path, "r");
    if (!fp)
        return strata_error_set(err, STRATA_E_CONFIG, "cannot open config file '%s': %s", path,
                                strerror(errno));
    char line[8192];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof(line), fp)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = strata_error_set(err, STRATA_E_CONFIG, "%s:%d: expected 'name = value'", path,
                                  lineno);
            break;
        }
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        int id = find_by_name(name);
        if (id < 0 || id == CONFIG_CONFIG) {
            rc = strata_error_set(err, STRATA_E_CONFIG, "%s:%d: unknown option '%s'", path, lineno,
                                  name);
            break;
        }
        /* A file value never overrides env or CLI (applied later anyway). */
        rc = config_set(cfg, id, value, CONFIG_SOURCE_FILE, err);
        if (rc)
            strata_error_prefix(err, "%s:%d", path, lineno);
    }
    fclose(fp);
    return rc;
}

/* Walks argv; calls config_set for each recognised flag when apply is true.
 * With apply false it only validates the syntax and finds --config. */
static int parse_cli(struct config *cfg, const struct config_params *p, struct strata_error *err) {
    int n_positional = 0;
    for (int i = 1; i < p->argc; i++) {
        const char *a = p->argv[i];
        if (strncmp(a, "--", 2) && (a[0] != '-' || find_short(a, strlen(a)) < 0)) {
            if (n_positional++ > 0 || a[0] == '-')
                return strata_error_set(err, STRATA_E_CONFIG, "unexpected argument '%s'", a);
            int rc = config_set(cfg, CONFIG_MODEL, a, CONFIG_SOURCE_CLI, err);
            if (rc)
                return rc;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL; /* -t=2 is not a short flag */
        size_t flen = eq ? (size_t)(eq - a) : strlen(a);
        int id = a[1] == '-' ? find_by_flag(a, flen) : find_short(a, flen);
        bool negated = false;
        if (id < 0 && !eq && flen > 5 && !strncmp(a, "--no-", 5)) {
            /* --no-web-ui is --web-ui=false (llama-server's --no-webui form) */
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", a + 5);
            id = find_by_flag(flag, strlen(flag));
            if (id >= 0 && options[id].type != CONFIG_TYPE_BOOL)
                return strata_error_set(err, STRATA_E_CONFIG, "option %s is not a switch: '%s'",
                                        options[id].flag, a);
            negated = id >= 0;
        }
        if (id < 0)
            return strata_error_set(err, STRATA_E_CONFIG, "unknown option '%.*s' (see --help)",
                                    (int)flen, a);
        const char *value;
        if (negated)
            value = "false";
        else if (eq)
            value = eq + 1;
        else if (options[id].type == CONFIG_TYPE_BOOL)
            value = "true";
        else if (i + 1 < p->argc)
            value = p->argv[++i];
        else
            return strata_error_set(err, STRATA_E_CONFIG, "option %s needs a value",
                                    options[id].flag);
        int rc = config_set(cfg, id, value, CONFIG_SOURCE_CLI, err);
        if (rc)
            return rc;
    }
    return 0;
}

struct config *config_load(const struct config_params *params, struct strata_error *err) {
    struct config_params empty = {0, NULL, NULL};
    const struct config_params *p = params ? params : &empty;
    struct config *cfg = calloc(1, sizeof(*cfg));
    struct config *cli = calloc(1, sizeof(*cli));
    if (!cfg || !cli) {
        strata_error_set(err, STRATA_E_NOMEM, "config: out of memory");
        goto fail;
    }
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (config_set(cfg, i, options[i].def, CONFIG_SOURCE_DEFAULT, err))
            goto fail; /* a bad default is a bug in the table; reported, not asserted */
    /* CLI first into a scratch config: it may name the config file. */
    if (parse_cli(cli, p, err))
        goto fail;
    const char *file = NULL;
    if (cli->text[CONFIG_CONFIG])
        file = cli->text[CONFIG_CONFIG];
    else if (env_lookup(p, options[CONFIG_CONFIG].env))
        file = env_lookup(p, options[CONFIG_CONFIG].env);
    if (file && *file && load_file(cfg, file, err))
        goto fail;
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const char *v = env_lookup(p, options[i].env);
        if (v && config_set(cfg, i, v, CONFIG_SOURCE_ENV, err))
            goto fail;
    }
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        if (cli->text[i] && config_set(cfg, i, cli->text[i], CONFIG_SOURCE_CLI, err))
            goto fail;
    config_free(cli);
    return cfg;
fail:
    config_free(cli);
    config_free(cfg);
    return NULL;
}

int config_derive(struct config *cfg, enum config_id id, const char *value, enum config_source src,
                  struct strata_error *err) {
    if (!cfg || id < 0 || id >= CONFIG_N_OPTIONS || !value)
        return strata_error_set(err, STRATA_E_INVALID, "config_derive: bad arguments");
    return config_set(cfg, id, value, src, err);
}

int config_derive_rule(struct config *cfg, enum config_id id, const char *value,
                       enum config_source src, const char *rule, struct strata_error *err) {
    int rc = config_derive(cfg, id, value, src, err);
    if (rc || !rule)
        return rc;
    char *copy = strdup(rule);
    if (!copy)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    free(cfg->rule[id]);
    cfg->rule[id] = copy;
    return 0;
}

const char *config_rule_of(const struct config *cfg, enum config_id id) {
    STRATA_ASSERT(id >= 0 && id < CONFIG_N_OPTIONS);
    return cfg->rule[id] ? cfg->rule[id] : "";
}

void config_free(struct config *cfg) {
    if (!cfg)
        return;
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        free(cfg->text[i]);
        free(cfg->rule[i]);
    }
    free(cfg);
}

long long config_int(const struct config *cfg, enum config_id id) {
    STRATA_ASSERT(id >= 0 && id < CONFIG_N_OPTIONS);
    return cfg->ival[id];
}

bool config_bool(const struct config *cfg, enum config_id id) {
    return config_int(cfg, id) != 0;
}

const char *config_str(const struct config *cfg, enum config_id id) {
    STRATA_ASSERT(id >= 0 && id < CONFIG_N_OPTIONS);
    return cfg->text[id] ? cfg->text[id] : "";
}

enum config_source config_source_of(const struct config *cfg, enum config_id id) {
    STRATA_ASSERT(id >= 0 && id < CONFIG_N_OPTIONS);
    return cfg->src[id];
}

void config_print(const struct config *cfg, FILE *out) {
    int w = 0;
    for (int i = 0; i < CONFIG_N_OPTIONS; i++)
        w = (int)strlen(options[i].name) > w ? (int)strlen(options[i].name) : w;
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const char *v = config_str(cfg, i);
        if (i == CONFIG_API_KEY && *v)
            v = "(set, hidden)";
        fprintf(out, "%-*s = %-24s (%s%s%s)\n", w, options[i].name, v,
                config_source_name(cfg->src[i]), cfg->rule[i] ? ": " : "",
                cfg->rule[i] ? cfg->rule[i] : "");
    }
}

void config_print_help(FILE *out) {
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        const struct config_option *o = &options[i];
        char range[64] = "";
        if (o->type == CONFIG_TYPE_INT)
            snprintf(range, sizeof(range), " [%lld..%lld]", o->min, o->max);
        char flags[40];
        snprintf(flags, sizeof flags, "%s", o->flag);
        for (size_t k = 0; k < sizeof short_flags / sizeof short_flags[0]; k++)
            if ((int)short_flags[k].id == i)
                snprintf(flags, sizeof flags, "%s, %s", short_flags[k].flag, o->flag);
        fprintf(out, "  %-20s %s%s (default: %s; env %s)\n", flags, o->doc, range,
                *o->def ? o->def : "none", o->env);
    }
    fprintf(out, "  A switch (default true/false) alone turns it on; --no-NAME or --NAME=false "
                 "turns it off.\n");
}
