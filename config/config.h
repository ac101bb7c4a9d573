/* config/config.h: the one declarative option table of strata.
 *
 *   struct strata_error err = {0};
 *   struct config *cfg = config_load(&(struct config_params){argc, argv, NULL}, &err);
 *   if (!cfg) { fprintf(stderr, "%s\n", err.message); return 2; }
 *   long long port = config_int(cfg, CONFIG_PORT);
 *   const char *model = config_str(cfg, CONFIG_MODEL);
 *   config_free(cfg);
 *
 * Each option has a name (also its key in the config file), a STRATA_* env
 * var, a CLI flag, a type, a range (ints) and a default. Precedence:
 * CLI > env > config file > default. This module is the only place in
 * strata that reads the environment (getenv); library code takes parameters.
 *
 * Config file: one `name = value` per line, `#` starts a comment line,
 * blank lines ignored; the file is named by --config / STRATA_CONFIG.
 * CLI: `--flag VALUE` or `--flag=VALUE`; bools also take a bare `--flag`
 * (true). One positional argument sets `model`.
 *
 * Adding an option: add one row to CONFIG_OPTIONS below; it appears in
 * --help, --print-config, the env and the config file automatically.
 *
 * Threading: a loaded config is immutable; reading it from any thread is
 * safe. config_load itself is not reentrant (it reads the environment).
 */
#ifndef STRATA_CONFIG_H
#define STRATA_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/core/error.h"

enum config_type {
    CONFIG_TYPE_STRING, /* free text; "" means unset */
    CONFIG_TYPE_PATH,   /* a file path; "" means unset (existence is checked by the user) */
    CONFIG_TYPE_INT,    /* signed 64-bit, within [min, max]; accepts k/m/g binary suffixes */
    CONFIG_TYPE_BOOL,   /* true/false/1/0/yes/no/on/off */
    CONFIG_TYPE_LEVEL,  /* log level: error|warn|info|debug (stored as 0..3) */
};

/* X(ID, name, env, flag, type, min, max, default, doc)
 * max_body default 2 MiB: a 128k-token context is ~512 KiB of text at ~4
 * bytes a token; JSON escaping and message framing at most double that, so
 * 2 MiB admits the largest prompt any supported context can hold while a
 * client still cannot make the server buffer more than 2 MiB a connection. */
