/* logging.c: stderr logging, journal-aware (see logging.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

void log_emit(int prio, const char *fmt, ...)
{
	static const char *const names[] = { "emerg", "alert", "crit", "error",
					     "warning", "notice", "info", "debug" };
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (to_journal)
		fprintf(stderr, "<%d>%s\n", prio, msg);
	else
		fprintf(stderr, "wdriftd: %s: %s\n", names[prio & 7], msg);
}
