/*
 * notify.h: the daemon's readiness protocol with systemd (sd_notify), one
 * function per state. Without NOTIFY_SOCKET every call is a no-op, so the
 * daemon runs the same by hand. No call blocks: a supervisor that stops
 * reading loses states (counted, warned), it does not freeze the loop.
 *
 *   READY=1       only once the endpoints are bound, the storage is open
 *                 and the engine is probed
 *   STATUS=...    live counts, while working
 *   RELOADING=1   with MONOTONIC_USEC, and always followed by READY=1,
 *                 even when the reload failed
 *   STOPPING=1    on SIGTERM, before draining
 *   WATCHDOG=1    from the main loop, at half of WATCHDOG_USEC
 */
#ifndef WD_NOTIFY_H
#define WD_NOTIFY_H

#include <stdint.h>

/* Reads WATCHDOG_USEC; returns the ping interval in µs, or 0 when off. */
uint64_t notify_init(void);
void notify_ready(const char *status);
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void notify_reloading(void);
void notify_stopping(void);
void notify_watchdog(void);

#endif
