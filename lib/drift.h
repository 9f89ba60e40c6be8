/*
 * drift.h: a candidate's ratio to a proxy, per tensor, and how one metric
 * of a snapshot's tensors (W1 against the baseline, or that ratio) sums up
 * over the tensors: the summary rows that `wdrift compare` prints, that the
 * daemon writes to the drift log, and that alert rules with scope mean,
 * median or max read. One definition for the three (docs/engine.md,
 * "Summary rows"). Internal to wdrift: not part of wdrift.h's API.
 * Depends on libc.
 */
#ifndef WD_DRIFT_H
#define WD_DRIFT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A candidate's W1 over a proxy's, for one tensor: NaN where the proxy's
 * W1 is 0 or NaN (the proxy did not drift there, or has no such tensor),
 * so that no ratio is infinite. W1 is never negative.
 */
static inline double wd_drift_ratio(double w1, double proxy_w1)
{
	return proxy_w1 > 0 ? w1 / proxy_w1 : (double)NAN;
}

struct wd_drift_summary {
	double weighted;	/* mean weighted by element count */
	double median;		/* over tensors: the middle one, or the mean of the two */
	double max;
	size_t n;		/* tensors with a value; with none, the three are NaN */
};

/*
 * The summary of values[0..n), tensor i having numel[i] elements. A NaN
 * value (the tensor has no such metric) is left out of all three. The
 * weighted mean adds value * numel in index order and divides once, so
 * every caller gets the same bits. 0, or -ENOMEM (out is then all NaN).
 */
int wd_drift_summarize(const double *values, const uint64_t *numel, size_t n,
		       struct wd_drift_summary *out);

#endif
