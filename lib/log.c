/* log.c: the library's log sink: stderr by default, or the program's handler. */
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

int wd_log_threshold = WD_LOG_WARNING;
static void (*log_handler)(int level, const char *msg);

void wd_log_set(int level, void (*handler)(int level, const char *msg))
{
	wd_log_threshold = level;
	log_handler = handler;
}

void wd_log_emit(int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_handler)
		log_handler(level, msg);
	else
		fprintf(stderr, "wdrift: %s\n", msg);
}
