/*
 * stats.c: the CPU backend's statistics (backend_cpu.h): per-tensor
 * summaries (from a prepared tensor in host memory) and element-wise
 * statistics of two raw tensors with the same element count. Sums run in
 * double, in blocks; the variance is taken about the mean in a second pass,
 * so a large mean does not cancel a small spread. Sums of squares (l2,
 * rel_l2) are kept by magnitude (sumsq.h), so that they neither underflow
 * nor overflow. Calls nothing in engine.c.
 */
#include <errno.h>
#include <math.h>

#include "backend_cpu.h"
#include "dtype.h"
#include "prepared.h"
#include "sumsq.h"

#define BLOCK 4096

static double sorted_at(const struct wd_prepared *p, uint64_t i)
{
	if (p->store == WD_F32)
		return ((const float *)p->values)[i];
	return ((const double *)p->values)[i];
}

static void summarize_sorted(const struct wd_prepared *p, struct wd_summary *s)
{
	uint64_t n = p->n_finite;
	double sum = 0, dev = 0;
	struct wd_sumsq sq = { 0, 0, 0 };

	for (uint64_t at = 0; at < n; at += BLOCK) {
		uint64_t end = n - at < BLOCK ? n : at + BLOCK;
		double bs = 0;
		struct wd_sumsq bq = { 0, 0, 0 };
		for (uint64_t i = at; i < end; i++) {
			double x = sorted_at(p, i);
			bs += x;
			wd_sumsq_add(&bq, x);
		}
		sum += bs;
		wd_sumsq_merge(&sq, &bq);
	}
	s->mean = sum / (double)n;
	for (uint64_t at = 0; at < n; at += BLOCK) {
		uint64_t end = n - at < BLOCK ? n : at + BLOCK;
		double bd = 0;
		for (uint64_t i = at; i < end; i++) {
			double d = sorted_at(p, i) - s->mean;
			bd += d * d;
		}
		dev += bd;
	}
	s->std = sqrt(dev / (double)n);
	s->min = sorted_at(p, 0);
	s->max = sorted_at(p, n - 1);
	s->l2 = wd_sumsq_norm(&sq);
}

static void summarize_hist(const struct wd_prepared *p, struct wd_summary *s)
{
	const struct half_table *t = half_table_get(p->store);
	double sum = 0, dev = 0;
	struct wd_sumsq sq = { 0, 0, 0 };
	int seen = 0;

	for (uint32_t j = 0; j < t->n_order; j++) {
		uint64_t c = p->hist[t->order[j]];
		double x = t->value[t->order[j]];
		if (!c)
			continue;
		if (!seen)
			s->min = x;
		seen = 1;
		s->max = x;
		sum += (double)c * x;
		wd_sumsq_add_n(&sq, x, (double)c);
	}
	s->mean = sum / (double)p->n_finite;
	for (uint32_t j = 0; j < t->n_order; j++) {
		uint64_t c = p->hist[t->order[j]];
		double d = t->value[t->order[j]] - s->mean;
		if (c)
			dev += (double)c * d * d;
	}
	s->std = sqrt(dev / (double)p->n_finite);
	s->l2 = wd_sumsq_norm(&sq);
}

void cpu_summarize(const struct wd_prepared *p, struct wd_summary *s)
{
	s->numel = p->numel;
	s->n_finite = p->n_finite;
	s->nonfinite = p->nonfinite;
	s->mean = s->std = s->min = s->max = NAN;
	s->l2 = 0;
	if (!p->n_finite || (p->method == WD_METHOD_SORT && !p->values) ||
	    (p->method == WD_METHOD_HIST16 && !p->hist))
		return;	/* nothing finite, or the device was lost with it */
	if (p->method == WD_METHOD_HIST16)
		summarize_hist(p, s);
	else
		summarize_sorted(p, s);
}

/* Decodes count elements of v from index at into out, as doubles. */
static void decode_block(const struct wd_view *v, uint64_t at, uint64_t count,
			 double *out)
{
	const struct half_table *t = half_table_get(v->dtype);

	switch (v->dtype) {
	case WD_F32:
		for (uint64_t i = 0; i < count; i++)
			out[i] = ((const float *)v->data)[at + i];
		break;
	case WD_F64:
		for (uint64_t i = 0; i < count; i++)
			out[i] = ((const double *)v->data)[at + i];
		break;
	case WD_F16:
	case WD_BF16:
		for (uint64_t i = 0; i < count; i++)
			out[i] = t->value[((const uint16_t *)v->data)[at + i]];
		break;
	}
}

int cpu_pair_stats(const struct wd_view *a, const struct wd_view *b,
		   struct wd_pair_stats *out)
{
	double da[BLOCK], db[BLOCK];
	double maxd = 0;
	struct wd_sumsq dd = { 0, 0, 0 }, aa = { 0, 0, 0 };
	uint64_t n_diff = 0, n_cmp = 0;

	if (a->numel != b->numel || !wd_dtype_size(a->dtype) ||
	    !wd_dtype_size(b->dtype) || (a->numel && (!a->data || !b->data)))
		return -EINVAL;
	for (uint64_t at = 0; at < a->numel; at += BLOCK) {
		uint64_t count = a->numel - at < BLOCK ? a->numel - at : BLOCK;
		struct wd_sumsq bd = { 0, 0, 0 }, ba = { 0, 0, 0 };
		decode_block(a, at, count, da);
		decode_block(b, at, count, db);
		for (uint64_t i = 0; i < count; i++) {
			double x = da[i], y = db[i];
			if (isfinite(x) && isfinite(y)) {
				double d = fabs(x - y);
				n_cmp++;
				n_diff += d != 0;
				maxd = d > maxd ? d : maxd;
				wd_sumsq_add(&bd, d);
				wd_sumsq_add(&ba, x);
			} else if (!(x == y || (isnan(x) && isnan(y)))) {
				n_diff++;
			}
		}
		wd_sumsq_merge(&dd, &bd);
		wd_sumsq_merge(&aa, &ba);
	}
	out->n_diff = n_diff;
	out->n_compared = n_cmp;
	out->max_abs_diff = n_cmp ? maxd : NAN;
	if (wd_sumsq_zero(&dd))
		out->rel_l2 = n_cmp ? 0 : NAN;
	else
		out->rel_l2 = !wd_sumsq_zero(&aa) ? wd_sumsq_ratio(&dd, &aa) : NAN;
	return 0;
}
