/*
 * clock.h: the library's one monotonic clock, in seconds (deadlines and
 * intervals; never the time of day). Internal; libc only.
 */
#ifndef WD_CLOCK_H
#define WD_CLOCK_H

#include <time.h>

static inline double wd_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

#endif
