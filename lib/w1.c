/*
 * w1.c: W1 between two prepared tensors, on the CPU.
 *
 * W1 = integral of |F(x) - G(x)| dx over the two empirical CDFs, as scipy
 * computes it. Three kernels, fastest first:
 *   - two counts of the same 16-bit format: one scan over the 65536 codes in
 *     value order, summing |F - G| times the gap to the next code;
 *   - two sorted arrays of the same type and size: (1/n) sum |a_i - b_i|;
 *   - anything else (unequal sizes, mixed dtypes or methods): a merge of the
 *     two ascending value streams in the CDF form.
 * Every sum is of non-negative terms in double, taken in blocks so that the
 * rounding error grows with the block count, not with n.
 */
#include <math.h>

#include "dtype.h"
#include "prepared.h"
#include "cdf.h"

#define BLOCK 4096

static double w1_hist_scan(const struct half_table *t, const uint64_t *ha,
			   uint64_t na, const uint64_t *hb, uint64_t nb)
{
	double w = 0;
	uint64_t ca = 0, cb = 0;

	for (uint32_t j = 0; j + 1 < t->n_order; j++) {
		uint16_t code = t->order[j];
		ca += ha[code];
		cb += hb[code];
		w += wd_cdf_diff(ca, na, cb, nb) * t->gap[j];
	}
	return w;
}

static double w1_sorted_equal_f32(const float *a, const float *b, uint64_t n)
{
	double total = 0;

	for (uint64_t at = 0; at < n; at += BLOCK) {
		uint64_t end = n - at < BLOCK ? n : at + BLOCK;
		double acc[8] = { 0 };
		uint64_t i = at;
		for (; i + 8 <= end; i += 8)
			for (int j = 0; j < 8; j++)
				acc[j] += fabs((double)a[i + j] - (double)b[i + j]);
		for (; i < end; i++)
			acc[0] += fabs((double)a[i] - (double)b[i]);
		total += ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
			 ((acc[4] + acc[5]) + (acc[6] + acc[7]));
	}
	return total / (double)n;
}

static double w1_sorted_equal_f64(const double *a, const double *b, uint64_t n)
{
	double total = 0;

	for (uint64_t at = 0; at < n; at += BLOCK) {
		uint64_t end = n - at < BLOCK ? n : at + BLOCK;
		double acc[4] = { 0 };
		uint64_t i = at;
		for (; i + 4 <= end; i += 4)
			for (int j = 0; j < 4; j++)
				acc[j] += fabs(a[i + j] - b[i + j]);
		for (; i < end; i++)
			acc[0] += fabs(a[i] - b[i]);
		total += (acc[0] + acc[1]) + (acc[2] + acc[3]);
	}
	return total / (double)n;
}

/*
 * An ascending stream of (value, count) over a prepared tensor: each sorted
 * value with count 1, or each non-empty 16-bit bin in value order.
 */
struct stream {
	const struct wd_prepared *p;
	const struct half_table *t;
	uint64_t i, end;
};

static void stream_skip_empty(struct stream *s)
{
	if (s->t)
		while (s->i < s->end && !s->p->hist[s->t->order[s->i]])
			s->i++;
}

static void stream_init(struct stream *s, const struct wd_prepared *p)
{
	s->p = p;
	s->i = 0;
	if (p->method == WD_METHOD_HIST16) {
		s->t = half_table_get(p->store);
		s->end = s->t->n_order;
	} else {
		s->t = NULL;
		s->end = p->n_finite;
	}
	stream_skip_empty(s);
}

static inline double stream_value(const struct stream *s)
{
	if (s->t)
		return s->t->value[s->t->order[s->i]];
	if (s->p->store == WD_F32)
		return ((const float *)s->p->values)[s->i];
	return ((const double *)s->p->values)[s->i];
}

static inline uint64_t stream_take(struct stream *s)
{
	uint64_t c = s->t ? s->p->hist[s->t->order[s->i]] : 1;
	s->i++;
	stream_skip_empty(s);
	return c;
}

static double w1_merge(const struct wd_prepared *a, const struct wd_prepared *b)
{
	struct stream sa, sb;
	double total = 0, block = 0, prev;
	uint64_t ca = 0, cb = 0, terms = 0;

	stream_init(&sa, a);
	stream_init(&sb, b);
	prev = fmin(stream_value(&sa), stream_value(&sb));
	while (sa.i < sa.end || sb.i < sb.end) {
		double x;
		if (sb.i >= sb.end)
			x = stream_value(&sa);
		else if (sa.i >= sa.end)
			x = stream_value(&sb);
		else
			x = fmin(stream_value(&sa), stream_value(&sb));
		/* F and G are constant on [prev, x). */
		block += wd_cdf_diff(ca, a->n_finite, cb, b->n_finite) * (x - prev);
		if (++terms % BLOCK == 0) {
			total += block;
			block = 0;
		}
		while (sa.i < sa.end && stream_value(&sa) == x)
			ca += stream_take(&sa);
		while (sb.i < sb.end && stream_value(&sb) == x)
			cb += stream_take(&sb);
		prev = x;
	}
	return total + block;
}

double w1_cpu(const struct wd_prepared *a, const struct wd_prepared *b)
{
	if (a->method == WD_METHOD_HIST16 && b->method == WD_METHOD_HIST16 &&
	    a->store == b->store)
		return w1_hist_scan(half_table_get(a->store), a->hist, a->n_finite,
				    b->hist, b->n_finite);
	if (a->method == WD_METHOD_SORT && b->method == WD_METHOD_SORT &&
	    a->store == b->store && a->n_finite == b->n_finite) {
		if (a->store == WD_F32)
			return w1_sorted_equal_f32(a->values, b->values, a->n_finite);
		return w1_sorted_equal_f64(a->values, b->values, a->n_finite);
	}
	return w1_merge(a, b);
}
