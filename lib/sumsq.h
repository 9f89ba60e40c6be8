/*
 * sumsq.h: a sum of squares that neither underflows nor overflows, for
 * rel_l2 = ||a - b|| / ||a|| and a summary's l2 in both engines
 * (lib/stats.c and the CUDA kernel bodies, which include this header; C11
 * and C++/CUDA).
 *
 * Plain d*d underflows to 0 when every |d| is below about 1e-162, so two
 * fp64 tensors that differ there got rel_l2 = 0; and x*x overflows above
 * about 1e154. Blue's algorithm, as LAPACK's dnrm2 (3.10 and later) uses
 * it, keeps three sums by magnitude: squares of small values scaled up by
 * 2^537, of big ones scaled down by 2^-538, the rest as they are. Each
 * value lands in one sum with no running scale, so partial sums (per
 * block, per thread) add like plain ones, in any fixed order. The norm is
 * then right to a few ulps wherever it is representable.
 */
#ifndef WD_SUMSQ_H
#define WD_SUMSQ_H

#include <math.h>

#include "host_device.h"

/* Values below TSML are small, above TBIG big (LAPACK's la_constants). */
#define WD_SUMSQ_TSML 0x1p-511
#define WD_SUMSQ_TBIG 0x1p486
#define WD_SUMSQ_SSML 0x1p537	/* small values are scaled up by this */
#define WD_SUMSQ_SBIG 0x1p-538	/* big ones down by this */

struct wd_sumsq {
	double sml, med, big;
};

/* Adds x^2 (x finite, or +-Inf: then the sum is +Inf). */
WD_SHARED void wd_sumsq_add(struct wd_sumsq *s, double x)
{
	double ax = fabs(x);
	if (ax > WD_SUMSQ_TBIG) {
		ax *= WD_SUMSQ_SBIG;
		s->big += ax * ax;
	} else if (ax < WD_SUMSQ_TSML) {
		ax *= WD_SUMSQ_SSML;
		s->sml += ax * ax;
	} else {
		s->med += ax * ax;
	}
}

/*
 * Adds count * x^2 (x finite): a 16-bit count's bin. The same scaling as
 * wd_sumsq_add, so a bin of one value adds what wd_sumsq_add would.
 */
WD_SHARED void wd_sumsq_add_n(struct wd_sumsq *s, double x, double count)
{
	double ax = fabs(x);
	if (ax > WD_SUMSQ_TBIG) {
		ax *= WD_SUMSQ_SBIG;
		s->big += count * ax * ax;
	} else if (ax < WD_SUMSQ_TSML) {
		ax *= WD_SUMSQ_SSML;
		s->sml += count * ax * ax;
	} else {
		s->med += count * ax * ax;
	}
}

/* s += t: partial sums (per block, per thread) add component by component. */
WD_SHARED void wd_sumsq_merge(struct wd_sumsq *s, const struct wd_sumsq *t)
{
	s->sml += t->sml;
	s->med += t->med;
	s->big += t->big;
}

WD_SHARED int wd_sumsq_zero(const struct wd_sumsq *s)
{
	return s->sml == 0 && s->med == 0 && s->big == 0;
}

/*
 * The square root of the sum as r * 2^*e, with r in double range: the
 * norm itself may be too small or too large for a double.
 */
WD_SHARED double wd_sumsq_root(const struct wd_sumsq *s, int *e)
{
	if (s->big > 0) {
		/* medium values count at their scale; twice, so the factor stays in range */
		*e = 538;
		return sqrt(s->big + (s->med * WD_SUMSQ_SBIG) * WD_SUMSQ_SBIG);
	}
	if (s->sml > 0 && s->med > 0) {
		/* both at scale 1: the small part is at most sqrt(n) * 2^-511 */
		double ymed = sqrt(s->med), ysml = sqrt(s->sml) / WD_SUMSQ_SSML;
		double lo = ymed < ysml ? ymed : ysml, hi = ymed < ysml ? ysml : ymed;
		*e = 0;
		return hi * sqrt(1 + (lo / hi) * (lo / hi));
	}
	if (s->sml > 0) {
		*e = -537;
		return sqrt(s->sml);
	}
	*e = 0;
	return sqrt(s->med);
}

/* The square root of the sum: a norm, +Inf past the double range. */
WD_SHARED double wd_sumsq_norm(const struct wd_sumsq *s)
{
	int e;
	double r = wd_sumsq_root(s, &e);
	return ldexp(r, e);
}

/* sqrt(num) / sqrt(den), den not zero: the ratio of two norms, scaled exactly. */
WD_SHARED double wd_sumsq_ratio(const struct wd_sumsq *num, const struct wd_sumsq *den)
{
	int en, ed;
	double rn = wd_sumsq_root(num, &en), rd = wd_sumsq_root(den, &ed);
	return ldexp(rn / rd, en - ed);
}

#endif
