/*
 * log.h: libwdrift's one logging path, and the formatting that the daemon's
 * logger (daemon/logging.c) shares with it. The library logs rarely (which
 * engine runs, a device error and the fallback); a program routes the lines
 * where it wants with wd_log_set() from wdrift.h. Internal; libc only.
 */
#ifndef WD_LOG_H
#define WD_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "wdrift.h"

/* The longest line a sink gets, its NUL included: longer ones are cut. */
#define WD_LOG_LINE_MAX 1024

extern int wd_log_threshold;

/*
 * Formats fmt into one line and hands it to sink with level: the one place
 * a log line is formatted, for the library (wd_log_emit) and the daemon
 * (log_emit), whose sinks then only add their prefixes.
 */
void wd_log_vsink(int level, void (*sink)(int level, const char *msg), const char *fmt, va_list ap);

/* To the program's handler (wd_log_set), else stderr as "wdrift: MSG". */
void wd_log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Copies s for a message the library or the daemon prints: at most max
 * bytes of it, control characters (C0, DEL, C1) escaped as \n \r \t or
 * \xNN and '\\' doubled, "..." when cut, so that a name or a peer's text
 * cannot break a log line, forge one, or drive a terminal. WD_CLIP gives
 * each use its own buffer.
 */
const char *wd_log_clip(char *buf, size_t size, const char *s, size_t max);
#define WD_CLIP(s) wd_log_clip((char[1024]){ 0 }, 1024, (s), 250)

/* Skips formatting the arguments below the threshold. */
#define wd_log(level, ...) do {					\
	if ((level) <= wd_log_threshold)			\
		wd_log_emit((level), __VA_ARGS__);		\
} while (0)

#endif
