/*
 * drift.h: what drift is, defined once for `wdrift compare`, the daemon's
 * drift log and its alert rules (docs/engine.md, "Summary rows" and
 * "Adding a metric"):
 * - per tensor, one run's tensor measured against the prepared baseline
 *   (wd_drift_measure), the synthetic proxy's W1 (wd_drift_rounded_w1), and
 *   a candidate's ratio to each proxy (wd_drift_ratio, wd_drift_ratios);
 * - over a snapshot's tensors, the summary rows of one metric
 *   (wd_drift_summarize).
 * Internal to wdrift: not part of wdrift.h's API. Depends on libc and the
 * engine (wdrift.h).
 */
#ifndef WD_DRIFT_H
#define WD_DRIFT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "wdrift.h"

/*
 * One run's tensor against the baseline's: every per-tensor value of a
 * `wdrift compare` row and of a drift log row, apart from the proxies'.
 * A value that could not be computed is NaN.
 */
struct wd_drift_tensor {
	uint64_t numel;			/* the run's tensor, all elements */
	double w1;			/* NaN when a side has no finite value */
	int have_pair;			/* the element counts match: pair is defined */
	struct wd_pair_stats pair;	/* max_abs_diff and rel_l2 NaN without a pair */
	struct wd_nonfinite nonfinite;	/* the run's NaN, +Inf and -Inf counts */
};

/*
 * Measures the run's tensor against the baseline's. Both are prepared by e
 * with WD_PREP_KEEP_RAW, and the views are the data they were prepared from:
 * where the engine kept no raw values for the pair statistics, they are
 * taken from the views. summaries: NULL, or where the caller wants each
 * side's wd_summary ([0] the baseline's, [1] the run's); they are taken
 * after W1 and before the pair statistics, so that a device lost meanwhile
 * is reported by the pair statistics' -EIO.
 * Returns 0, or -EIO when the device failed: the engine now runs on the
 * CPU, and the tensors must be prepared again and measured again. The
 * engine's other failures leave their values NaN.
 */
int wd_drift_measure(struct wd_engine *e, const struct wd_prepared *base,
		     const struct wd_view *base_view, const struct wd_prepared *run,
		     const struct wd_view *run_view, struct wd_summary *summaries,
		     struct wd_drift_tensor *out);

/*
 * *w1 = W1 of the baseline against itself rounded to `to` (WD_BF16 or
 * WD_F16; wd_round16): the synthetic proxy round:bf16 or round:fp16, the
 * drift that storing the baseline in 16 bits would cause. base is
 * base_view prepared. Returns 0; -ENOMEM, or wd_round16's or wd_prepare's
 * error, when the rounded copy could not be made; -EIO as wd_drift_measure.
 * *w1 is NaN where it could not be computed. *overflow (NULL: not wanted):
 * the finite values that rounding made +Inf or -Inf, out of the 16-bit
 * format's range (fp16's 65504), which W1 leaves out, so that W1 then
 * measures their loss and not rounding (a trial's ratios were 1e-5, and
 * nothing said why); nan 0.
 */
int wd_drift_rounded_w1(struct wd_engine *e, const struct wd_prepared *base,
			const struct wd_view *base_view, enum wd_dtype to, double *w1,
			struct wd_nonfinite *overflow);

/*
 * A candidate's W1 over a proxy's, for one tensor: NaN where the proxy's
 * W1 is 0 or NaN (the proxy did not drift there, or has no such tensor),
 * so that no ratio is infinite. W1 is never negative.
 */
static inline double wd_drift_ratio(double w1, double proxy_w1)
{
	return proxy_w1 > 0 ? w1 / proxy_w1 : (double)NAN;
}

/* ratio[k] = wd_drift_ratio(w1, proxy_w1[k]) for the n proxies. */
void wd_drift_ratios(double w1, const double *proxy_w1, size_t n, double *ratio);

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
