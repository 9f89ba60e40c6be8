/*
 * test_drift.c: the summary rows (lib/drift.h), which `wdrift compare`, the
 * daemon's drift log and the alert rules all take from one definition:
 * the element-weighted mean, the median over tensors (odd and even
 * counts), the max, NaN values left out, and nothing at all; and the
 * ratio of a candidate's W1 to a proxy's.
 */
#include <math.h>
#include <stdint.h>

#include "drift.h"
#include "harness.h"

int main(void)
{
	struct wd_drift_summary d;

	CHECK(wd_drift_summarize(NULL, NULL, 0, &d) == 0 && d.n == 0 && isnan(d.weighted) &&
	      isnan(d.median) && isnan(d.max), "no tensors: n 0, every summary NaN");

	double nan3[3] = { NAN, NAN, NAN };
	uint64_t n3[3] = { 1, 2, 3 };
	wd_drift_summarize(nan3, n3, 3, &d);
	CHECK(d.n == 0 && isnan(d.weighted) && isnan(d.median) && isnan(d.max),
	      "only NaN values: as if none");

	/* odd count: 1 (x10), NaN (x1000), 4 (x30), -2 (x60) */
	double v[4] = { 1, NAN, 4, -2 };
	uint64_t w[4] = { 10, 1000, 30, 60 };
	wd_drift_summarize(v, w, 4, &d);
	CHECK(d.n == 3, "NaN left out: n %zu", d.n);
	CHECK(d.weighted == (1.0 * 10 + 4.0 * 30 + -2.0 * 60) / 100, "weighted by elements: %.17g",
	      d.weighted);
	CHECK(d.median == 1 && d.max == 4, "median of three %.17g, max %.17g", d.median, d.max);

	/* even count: the mean of the middle two; input order does not matter */
	double e[4] = { 8, 2, 6, 4 };
	uint64_t one[4] = { 1, 1, 1, 1 };
	wd_drift_summarize(e, one, 4, &d);
	CHECK(d.median == 5 && d.max == 8 && d.weighted == 5, "median of four %.17g, max %.17g",
	      d.median, d.max);

	/* empty tensors only: no elements to weight by */
	uint64_t zero[2] = { 0, 0 };
	wd_drift_summarize(e, zero, 2, &d);
	CHECK(isnan(d.weighted) && d.median == 5 && d.max == 8,
	      "tensors of 0 elements: weighted NaN, median and max defined");
	CHECK(wd_drift_ratio(2, 4) == 0.5 && isnan(wd_drift_ratio(2, 0)) && isnan(wd_drift_ratio(2, NAN)) &&
	      isnan(wd_drift_ratio(NAN, 4)) && wd_drift_ratio(0, 4) == 0,
	      "ratio: W1 over the proxy's; NaN where the proxy's is 0 or NaN, never infinite");
	return tap_done();
}
