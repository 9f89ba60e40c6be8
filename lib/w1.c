/*
 * w1.c: W1 between two prepared tensors, on the CPU (backend_cpu.h: cpu_w1).
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
#include <stdlib.h>

#include "backend_cpu.h"
#include "dtype.h"
#include "prepared.h"
#include "cdf.h"

#define BLOCK 4096

/*
 * The scan over the finite codes in value order: w += |F - G| * gap[j].
 * The steps where |F - G| is exactly 0 add +0 to w, which leaves its bits
 * as they are: below the lowest code either tensor holds (ca = cb = 0), and
 * from the highest on (ca = na, cb = nb). So the scan runs between those
 * two, found by looking for a count from each end (weights centred on 0
 * span about half the codes, every small magnitude of both signs; values
 * of one sign, or far from 0, fewer). Between them, |F - G| changes only
 * at a code that either holds: it is computed there alone (its 128-bit
 * products and division), and the steps between reuse it, each still one
 * product and one add, in order: the same bits as a step by step scan of
 * every code (test_engine's test_hist_scan_bits). That, and the inline
 * conversion (cdf.h), is most of the gain. na and nb are not 0: the
 * caller's (engine.c gives NaN then, with no scan).
 */
static double w1_hist_scan(const struct half_table *t, const uint64_t *ha,
			   uint64_t na, const uint64_t *hb, uint64_t nb)
{
	double w = 0, diff = 0;
	uint64_t ca = 0, cb = 0;
	uint32_t lo = 0, last = t->n_order;

	while (lo < t->n_order && !(ha[t->order[lo]] | hb[t->order[lo]]))
		lo++;
	while (last > lo && !(ha[t->order[last - 1]] | hb[t->order[last - 1]]))
		last--;
	/* last - 1: the highest code held; from there on ca = na and cb = nb */
	for (uint32_t j = lo; j + 1 < last; j++) {
		uint16_t code = t->order[j];
		if (ha[code] | hb[code]) {
			ca += ha[code];
			cb += hb[code];
			diff = wd_cdf_diff(ca, na, cb, nb);
		}
		w += diff * t->gap[j];
	}
	return w;
}

/*
 * W1 of two sorted arrays of n values each: (1/n) sum |a_i - b_i|, in
 * blocks, with LANES independent accumulators per block (so that the
 * compiler vectorises), added pairwise: ((0+1)+(2+3))+((4+5)+(6+7)). The
 * blocks' subtotals are added in block order, on one thread or after a
 * split (cpu_blocks), so every thread count gives the same bits. One body
 * for float (8 lanes) and double (4), generated twice.
 */
#define W1_SORTED_BLOCK(NAME, T, LANES)						\
static double NAME(const T *a, const T *b, uint64_t at, uint64_t end)		\
{										\
	double acc[LANES] = { 0 };						\
	uint64_t i = at;							\
	for (; i + LANES <= end; i += LANES)					\
		for (int j = 0; j < LANES; j++)					\
			acc[j] += fabs((double)a[i + j] - (double)b[i + j]);	\
	for (; i < end; i++)							\
		acc[0] += fabs((double)a[i] - (double)b[i]);			\
	for (int w = 1; w < LANES; w *= 2)					\
		for (int j = 0; j < LANES; j += 2 * w)				\
			acc[j] += acc[j + w];					\
	return acc[0];								\
}

W1_SORTED_BLOCK(w1_block_f32, float, 8)
W1_SORTED_BLOCK(w1_block_f64, double, 4)

struct equal_job {
	const void *a, *b;
	uint64_t n;
	int f64;
	double *partial;	/* a round's block subtotals */
	double total;
};

static double equal_block(const struct equal_job *j, uint64_t blk)
{
	uint64_t at = blk * BLOCK, end = j->n - at < BLOCK ? j->n : at + BLOCK;
	return j->f64 ? w1_block_f64(j->a, j->b, at, end) : w1_block_f32(j->a, j->b, at, end);
}

CPU_BLOCKS_PART(equal_part, struct equal_job, equal_block)

static void equal_combine(void *ctx, uint64_t first, uint64_t end)
{
	struct equal_job *j = ctx;
	for (uint64_t blk = first; blk < end; blk++)
		j->total += j->partial[blk - first];
}

static double w1_sorted_equal(struct cpu_engine *c, const void *a, const void *b, uint64_t n,
			      int f64)
{
	struct equal_job j = { a, b, n, f64, NULL, 0 };
	uint64_t nblocks = (n + BLOCK - 1) / BLOCK;

	if (cpu_parts(c, n) > 1 &&
	    (j.partial = malloc((nblocks < CPU_ROUND ? nblocks : CPU_ROUND) * sizeof(double)))) {
		cpu_blocks(c, nblocks, n, equal_part, equal_combine, &j);
		free(j.partial);
	} else {	/* the same sum, in the same order, with no buffer */
		for (uint64_t blk = 0; blk < nblocks; blk++)
			j.total += equal_block(&j, blk);
	}
	return j.total / (double)n;
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

double cpu_w1(struct cpu_engine *c, const struct wd_prepared *a, const struct wd_prepared *b)
{
	if (a->method == WD_METHOD_HIST16 && b->method == WD_METHOD_HIST16 &&
	    a->store == b->store)
		return w1_hist_scan(half_table_get(a->store), a->hist, a->n_finite,
				    b->hist, b->n_finite);
	if (a->method == WD_METHOD_SORT && b->method == WD_METHOD_SORT &&
	    a->store == b->store && a->n_finite == b->n_finite) {
		return w1_sorted_equal(c, a->values, b->values, a->n_finite, a->store == WD_F64);
	}
	return w1_merge(a, b);
}
