/* server/notify.h: systemd's readiness protocol (sd_notify), spoken
 * directly: one AF_UNIX datagram per message to $NOTIFY_SOCKET, no libsystemd.
 *
 *   struct notify *nt = notify_init(config_str(cfg, CONFIG_NOTIFY_SOCKET),
 *                                   config_int(cfg, CONFIG_WATCHDOG_USEC),
 *                                   (int)config_int(cfg, CONFIG_WATCHDOG_PID), &err);
 *   notify_watchdog_start(nt, &err);        // WATCHDOG=1 every WATCHDOG_USEC / 2
 *   notify_send(nt, "STATUS=loading model", NULL);
 *   ...
 *   notify_send(nt, "READY=1\nSTATUS=serving", NULL);
 *   ... SIGTERM ...
 *   notify_send(nt, "STOPPING=1", NULL);
 *   notify_free(nt);
 *
 * Socket address: a path ("/run/systemd/notify") or an abstract name
 * ("@name": the '@' becomes a leading NUL byte and the address length
 * counts only the name, no terminator). An empty socket string gives a
 * disabled handle on which every call is a successful no-op, so the daemon
 * calls the same code with or without systemd. A NULL handle is also a
 * no-op everywhere. Messages are `KEY=value` lines (man sd_notify).
 *
 * Watchdog: active when watchdog_usec > 0 and watchdog_pid is 0 or our pid
 * (systemd sets WATCHDOG_PID so a forked child does not ping for its
 * parent). One persistent thread pings at half the interval, as
 * sd_watchdog_enabled(3) advises, from start until notify_free.
 *
 * Threading: notify_send may be called from any thread (one sendto each,
 * atomic for datagrams); init/start/free from one controlling thread.
 */
#ifndef STRATA_SERVER_NOTIFY_H
#define STRATA_SERVER_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/error.h"

struct notify;

/* socket: borrowed; "" or NULL = disabled. Fails (NULL, err) on an address
 * that cannot be used (too long, not absolute, unsupported scheme such as
 * vsock:) or when the socket cannot be created.
 * owned: free with notify_free() */
struct notify *notify_init(const char *socket, long long watchdog_usec, int watchdog_pid,
                           struct strata_error *err);
void notify_free(struct notify *n); /* stops the watchdog thread; NULL is a no-op */

bool notify_enabled(const struct notify *n);
/* Interval in microseconds when the watchdog applies to us, else 0. */
long long notify_watchdog_usec(const struct notify *n);

/* Sends one datagram (state lines separated by '\n'). */
int notify_send(struct notify *n, const char *state, struct strata_error *err);
/* printf-style convenience for "STATUS=..." and the like. */
int notify_sendf(struct notify *n, struct strata_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Starts the WATCHDOG=1 thread if the watchdog applies; otherwise 0, no thread. */
int notify_watchdog_start(struct notify *n, struct strata_error *err);

#endif