#define CONFIG_OPTIONS(X)                                                                          \
    X(CONFIG, "config", "STRATA_CONFIG", "--config", CONFIG_TYPE_PATH, 0, 0, "",                   \
      "config file (name = value lines)")                                                          \
    X(MODEL, "model", "STRATA_MODEL", "--model", CONFIG_TYPE_PATH, 0, 0, "",                       \
      "GGUF model file to serve")                                                                  \
    X(HOST, "host", "STRATA_HOST", "--host", CONFIG_TYPE_STRING, 0, 0, "127.0.0.1",                \
      "address to listen on (IPv4 or IPv6 address, or a host name)")                               \
    X(PORT, "port", "STRATA_PORT", "--port", CONFIG_TYPE_INT, 0, 65535, "8080",                    \
      "TCP port (0 = pick a free one and print it)")                                               \
    X(API_KEY, "api-key", "STRATA_API_KEY", "--api-key", CONFIG_TYPE_STRING, 0, 0, "",             \
      "Bearer key clients must send (empty = no auth)")                                            \
    X(CORS_ORIGIN, "cors-origin", "STRATA_CORS_ORIGIN", "--cors-origin", CONFIG_TYPE_STRING, 0, 0, \
      "", "browser origins allowed to call the API: '*' or a comma list (empty = none)")           \
    X(WEB_UI, "web-ui", "STRATA_WEB_UI", "--web-ui", CONFIG_TYPE_BOOL, 0, 1, "true",               \
      "serve the chat and figures page at / (false: 404; the API is unchanged)")                   \
    X(API_KEY_FILE, "api-key-file", "STRATA_API_KEY_FILE", "--api-key-file", CONFIG_TYPE_PATH, 0,  \
      0, "", "file of accepted Bearer keys, one a line")                                           \
    X(THREADS, "threads", "STRATA_THREADS", "--threads", CONFIG_TYPE_INT, 0, 1024, "0",            \
      "compute threads (0 = auto: available CPUs - 1 from affinity and cgroup quota; at most 32)") \
    X(ISA, "isa", "STRATA_ISA", "--isa", CONFIG_TYPE_STRING, 0, 0, "auto",                         \
      "CPU kernels: auto|avx512-vnni|avx512|avx2-vnni|avx2|ref (never above what the CPU runs)")   \
    X(CTX_SIZE, "ctx-size", "STRATA_CTX_SIZE", "--ctx-size", CONFIG_TYPE_INT, 0, 1048576, "0",     \
      "context size in tokens (0 = the model's trained context)")                                  \
    X(PARALLEL, "parallel", "STRATA_PARALLEL", "--parallel", CONFIG_TYPE_INT, 1, 256, "4",         \
      "sessions decoded at the same time")                                                         \
    X(QUEUE, "queue", "STRATA_QUEUE", "--queue", CONFIG_TYPE_INT, 0, 65536, "64",                  \
      "requests waiting beyond --parallel before 429")                                             \
    X(KV_MEM, "kv-mem", "STRATA_KV_MEM", "--kv-mem", CONFIG_TYPE_INT, 0, 1LL << 46, "0",           \
      "KV cache pool in bytes (0 = --parallel full contexts)")                                     \
    X(KV_BLOCK, "kv-block", "STRATA_KV_BLOCK", "--kv-block", CONFIG_TYPE_INT, 1, 1024, "16",       \
      "KV positions per block (a power of two)")                                                   \
    X(PREFIX_CACHE, "prefix-cache", "STRATA_PREFIX_CACHE", "--prefix-cache", CONFIG_TYPE_BOOL, 0,  \
      1, "true", "reuse KV blocks of earlier requests with the same token prefix")                 \
    X(PREFAULT, "prefault", "STRATA_PREFAULT", "--prefault", CONFIG_TYPE_BOOL, 0, 1, "true",       \
      "map every weight page at load (skipped above 3/4 of RAM)")                                  \
    X(REPACK, "repack", "STRATA_REPACK", "--repack", CONFIG_TYPE_BOOL, 0, 1, "true",               \
      "copy the weights into RAM at load (Q4_K/Q6_K packed where --isa is AVX-512; not above 3/4 " \
      "of RAM)")                                                                                   \
    X(EXPERT_PROFILE, "expert-profile", "STRATA_EXPERT_PROFILE", "--expert-profile",               \
      CONFIG_TYPE_PATH, 0, 0, "",                                                                  \
      "routing profile of a MoE model: loaded at start, saved periodically and at shutdown")       \
    X(CHAT_TEMPLATE_FILE, "chat-template-file", "STRATA_CHAT_TEMPLATE_FILE",                       \
      "--chat-template-file", CONFIG_TYPE_PATH, 0, 0, "",                                          \
      "Jinja chat template used instead of the GGUF's tokenizer.chat_template")                    \
    X(EXPERT_PROFILE_INTERVAL, "expert-profile-interval", "STRATA_EXPERT_PROFILE_INTERVAL",        \
      "--expert-profile-interval", CONFIG_TYPE_INT, 1, 86400, "60",                                \
      "seconds between routing profile saves while the counts change")                             \
    X(EXPERT_STORE, "expert-store", "STRATA_EXPERT_STORE", "--expert-store", CONFIG_TYPE_STRING,   \
      0, 0, "auto",                                                                                \
      "MoE experts read from the file into a RAM tier: auto|on|off (auto: on when the model "      \
      "does not fit the memory budget)")                                                           \
    X(EXPERT_RAM, "expert-ram", "STRATA_EXPERT_RAM", "--expert-ram", CONFIG_TYPE_INT, 0,           \
      1LL << 46, "0",                                                                              \
      "expert store RAM tier in bytes (0 = the memory budget less the rest, a safety margin)")     \
    X(EXPERT_IO, "expert-io", "STRATA_EXPERT_IO", "--expert-io", CONFIG_TYPE_STRING, 0, 0, "auto", \
      "expert store reads: auto|io_uring|pread (auto: io_uring unless refused)")                   \
    X(EXPERT_DIRECT, "expert-direct", "STRATA_EXPERT_DIRECT", "--expert-direct",                   \
      CONFIG_TYPE_STRING, 0, 0, "auto",                                                            \
      "expert store O_DIRECT: auto|on|off (off: buffered, dropped from the page cache)")           \
    X(EXPERT_FIXED, "expert-fixed", "STRATA_EXPERT_FIXED", "--expert-fixed", CONFIG_TYPE_STRING,   \
      0, 0, "auto",                                                                                \
      "expert store io_uring registered buffers over the slots: auto|on|off (auto: the default)")  \
    X(EXPERT_PREFETCH, "expert-prefetch", "STRATA_EXPERT_PREFETCH", "--expert-prefetch",           \
      CONFIG_TYPE_INT, 0, 4, "1",                                                                  \
      "expert store router lookahead: layers ahead whose experts are read early (0 = off)")        \
    X(BATCH, "batch", "STRATA_BATCH", "--batch", CONFIG_TYPE_INT, 0, 65536, "0",                   \
      "tokens per scheduler step, decode + prefill chunks (0 = 512)")                              \
    X(REQUEST_TIMEOUT, "request-timeout", "STRATA_REQUEST_TIMEOUT", "--request-timeout",           \
      CONFIG_TYPE_INT, 0, 86400, "600", "seconds a request may take, queue included (0 = none)")   \
    X(MAX_BODY, "max-body", "STRATA_MAX_BODY", "--max-body", CONFIG_TYPE_INT, 1024, 268435456,     \
      "2097152", "largest request body in bytes (413 above)")                                      \
    X(TIMEOUT, "timeout", "STRATA_TIMEOUT", "--timeout", CONFIG_TYPE_INT, 1, 3600, "30",           \
      "seconds a connection may idle, and to send its request headers (then it is dropped)")       \
    X(MAX_CONNECTIONS, "max-connections", "STRATA_MAX_CONNECTIONS", "--max-connections",           \
      CONFIG_TYPE_INT, 1, 65536, "256",                                                            \
      "simultaneous HTTP connections (at the limit the longest-idle one makes room)")              \
    X(KEEPALIVE_MS, "keepalive-ms", "STRATA_KEEPALIVE_MS", "--keepalive-ms", CONFIG_TYPE_INT, 50,  \
      600000, "5000", "SSE keep-alive comment interval while a request waits (ms)")                \
    X(SHUTDOWN_TIMEOUT, "shutdown-timeout", "STRATA_SHUTDOWN_TIMEOUT", "--shutdown-timeout",       \
      CONFIG_TYPE_INT, 0, 3600, "10", "seconds in-flight work may finish after SIGTERM")           \
    X(ALWAYS_USAGE, "always-usage", "STRATA_ALWAYS_USAGE", "--always-usage", CONFIG_TYPE_BOOL, 0,  \
      1, "false", "always send usage, also in streams that did not ask")                           \
    X(NUMA, "numa", "STRATA_NUMA", "--numa", CONFIG_TYPE_STRING, 0, 0, "auto",                     \
      "NUMA: auto (bind to the weights' node), off, node:N, split (both nodes, rows by node)")     \
    X(POOL_SPIN, "pool-spin", "STRATA_POOL_SPIN", "--pool-spin", CONFIG_TYPE_INT, 0, 100000000,    \
      "4000", "worker spin iterations before parking (DESIGN.md: 4000 best)")                      \
    X(GPU, "gpu", "STRATA_GPU", "--gpu", CONFIG_TYPE_STRING, 0, 0, "auto",                         \
      "Vulkan device: auto (a GPU that holds the weights; never a CPU implementation), off, "      \
      "or a device index")                                                                         \
    X(GPU_LAYERS, "gpu-layers", "STRATA_GPU_LAYERS", "--gpu-layers", CONFIG_TYPE_STRING, 0, 0,     \
      "all",                                                                                       \
      "layers on the GPU: all, auto (all when they fit, else those that do), or a count N (the "   \
      "first N; the rest on the CPU)")                                                             \
    X(GPU_MEM_BUDGET, "gpu-mem-budget", "STRATA_GPU_MEM_BUDGET", "--gpu-mem-budget",               \
      CONFIG_TYPE_INT, 0, 1LL << 50, "0",                                                          \
      "device memory the GPU backend may hold in bytes (0 = the device's); past it the load "      \
      "fails as out of device memory does: a log line and the CPU")                                \
    X(GPU_PROFILE, "gpu-profile", "STRATA_GPU_PROFILE", "--gpu-profile", CONFIG_TYPE_BOOL, 0, 1,   \
      "false", "time every GPU dispatch; the table per kernel is printed at exit")                 \
    X(GPU_PIPELINE_CACHE, "gpu-pipeline-cache", "STRATA_GPU_PIPELINE_CACHE",                       \
      "--gpu-pipeline-cache", CONFIG_TYPE_PATH, 0, 0, "",                                          \
      "file keeping compiled GPU pipelines between starts (empty = compile every start)")          \
    X(LOG_LEVEL, "log-level", "STRATA_LOG_LEVEL", "--log-level", CONFIG_TYPE_LEVEL, 0, 3, "info",  \
      "error|warn|info|debug")                                                                     \
    X(SYS_ROOT, "sys-root", "STRATA_SYS_ROOT", "--sys-root", CONFIG_TYPE_PATH, 0, 0, "/",          \
      "where /proc and /sys/fs/cgroup are read from (CPU and memory limits; tests)")               \
    X(NOTIFY_SOCKET, "notify-socket", "NOTIFY_SOCKET", "--notify-socket", CONFIG_TYPE_STRING, 0,   \
      0, "", "systemd notify socket (set by systemd for Type=notify)")                             \
    X(WATCHDOG_USEC, "watchdog-usec", "WATCHDOG_USEC", "--watchdog-usec", CONFIG_TYPE_INT, 0,      \
      1000000000000000, "0", "systemd watchdog interval in us (set by WatchdogSec=)")              \
    X(WATCHDOG_PID, "watchdog-pid", "WATCHDOG_PID", "--watchdog-pid", CONFIG_TYPE_INT, 0, 4194304, \
      "0", "pid the watchdog is meant for (set by systemd; 0 = us)")

