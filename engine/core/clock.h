/* engine/core/clock.h: the one monotonic clock of strata (timings, deadlines,
 * step accounting, rate windows), in seconds as a double.
 *
 *   double t0 = strata_now();
 *   ... work ...
 *   double ms = (strata_now() - t0) * 1e3;
 *
 * CLOCK_MONOTONIC: never jumps with the wall clock (NTP, settimeofday), so a
 * deadline or a tok/s window stays right across a time change. A double holds
 * the nanoseconds of an uptime of 104 days exactly (2^53 ns); beyond that
 * the resolution coarsens to 2 ns, still far below any interval measured.
 * Wall-clock time (the `created` field of a response) is not this clock.
 *
 * Threading: reentrant, any thread.
 */
#ifndef STRATA_CLOCK_H
#define STRATA_CLOCK_H

/* Seconds since an arbitrary fixed point (boot), monotonic. */
double strata_now(void);

#endif
