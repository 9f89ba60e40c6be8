/* logging.c: stderr logging, journal-aware (see logging.h); lines are
 * formatted by libwdrift's wd_log_vsink, as the library's own are. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "log.h"
#include "logging.h"

int log_level = LOG_NOTICE;
static int to_journal;

/* JOURNAL_STREAM is "DEV:INODE" of the journal's stream; stderr must match it. */
void log_init(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	to_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
		     fstat(2, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* The daemon's sink: the journal's "<N>" prefix, or "wdriftd: LEVEL: ". */
void log_write(int prio, const char *msg)
{
	static const char *const names[] = { "emerg", "alert", "crit", "error",
					     "warning", "notice", "info", "debug" };

	if (to_journal)
		fprintf(stderr, "<%d>%s\n", prio, msg);
	else
		fprintf(stderr, "wdriftd: %s: %s\n", names[prio & 7], msg);
}

void log_emit(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wd_log_vsink(prio, log_write, fmt, ap);
	va_end(ap);
}