enum config_id {
#define CONFIG_ENUM(id, name, env, flag, type, min, max, def, doc) CONFIG_##id,
    CONFIG_OPTIONS(CONFIG_ENUM)
#undef CONFIG_ENUM
        CONFIG_N_OPTIONS
};

enum config_source {
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_FILE,
    CONFIG_SOURCE_ENV,
    CONFIG_SOURCE_CLI,
    /* Derived at start-up from the system (config_derive), e.g. threads: */
    CONFIG_SOURCE_CGROUP,   /* the cgroup CPU quota */
    CONFIG_SOURCE_AFFINITY, /* the CPU affinity mask */
    CONFIG_SOURCE_AUTO,     /* a 0 = automatic resolved from the model and the limits */
};

struct config_option {
    const char *name; /* "port": key in the config file */
    const char *env;  /* "STRATA_PORT" */
    const char *flag; /* "--port" */
    enum config_type type;
    long long min, max; /* CONFIG_TYPE_INT range, inclusive */
    const char *def;    /* default as text */
    const char *doc;    /* one line for --help */
};

struct config;

struct config_params {
    int argc;                /* arguments after the subcommand name (argv[0] is skipped) */
    char **argv;             /* borrowed */
    const char *const *envp; /* borrowed; "NAME=value" strings, NULL-terminated;
                                NULL: the process environment */
};

