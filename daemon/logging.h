/*
 * logging.h: the daemon's one logging macro. Lines go to stderr: with "<N>"
 * syslog priority prefixes when stderr is the journal (JOURNAL_STREAM
 * names it; the journal keeps the time), otherwise as
 * "2026-11-24T10:15:02.123+01:00 wdriftd: LEVEL: msg", local time. Arguments are not
 * evaluated below the level. Depends on libc and lib/log.h (the formatting
 * it shares with libwdrift).
 */
#ifndef WD_DAEMON_LOGGING_H
#define WD_DAEMON_LOGGING_H

#include <stddef.h>
#include <syslog.h>	/* LOG_ERR .. LOG_DEBUG */

struct timespec;

extern int log_level;

void log_init(void);	/* looks at JOURNAL_STREAM once */
void log_emit(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * Writes one formatted line at prio, unfiltered: log_emit's sink, and a
 * handler for wd_log_set(), so that libwdrift's lines take the same form.
 */
void log_write(int prio, const char *msg);
/*
 * ts as a log line's time: ISO 8601 local time with milliseconds and the
 * UTC offset, "2026-11-24T10:15:02.123+01:00"; snprintf's return.
 */
int log_timestamp(char *buf, size_t size, const struct timespec *ts);
/*
 * " at 2026-11-30 10:35:38 UTC", or "": Unix seconds (now_wall's) in a
 * sentence the CLI shows (runs, drift, alerts), whatever the daemon's zone.
 */
void wall_said(double wall, char *buf, size_t len);

/* An expression, so that error() below can be one too. */
#define log_at(prio, ...) \
	((prio) <= log_level ? log_emit((prio), __VA_ARGS__) : (void)0)

#define log_err(...) log_at(LOG_ERR, __VA_ARGS__)
#define log_warning(...) log_at(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_at(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

/* Logs at ERR and returns -1: `return error("could not open '%s'", p);` */
#define error(...) (log_err(__VA_ARGS__), -1)

#endif
