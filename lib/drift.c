/*
 * drift.c: drift, defined once (drift.h): one run's tensor against the
 * baseline, the synthetic proxy's W1, a candidate's ratios to the proxies,
 * and the summary rows of a snapshot's tensors.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "drift.h"

int wd_drift_measure(struct wd_engine *e, const struct wd_prepared *base,
		     const struct wd_view *base_view, const struct wd_prepared *run,
		     const struct wd_view *run_view, struct wd_summary *summaries,
		     struct wd_drift_tensor *out)
{
	struct wd_pair_stats ps;
	int r, lost;

	*out = (struct wd_drift_tensor){
		.numel = run_view->numel,
		.w1 = NAN,
		.pair = { .max_abs_diff = NAN, .rel_l2 = NAN },
	};
	/*
	 * A lost device does not stop the measurement: tensors the engine
	 * holds on the host are still measured (the daemon writes what it
	 * has), and a caller that retries on the CPU throws the rest away.
	 */
	lost = wd_w1(e, base, run, &out->w1) == -EIO;
	wd_prepared_nonfinite(run, &out->nonfinite);
	if (summaries) {
		wd_engine_summarize(e, base, &summaries[0]);
		wd_engine_summarize(e, run, &summaries[1]);
	}
	out->have_pair = base_view->numel == run_view->numel;
	if (out->have_pair) {
		r = wd_pair_stats_prepared(e, base, run, &ps);
		if (r == -EIO)
			lost = 1;
		else if (r)	/* raw values not kept where the engine put them */
			r = wd_pair_stats(e, base_view, run_view, &ps);
		if (!r)
			out->pair = ps;
	}
	return lost ? -EIO : 0;
}

int wd_drift_rounded_w1(struct wd_engine *e, const struct wd_prepared *base,
			const struct wd_view *base_view, enum wd_dtype to, double *w1,
			struct wd_nonfinite *overflow)
{
	uint16_t *codes = malloc(base_view->numel * 2 + 2);
	struct wd_prepared *rounded = NULL;
	int r;

	*w1 = NAN;
	if (overflow)
		*overflow = (struct wd_nonfinite){ 0 };
	if (!codes)
		return -ENOMEM;
	r = wd_round16(base_view, to, codes);
	if (!r)
		r = wd_prepare(e, &(struct wd_view){ to, codes, base_view->numel }, 0, &rounded);
	if (!r)
		r = wd_w1(e, base, rounded, w1) == -EIO ? -EIO : 0;
	if (overflow && rounded) {	/* the rounded copy's infinities, less the baseline's own */
		struct wd_nonfinite have, own;
		wd_prepared_nonfinite(rounded, &have);
		wd_prepared_nonfinite(base, &own);
		overflow->posinf = have.posinf > own.posinf ? have.posinf - own.posinf : 0;
		overflow->neginf = have.neginf > own.neginf ? have.neginf - own.neginf : 0;
	}
	wd_prepared_free(&rounded);
	free(codes);
	return r;
}

void wd_drift_ratios(double w1, const double *proxy_w1, size_t n, double *ratio)
{
	for (size_t k = 0; k < n; k++)
		ratio[k] = wd_drift_ratio(w1, proxy_w1[k]);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int wd_drift_summarize(const double *values, const uint64_t *numel, size_t n,
		       struct wd_drift_summary *out)
{
	double *v = malloc((n + 1) * sizeof(*v)), sum = 0, wsum = 0, mx = NAN;
	size_t k = 0;

	out->weighted = out->median = out->max = NAN;
	out->n = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		double x = values[i];
		if (isnan(x))
			continue;
		sum += x * (double)numel[i];
		wsum += (double)numel[i];
		mx = isnan(mx) || x > mx ? x : mx;
		v[k++] = x;
	}
	if (k) {
		qsort(v, k, sizeof(*v), cmp_double);
		out->median = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
		out->weighted = wsum > 0 ? sum / wsum : NAN;
		out->max = mx;
		out->n = k;
	}
	free(v);
	return 0;
}
