/*
 * drift.c: the summary rows of a snapshot's tensors (drift.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "drift.h"

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
