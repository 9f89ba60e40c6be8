/* logging.c: stderr logging, journal-aware (see logging.h); lines are
 * formatted by libwdrift's wd_log_vsink, as the library's own are. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
	tzset();	/* once, here: localtime_r need not look at TZ again */
}

int log_timestamp(char *buf, size_t size, const struct timespec *ts)
{
	struct tm tm;
	char date[32], zone[8];

	if (!localtime_r(&ts->tv_sec, &tm) ||
	    !strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm) ||
	    strftime(zone, sizeof(zone), "%z", &tm) != 5)
		return snprintf(buf, size, "%lld.%03ld", (long long)ts->tv_sec, ts->tv_nsec / 1000000L);
	/* %z is +hhmm; ISO 8601's extended form, which the date has, writes +hh:mm */
	return snprintf(buf, size, "%s.%03ld%.3s:%s", date, ts->tv_nsec / 1000000L, zone, zone + 3);
}

void wall_said(double wall, char *buf, size_t len)
{
	struct tm tm;
	time_t t = (time_t)wall;

	buf[0] = 0;
	if (gmtime_r(&t, &tm))
		strftime(buf, len, " at %Y-%m-%d %H:%M:%S UTC", &tm);
}

/*
 * The daemon's sink: the journal's "<N>" prefix (the journal stamps each
 * line itself), or "TIME wdriftd: LEVEL: ", the time first so that a line
 * still reads "wdriftd: LEVEL: msg" from its second field on.
 */
void log_write(int prio, const char *msg)
{
	static const char *const names[] = { "emerg", "alert", "crit", "error",
					     "warning", "notice", "info", "debug" };
	struct timespec ts;
	char when[64];

	if (to_journal) {
		fprintf(stderr, "<%d>%s\n", prio, msg);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	log_timestamp(when, sizeof(when), &ts);
	fprintf(stderr, "%s wdriftd: %s: %s\n", when, names[prio & 7], msg);
}

void log_emit(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wd_log_vsink(prio, log_write, fmt, ap);
	va_end(ap);
}
