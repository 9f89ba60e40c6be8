/*
 * harness.h: a tiny TAP harness for the C unit tests. CHECK records one
 * assertion; a failure prints where and why. tests/run.sh counts the lines.
 */
#ifndef WD_HARNESS_H
#define WD_HARNESS_H

#include <math.h>
#include <stdio.h>

static int tap_n, tap_failed;

#define CHECK(cond, ...) do {						\
	tap_n++;							\
	if (cond) {							\
		printf("ok %d - ", tap_n);				\
	} else {							\
		tap_failed++;						\
		printf("not ok %d - %s:%d: ", tap_n, __FILE__, __LINE__); \
	}								\
	printf(__VA_ARGS__);						\
	putchar('\n');							\
} while (0)

/* |got - want| within rel * |want|, or abs where want is 0. */
static inline int close_to(double got, double want, double rel, double abs_tol)
{
	if (isnan(want))
		return isnan(got);
	if (want == 0)
		return fabs(got) <= abs_tol;
	return fabs(got - want) <= rel * fabs(want);
}

static inline int tap_done(void)
{
	printf("# %d passed, %d failed\n", tap_n - tap_failed, tap_failed);
	return tap_failed ? 1 : 0;
}

#endif
