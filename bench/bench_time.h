/*
 * bench_time.h: the benchmarks' clock and median, one copy for the C
 * benchmarks and bench_gpu.cu (C and C++). Header only; libc.
 */
#ifndef WD_BENCH_TIME_H
#define WD_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts v[0..n) in place and returns v[n / 2]: the median, the upper one for an even n. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
	return v[n / 2];
}

#endif