/* Builds the effective config. On a bad value returns NULL with STRATA_E_CONFIG
 * and a message naming the option, its source and the allowed values.
 * owned: free with config_free() */
struct config *config_load(const struct config_params *params, struct strata_error *err);
void config_free(struct config *cfg); /* NULL is a no-op */

const struct config_option *config_option(enum config_id id);      /* borrowed, static */
long long config_int(const struct config *cfg, enum config_id id); /* INT, BOOL, LEVEL */
bool config_bool(const struct config *cfg, enum config_id id);
const char *config_str(const struct config *cfg, enum config_id id); /* borrowed; any type */
enum config_source config_source_of(const struct config *cfg, enum config_id id);
const char *config_source_name(enum config_source src); /* "default", "file", "env", "cli" */
/* Replaces an option's value with one derived from the system (an "auto"
 * setting resolved at start-up: threads from the CPU limits), recorded with
 * src (CONFIG_SOURCE_CGROUP / _AFFINITY) so --print-config and /status say
 * where it came from. Validated like any value. Call before the config is
 * shared with other threads. */
int config_derive(struct config *cfg, enum config_id id, const char *value, enum config_source src,
                  struct strata_error *err);
/* config_derive with the rule that produced the value ("2 CPUs - 1",
 * "the model's trained context"), printed beside the source (copied). */
int config_derive_rule(struct config *cfg, enum config_id id, const char *value,
                       enum config_source src, const char *rule, struct strata_error *err);
const char *config_rule_of(const struct config *cfg, enum config_id id); /* "" when none */

/* `name = value  (source[: rule])` for every option; api keys are masked. */
void config_print(const struct config *cfg, FILE *out);
/* Option list for --help, generated from the table. */
void config_print_help(FILE *out);

#endif
