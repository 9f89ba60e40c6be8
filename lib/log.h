/*
 * log.h: libwdrift's one logging path. The library logs rarely (which engine
 * runs, a device error and the fallback); a program routes the lines where
 * it wants with wd_log_set() from wdrift.h. Internal; libc only.
 */
#ifndef WD_LOG_H
#define WD_LOG_H

#include "wdrift.h"

extern int wd_log_threshold;

void wd_log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Skips formatting the arguments below the threshold. */
#define wd_log(level, ...) do {					\
	if ((level) <= wd_log_threshold)			\
		wd_log_emit((level), __VA_ARGS__);		\
} while (0)

#endif
