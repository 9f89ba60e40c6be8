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

void wd_log_vsink(int level, void (*sink)(int level, const char *msg), const char *fmt, va_list ap)
{
	char msg[WD_LOG_LINE_MAX];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	sink(level, msg);
}

static void to_stderr(int level, const char *msg)
{
	(void)level;
	fprintf(stderr, "wdrift: %s\n", msg);
}

void wd_log_emit(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wd_log_vsink(level, log_handler ? log_handler : to_stderr, fmt, ap);
	va_end(ap);
}
