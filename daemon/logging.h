/*
 * logging.h: the daemon's one logging macro. Lines go to stderr: with "<N>"
 * syslog priority prefixes when stderr is the journal (JOURNAL_STREAM
 * names it), plain "wdriftd: LEVEL: msg" otherwise. Arguments are not
 * evaluated below the level. Depends on libc and lib/log.h (the formatting
 * it shares with libwdrift).
 */
#ifndef WD_DAEMON_LOGGING_H
#define WD_DAEMON_LOGGING_H

#include <syslog.h>	/* LOG_ERR .. LOG_DEBUG */

extern int log_level;

void log_init(void);	/* looks at JOURNAL_STREAM once */
void log_emit(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * Writes one formatted line at prio, unfiltered: log_emit's sink, and a
 * handler for wd_log_set(), so that libwdrift's lines take the same form.
 */
void log_write(int prio, const char *msg);

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
