/*
 * stats.c: the CPU backend's statistics (backend_cpu.h): per-tensor
 * summaries (from a prepared tensor in host memory) and element-wise
 * statistics of two raw tensors with the same element count. Sums run in
 * double, in blocks; the variance is taken about the mean in a second pass,
 * so a large mean does not cancel a small spread. Sums of squares (l2,
 * rel_l2) are kept by magnitude (sumsq.h), so that they neither underflow
 * nor overflow. Within a block, element i goes to lane i % LANES (in the
 * summaries 8 for float values and 4 for double; in the pair statistics
 * 4), so that the lanes' sums are independent and the core overlaps them
 * (the compiler vectorises the summaries' loops; the pair statistics of
 * fp32 and bf16 pairs hold their lanes in SSE2 or AVX2 vectors by hand); the
 * lanes are added pairwise at the block's end, as in w1.c. Every sum
 * then goes block by block, the blocks' partials added in block order, so
 * a split between threads (cpu_blocks) gives the bits of one thread.
 * Calls nothing in engine.c.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__) && defined(__x86_64__)	/* not i386: x87 rounds the scalar path otherwise */
#define PAIR_SSE2 1
#include <emmintrin.h>
#if defined(__GNUC__)	/* gcc and clang: a function compiled for AVX2, called where the CPU has it */
#define PAIR_AVX2 1
#include <immintrin.h>
#endif
#endif

#include "backend_cpu.h"
#include "dtype.h"
#include "prepared.h"
#include "sumsq.h"

#define BLOCK 4096

#define LANES_NARROW 8	/* lanes for float (and 16-bit) values */
#define LANES_WIDE 4	/* for double */
#define PAIR_LANES 4	/* for the pair statistics, whose loop has more to hold */

int cpu_pair_code = -1;

int cpu_pair_code_best(void)
{
#ifdef PAIR_AVX2
	if (__builtin_cpu_supports("avx2"))
		return CPU_PAIR_AVX2;
#endif
#ifdef PAIR_SSE2
	return CPU_PAIR_SSE2;
#else
	return CPU_PAIR_C;
#endif
}

/*
 * The code cpu_pair_code picks, never one this build and CPU do not run:
 * for the pair statistics of fp32 and bf16, and the summaries' float loops.
 */
static int pair_code(void)
{
	int best = cpu_pair_code_best();

	return cpu_pair_code >= 0 && cpu_pair_code < best ? cpu_pair_code : best;
}

static double sorted_at(const struct wd_prepared *p, uint64_t i)
{
	if (p->store == WD_F32)
		return ((const float *)p->values)[i];
	return ((const double *)p->values)[i];
}

/* Adds lanes 1.. into lane 0 pairwise: ((0+1)+(2+3))+((4+5)+(6+7)). */
static double lanes_add(double *acc, int lanes)
{
	for (int w = 1; w < lanes; w *= 2)
		for (int j = 0; j < lanes; j += 2 * w)
			acc[j] += acc[j + w];
	return acc[0];
}

static void lanes_merge(struct wd_sumsq *acc, int lanes)
{
	for (int w = 1; w < lanes; w *= 2)
		for (int j = 0; j < lanes; j += 2 * w)
			wd_sumsq_merge(&acc[j], &acc[j + w]);
}

/* A block's partials: its sum and sum of squares (pass 1), or its squared deviations (pass 2). */
struct sum_partial {
	double sum;
	struct wd_sumsq sq;
};

struct summary_job {
	const struct wd_prepared *p;
	uint64_t n;
	double mean;		/* pass 2 */
	struct sum_partial *partial;	/* a round's blocks */
	double sum, dev;
	struct wd_sumsq sq;
};

/*
 * Pass 1 over float values. A finite float's square is 0 or between
 * 2^-298 and 2^256, so it lands in wd_sumsq's middle sum (a 0 adds 0 to
 * whichever sum): the plain sum of squares is that sum, bit for bit.
 */
#define SUM_BLOCK_F32(NAME, ATTR)						\
ATTR static struct sum_partial NAME(const float *x, uint64_t at, uint64_t end)	\
{										\
	double s[LANES_NARROW] = { 0 }, q[LANES_NARROW] = { 0 };		\
	struct sum_partial b = { 0, { 0, 0, 0 } };				\
	uint64_t i = at;							\
										\
	for (; i + LANES_NARROW <= end; i += LANES_NARROW)			\
		for (int k = 0; k < LANES_NARROW; k++) {			\
			double v = x[i + k];					\
			s[k] += v;						\
			q[k] += v * v;						\
		}								\
	for (int k = 0; i < end; i++, k++) {					\
		double v = x[i];						\
		s[k] += v;							\
		q[k] += v * v;							\
	}									\
	b.sum = lanes_add(s, LANES_NARROW);					\
	b.sq.med = lanes_add(q, LANES_NARROW);					\
	return b;								\
}

/*
 * The float loops twice: as the build's baseline (SSE2 on x86-64) and for
 * AVX2, whose vectors hold twice the lanes: each lane adds the same values
 * in the same order (no FMA, -ffp-contract=off), so the same bits, at
 * about twice the speed (docs/performance.md). pair_code picks, as for the
 * pair statistics.
 */
SUM_BLOCK_F32(sum_block_f32_base, )
#ifdef PAIR_AVX2
SUM_BLOCK_F32(sum_block_f32_avx2, __attribute__((target("avx2"))))
#endif

static struct sum_partial sum_block_f32(const float *x, uint64_t at, uint64_t end)
{
#ifdef PAIR_AVX2
	if (pair_code() == CPU_PAIR_AVX2)
		return sum_block_f32_avx2(x, at, end);
#endif
	return sum_block_f32_base(x, at, end);
}

static struct sum_partial sum_block_f64(const double *x, uint64_t at, uint64_t end)
{
	double s[LANES_WIDE] = { 0 };
	struct wd_sumsq q[LANES_WIDE] = { { 0, 0, 0 } };
	struct sum_partial b;
	uint64_t i = at;

	for (; i + LANES_WIDE <= end; i += LANES_WIDE)
		for (int k = 0; k < LANES_WIDE; k++) {
			s[k] += x[i + k];
			wd_sumsq_add(&q[k], x[i + k]);
		}
	for (int k = 0; i < end; i++, k++) {
		s[k] += x[i];
		wd_sumsq_add(&q[k], x[i]);
	}
	b.sum = lanes_add(s, LANES_WIDE);
	lanes_merge(q, LANES_WIDE);
	b.sq = q[0];
	return b;
}

static struct sum_partial sum_block(const struct summary_job *j, uint64_t blk)
{
	uint64_t at = blk * BLOCK, end = j->n - at < BLOCK ? j->n : at + BLOCK;

	if (j->p->store == WD_F32)
		return sum_block_f32(j->p->values, at, end);
	return sum_block_f64(j->p->values, at, end);
}

/* Pass 2: the squared deviations from the mean, float or double values. */
#define DEV_BLOCK(NAME, T, LANES, ATTR)					\
ATTR static double NAME(const T *x, uint64_t at, uint64_t end, double mean)	\
{										\
	double acc[LANES] = { 0 };						\
	uint64_t i = at;							\
	for (; i + LANES <= end; i += LANES)					\
		for (int k = 0; k < LANES; k++) {				\
			double d = (double)x[i + k] - mean;			\
			acc[k] += d * d;					\
		}								\
	for (int k = 0; i < end; i++, k++) {					\
		double d = (double)x[i] - mean;					\
		acc[k] += d * d;						\
	}									\
	return lanes_add(acc, LANES);						\
}

DEV_BLOCK(dev_block_f32_base, float, LANES_NARROW, )
DEV_BLOCK(dev_block_f64, double, LANES_WIDE, )
#ifdef PAIR_AVX2
DEV_BLOCK(dev_block_f32_avx2, float, LANES_NARROW, __attribute__((target("avx2"))))
#endif

static double dev_block_f32(const float *x, uint64_t at, uint64_t end, double mean)
{
#ifdef PAIR_AVX2
	if (pair_code() == CPU_PAIR_AVX2)
		return dev_block_f32_avx2(x, at, end, mean);
#endif
	return dev_block_f32_base(x, at, end, mean);
}

static double dev_block(const struct summary_job *j, uint64_t blk)
{
	uint64_t at = blk * BLOCK, end = j->n - at < BLOCK ? j->n : at + BLOCK;

	if (j->p->store == WD_F32)
		return dev_block_f32(j->p->values, at, end, j->mean);
	return dev_block_f64(j->p->values, at, end, j->mean);
}

CPU_BLOCKS_PART(sum_part, struct summary_job, sum_block)

static void sum_combine(void *ctx, uint64_t first, uint64_t end)
{
	struct summary_job *j = ctx;
	for (uint64_t blk = first; blk < end; blk++) {
		j->sum += j->partial[blk - first].sum;
		wd_sumsq_merge(&j->sq, &j->partial[blk - first].sq);
	}
}

static void dev_part(void *ctx, uint64_t first, uint64_t b0, uint64_t b1)
{
	struct summary_job *j = ctx;
	for (uint64_t blk = b0; blk < b1; blk++)
		j->partial[blk - first].sum = dev_block(j, blk);
}

static void dev_combine(void *ctx, uint64_t first, uint64_t end)
{
	struct summary_job *j = ctx;
	for (uint64_t blk = first; blk < end; blk++)
		j->dev += j->partial[blk - first].sum;
}

/*
 * Sums in blocks, the blocks' partials added in block order: on one thread
 * as they come, or after a split (cpu_blocks); the same bits either way.
 */
static void summarize_sorted(struct cpu_engine *c, const struct wd_prepared *p,
			     struct wd_summary *s)
{
	uint64_t n = p->n_finite, nblocks = (n + BLOCK - 1) / BLOCK;
	struct summary_job j = { p, n, 0, NULL, 0, 0, { 0, 0, 0 } };

	if (cpu_parts(c, n) > 1 &&
	    (j.partial = malloc((nblocks < CPU_ROUND ? nblocks : CPU_ROUND) * sizeof(*j.partial)))) {
		cpu_blocks(c, nblocks, n, sum_part, sum_combine, &j);
		j.mean = j.sum / (double)n;
		cpu_blocks(c, nblocks, n, dev_part, dev_combine, &j);
		free(j.partial);
	} else {
		for (uint64_t blk = 0; blk < nblocks; blk++) {
			struct sum_partial b = sum_block(&j, blk);
			j.sum += b.sum;
			wd_sumsq_merge(&j.sq, &b.sq);
		}
		j.mean = j.sum / (double)n;
		for (uint64_t blk = 0; blk < nblocks; blk++)
			j.dev += dev_block(&j, blk);
	}
	s->mean = j.mean;
	s->std = sqrt(j.dev / (double)n);
	s->min = sorted_at(p, 0);
	s->max = sorted_at(p, n - 1);
	s->l2 = wd_sumsq_norm(&j.sq);
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

void cpu_summarize(struct cpu_engine *c, const struct wd_prepared *p, struct wd_summary *s)
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
		summarize_sorted(c, p, s);
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

/* A block's share of the pair statistics. */
struct pair_partial {
	struct wd_sumsq dd, aa;	/* of |a - b| and of a, where both are finite */
	double maxd;
	uint64_t n_diff, n_cmp;
};

struct pair_job {
	const struct wd_view *a, *b;
	struct pair_partial *partial;	/* a round's blocks */
	struct pair_partial total;
};

/*
 * pair_block for fp16 and mixed pairs (decoded to double), and for fp32
 * and bf16 pairs where cpu_pair_code picks the plain C code (a build
 * without SSE2, or a test; PAIR_BLOCK_SSE2 and PAIR_BLOCK_AVX2 below give
 * the same bits): the same sums as the double path's, lane for lane, without
 * wd_sumsq_add's three-way test. A finite
 * value of these types, and a difference of two, is 0 or between 2^-149
 * and 2^129: never big, and small only when 0, whose square adds 0 to
 * either sum. So every square lands in the middle sum. The maximum and
 * the counts are exact in any order. A branch per pair takes the
 * non-finite ones aside: it is taken the same way almost always.
 */
#define PAIR_BLOCK_NARROW(NAME, T, VALUE)					\
static struct pair_partial NAME(const T *da, const T *db, uint64_t count)	\
{										\
	struct pair_partial p = { { 0, 0, 0 }, { 0, 0, 0 }, 0, 0, 0 };		\
	double dd[PAIR_LANES] = { 0 }, aa[PAIR_LANES] = { 0 }, mx[PAIR_LANES] = { 0 }; \
	uint64_t n_diff = 0, n_cmp = 0, i = 0, full = count - count % PAIR_LANES; \
	for (; i < full; i += PAIR_LANES)					\
		for (int k = 0; k < PAIR_LANES; k++)				\
			PAIR_LANE(VALUE(da[i + k]), VALUE(db[i + k]), k);	\
	PAIR_BLOCK_END(VALUE);							\
	return p;								\
}

/*
 * A block's last pairs (fewer than PAIR_LANES) into lanes 0.., then its
 * lanes added up into p: the end of every pair block.
 */
#define PAIR_BLOCK_END(VALUE)							\
	do {									\
		for (int k = 0; i + (uint64_t)k < count; k++)			\
			PAIR_LANE(VALUE(da[i + k]), VALUE(db[i + k]), k);	\
		p.dd.med = lanes_add(dd, PAIR_LANES);				\
		p.aa.med = lanes_add(aa, PAIR_LANES);				\
		for (int k = 0; k < PAIR_LANES; k++)				\
			p.maxd = mx[k] > p.maxd ? mx[k] : p.maxd;		\
		p.n_diff = n_diff;						\
		p.n_cmp = n_cmp;						\
	} while (0)

/* The pair (x, y) into lane k; the counts and the maximum are exact in any order. */
#define PAIR_LANE(x_, y_, k)							\
	do {									\
		double x = (x_), y = (y_);					\
		if (fabs(x) <= DBL_MAX && fabs(y) <= DBL_MAX) {			\
			double d = fabs(x - y);					\
			n_cmp++;						\
			n_diff += d != 0;					\
			mx[k] = d > mx[k] ? d : mx[k];				\
			dd[k] += d * d;						\
			aa[k] += x * x;						\
		} else {							\
			n_diff += !(x == y || (x != x && y != y));		\
		}								\
	} while (0)

/* A bf16 code's value: the top half of an fp32's bits, so exact (NaN, +-Inf and subnormals too). */
static inline double bf16_value(uint16_t code)
{
	uint32_t bits = (uint32_t)code << 16;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

#define AS_DOUBLE(x) ((double)(x))
PAIR_BLOCK_NARROW(pair_block_narrow, double, AS_DOUBLE)	/* decoded fp16 values, or mixed types */
PAIR_BLOCK_NARROW(pair_block_f32_c, float, AS_DOUBLE)	/* fp32 against fp32, read in place */
PAIR_BLOCK_NARROW(pair_block_bf16_c, uint16_t, bf16_value)	/* bf16 against bf16, read in place */

#ifdef PAIR_SSE2
/*
 * fp32 against fp32, and bf16 against bf16, read in place: PAIR_LANE's
 * sums with the PAIR_LANES lanes in two SSE2 vectors of two doubles,
 * lanes 0-1 and 2-3 (every x86-64 has SSE2). No branch: a pair that is
 * not finite adds +0 to both sums and to the maximum, which leaves them
 * as they are (they hold +0 or more), so every lane sums what PAIR_LANE
 * would, in the same order, to the same bits. The tests (finite, equal,
 * both NaN) give the same answers on the floats as on their doubles, so
 * they run on four floats at once, and the counts in 32-bit lanes (a
 * block is at most BLOCK pairs). GCC does not vectorise PAIR_LANE's loop,
 * with its branch or without.
 */
struct pair_v4 {
	__m128d dd[2], aa[2], mx[2];	/* lanes 0-1, 2-3 */
	__m128i n_cmp, n_same;	/* a true mask is -1: subtracting it counts one */
};

static inline __m128 pair_load_f32(const float *x)
{
	return _mm_loadu_ps(x);
}

/* Four bf16 codes, each the top half of its fp32's bits. */
static inline __m128 pair_load_bf16(const uint16_t *x)
{
	return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(),
						   _mm_loadl_epi64((const __m128i *)x)));
}

/* The tests on four pairs: those compared (finite) and equal counted; the finite ones' mask. */
static inline __m128 pair_v4_test(__m128 x, __m128 y, __m128i *n_cmp, __m128i *n_same)
{
	const __m128 absmask = _mm_castsi128_ps(_mm_set1_epi32(INT32_MAX)), big = _mm_set1_ps(FLT_MAX);
	__m128 finite = _mm_and_ps(_mm_cmple_ps(_mm_and_ps(x, absmask), big),
				   _mm_cmple_ps(_mm_and_ps(y, absmask), big));
	__m128 same = _mm_or_ps(_mm_cmpeq_ps(x, y),
				_mm_and_ps(_mm_cmpunord_ps(x, x), _mm_cmpunord_ps(y, y)));

	*n_cmp = _mm_sub_epi32(*n_cmp, _mm_castps_si128(finite));
	*n_same = _mm_sub_epi32(*n_same, _mm_castps_si128(same));
	return finite;
}

static inline void pair_v4_add(struct pair_v4 *l, __m128 x, __m128 y)
{
	const __m128d absmask2 = _mm_castsi128_pd(_mm_set1_epi64x(INT64_MAX));
	__m128 finite = pair_v4_test(x, y, &l->n_cmp, &l->n_same);
	__m128d f[2] = { _mm_castps_pd(_mm_unpacklo_ps(finite, finite)),
			 _mm_castps_pd(_mm_unpackhi_ps(finite, finite)) };
	__m128d xd[2] = { _mm_cvtps_pd(x), _mm_cvtps_pd(_mm_movehl_ps(x, x)) };
	__m128d yd[2] = { _mm_cvtps_pd(y), _mm_cvtps_pd(_mm_movehl_ps(y, y)) };

	for (int h = 0; h < 2; h++) {
		__m128d d = _mm_and_pd(_mm_and_pd(_mm_sub_pd(xd[h], yd[h]), absmask2), f[h]);
		__m128d xf = _mm_and_pd(xd[h], f[h]);
		l->mx[h] = _mm_max_pd(d, l->mx[h]);	/* d > mx ? d : mx */
		l->dd[h] = _mm_add_pd(l->dd[h], _mm_mul_pd(d, d));
		l->aa[h] = _mm_add_pd(l->aa[h], _mm_mul_pd(xf, xf));
	}
}

static inline uint64_t pair_v4_count(__m128i c)
{
	uint32_t n[4];

	_mm_storeu_si128((__m128i *)n, c);
	return (uint64_t)n[0] + n[1] + n[2] + n[3];
}

#define PAIR_BLOCK_SSE2(NAME, T, LOAD, VALUE)					\
static struct pair_partial NAME(const T *da, const T *db, uint64_t count)	\
{										\
	_Static_assert(PAIR_LANES == 4, "one load of four holds the lanes");	\
	struct pair_v4 l;							\
	uint64_t i = 0, full = count - count % PAIR_LANES;			\
	for (int h = 0; h < 2; h++)						\
		l.dd[h] = l.aa[h] = l.mx[h] = _mm_setzero_pd();			\
	l.n_cmp = l.n_same = _mm_setzero_si128();				\
	for (; i < full; i += PAIR_LANES)					\
		pair_v4_add(&l, LOAD(da + i), LOAD(db + i));			\
	struct pair_partial p = { { 0, 0, 0 }, { 0, 0, 0 }, 0, 0, 0 };		\
	double dd[PAIR_LANES], aa[PAIR_LANES], mx[PAIR_LANES];			\
	uint64_t n_cmp = pair_v4_count(l.n_cmp), n_diff = full - pair_v4_count(l.n_same); \
	for (int h = 0; h < 2; h++) {						\
		_mm_storeu_pd(dd + 2 * h, l.dd[h]);				\
		_mm_storeu_pd(aa + 2 * h, l.aa[h]);				\
		_mm_storeu_pd(mx + 2 * h, l.mx[h]);				\
	}									\
	PAIR_BLOCK_END(VALUE);							\
	return p;								\
}

PAIR_BLOCK_SSE2(pair_block_f32_sse2, float, pair_load_f32, AS_DOUBLE)
PAIR_BLOCK_SSE2(pair_block_bf16_sse2, uint16_t, pair_load_bf16, bf16_value)
#endif

#ifdef PAIR_AVX2
/*
 * The same with the four lanes in one AVX2 vector of four doubles: the
 * same operations on each lane as the SSE2 code's, so the same bits, with
 * half the double instructions (no FMA: the target is AVX2 alone, and
 * -ffp-contract=off). The tests on the floats stay in SSE2.
 */
struct pair_v4w {
	__m256d dd, aa, mx;
	__m128i n_cmp, n_same;
};

__attribute__((target("avx2")))
static inline void pair_v4w_add(struct pair_v4w *l, __m128 x, __m128 y)
{
	const __m256d absmask4 = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
	__m128 finite = pair_v4_test(x, y, &l->n_cmp, &l->n_same);
	/* each 32-bit mask widened to 64 bits, sign and all */
	__m256d f = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_castps_si128(finite)));
	__m256d xd = _mm256_cvtps_pd(x), yd = _mm256_cvtps_pd(y);
	__m256d d = _mm256_and_pd(_mm256_and_pd(_mm256_sub_pd(xd, yd), absmask4), f);
	__m256d xf = _mm256_and_pd(xd, f);

	l->mx = _mm256_max_pd(d, l->mx);	/* d > mx ? d : mx */
	l->dd = _mm256_add_pd(l->dd, _mm256_mul_pd(d, d));
	l->aa = _mm256_add_pd(l->aa, _mm256_mul_pd(xf, xf));
}

#define PAIR_BLOCK_AVX2(NAME, T, LOAD, VALUE)					\
__attribute__((target("avx2")))						\
static struct pair_partial NAME(const T *da, const T *db, uint64_t count)	\
{										\
	struct pair_v4w l = { _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), \
			      _mm_setzero_si128(), _mm_setzero_si128() };	\
	uint64_t i = 0, full = count - count % PAIR_LANES;			\
	for (; i < full; i += PAIR_LANES)					\
		pair_v4w_add(&l, LOAD(da + i), LOAD(db + i));			\
	struct pair_partial p = { { 0, 0, 0 }, { 0, 0, 0 }, 0, 0, 0 };		\
	double dd[PAIR_LANES], aa[PAIR_LANES], mx[PAIR_LANES];			\
	uint64_t n_cmp = pair_v4_count(l.n_cmp), n_diff = full - pair_v4_count(l.n_same); \
	_mm256_storeu_pd(dd, l.dd);						\
	_mm256_storeu_pd(aa, l.aa);						\
	_mm256_storeu_pd(mx, l.mx);						\
	PAIR_BLOCK_END(VALUE);							\
	return p;								\
}

PAIR_BLOCK_AVX2(pair_block_f32_avx2, float, pair_load_f32, AS_DOUBLE)
PAIR_BLOCK_AVX2(pair_block_bf16_avx2, uint16_t, pair_load_bf16, bf16_value)

/*
 * Two full blocks side by side, each into its own partial with the bits
 * PAIR_BLOCK_AVX2 gives it, on the guess that every pair is finite: no
 * masks and no finite count, half of PAIR_BLOCK_AVX2's instructions, and
 * two blocks' chains of dependent adds interleaved to fill each other's
 * latency. Where every pair is finite, each mask is all ones, so the
 * lanes sum the same values in the same order as PAIR_BLOCK_AVX2's. A
 * pair that is not finite makes its block's dd (|x - y| is Inf or NaN) or
 * aa (x is) not finite, which finite values cannot: a difference of two
 * floats is below 2^129, its square below 2^258, a block's sum below
 * 2^270. Such a block is done again by PAIR_BLOCK_AVX2 (a tensor with a
 * value that is not finite in every block pays about half again).
 */
struct pair_v4f {
	__m256d dd, aa, mx;
	__m128i n_same;	/* a true mask is -1: subtracting it counts one */
};

__attribute__((target("avx2")))
static inline void pair_v4f_add(struct pair_v4f *l, __m128 x, __m128 y)
{
	const __m256d absmask4 = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
	__m256d xd = _mm256_cvtps_pd(x), yd = _mm256_cvtps_pd(y);
	__m256d d = _mm256_and_pd(_mm256_sub_pd(xd, yd), absmask4);

	l->n_same = _mm_sub_epi32(l->n_same, _mm_castps_si128(_mm_cmpeq_ps(x, y)));
	l->mx = _mm256_max_pd(d, l->mx);	/* d > mx ? d : mx */
	l->dd = _mm256_add_pd(l->dd, _mm256_mul_pd(d, d));
	l->aa = _mm256_add_pd(l->aa, _mm256_mul_pd(xd, xd));
}

/* A block of finite pairs into its partial, as PAIR_BLOCK_AVX2 ends one; 0 if it was not. */
__attribute__((target("avx2")))
static int pair_v4f_partial(const struct pair_v4f *l, struct pair_partial *p)
{
	double dd[PAIR_LANES], aa[PAIR_LANES], mx[PAIR_LANES];

	_mm256_storeu_pd(dd, l->dd);
	_mm256_storeu_pd(aa, l->aa);
	_mm256_storeu_pd(mx, l->mx);
	*p = (struct pair_partial){ { 0, 0, 0 }, { 0, 0, 0 }, 0, 0, 0 };
	for (int k = 0; k < PAIR_LANES; k++)
		if (!(fabs(dd[k]) <= DBL_MAX && fabs(aa[k]) <= DBL_MAX))
			return 0;
	p->dd.med = lanes_add(dd, PAIR_LANES);
	p->aa.med = lanes_add(aa, PAIR_LANES);
	for (int k = 0; k < PAIR_LANES; k++)
		p->maxd = mx[k] > p->maxd ? mx[k] : p->maxd;
	p->n_cmp = BLOCK;
	p->n_diff = BLOCK - pair_v4_count(l->n_same);
	return 1;
}

#define PAIR_TWO_AVX2(NAME, T, LOAD, BLOCK_AVX2)				\
__attribute__((target("avx2")))						\
static void NAME(const T *da, const T *db, struct pair_partial out[2])	\
{										\
	_Static_assert(BLOCK % PAIR_LANES == 0, "a full block has no tail");	\
	struct pair_v4f l0 = { _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), \
			       _mm_setzero_si128() };				\
	struct pair_v4f l1 = l0;						\
	for (uint64_t i = 0; i < BLOCK; i += PAIR_LANES) {			\
		pair_v4f_add(&l0, LOAD(da + i), LOAD(db + i));			\
		pair_v4f_add(&l1, LOAD(da + BLOCK + i), LOAD(db + BLOCK + i));	\
	}									\
	if (!pair_v4f_partial(&l0, &out[0]))					\
		out[0] = BLOCK_AVX2(da, db, BLOCK);				\
	if (!pair_v4f_partial(&l1, &out[1]))					\
		out[1] = BLOCK_AVX2(da + BLOCK, db + BLOCK, BLOCK);		\
}

PAIR_TWO_AVX2(pair_two_f32_avx2, float, pair_load_f32, pair_block_f32_avx2)
PAIR_TWO_AVX2(pair_two_bf16_avx2, uint16_t, pair_load_bf16, pair_block_bf16_avx2)
#endif

/* fp32 against fp32, or bf16 against bf16 (bf16 set), in pair_code's code. */
static struct pair_partial pair_block_read(int bf16, const void *a, const void *b, uint64_t count)
{
	int code = pair_code();

#ifdef PAIR_AVX2
	if (code == CPU_PAIR_AVX2)
		return bf16 ? pair_block_bf16_avx2(a, b, count) : pair_block_f32_avx2(a, b, count);
#endif
#ifdef PAIR_SSE2
	if (code >= CPU_PAIR_SSE2)
		return bf16 ? pair_block_bf16_sse2(a, b, count) : pair_block_f32_sse2(a, b, count);
#endif
	(void)code;
	return bf16 ? pair_block_bf16_c(a, b, count) : pair_block_f32_c(a, b, count);
}

static struct pair_partial pair_block(const struct pair_job *j, uint64_t blk)
{
	double da[BLOCK], db[BLOCK];
	uint64_t at = blk * BLOCK, count = j->a->numel - at < BLOCK ? j->a->numel - at : BLOCK;
	struct pair_partial p = { { 0, 0, 0 }, { 0, 0, 0 }, 0, 0, 0 };
	struct wd_sumsq dd[LANES_WIDE] = { { 0, 0, 0 } }, aa[LANES_WIDE] = { { 0, 0, 0 } };

	if (j->a->dtype == WD_F32 && j->b->dtype == WD_F32)
		return pair_block_read(0, (const float *)j->a->data + at, (const float *)j->b->data + at,
				       count);
	if (j->a->dtype == WD_BF16 && j->b->dtype == WD_BF16)
		return pair_block_read(1, (const uint16_t *)j->a->data + at,
				       (const uint16_t *)j->b->data + at, count);
	decode_block(j->a, at, count, da);
	decode_block(j->b, at, count, db);
	if (j->a->dtype != WD_F64 && j->b->dtype != WD_F64)
		return pair_block_narrow(da, db, count);
	for (uint64_t i = 0; i < count; i++) {
		double x = da[i], y = db[i];
		if (isfinite(x) && isfinite(y)) {
			double d = fabs(x - y);
			p.n_cmp++;
			p.n_diff += d != 0;
			p.maxd = d > p.maxd ? d : p.maxd;
			wd_sumsq_add(&dd[i % LANES_WIDE], d);
			wd_sumsq_add(&aa[i % LANES_WIDE], x);
		} else if (!(x == y || (isnan(x) && isnan(y)))) {
			p.n_diff++;
		}
	}
	lanes_merge(dd, LANES_WIDE);
	lanes_merge(aa, LANES_WIDE);
	p.dd = dd[0];
	p.aa = aa[0];
	return p;
}

/* Adds a block's partials to the total: the sums in block order, counts and max exact. */
static void pair_add(struct pair_partial *t, const struct pair_partial *p)
{
	wd_sumsq_merge(&t->dd, &p->dd);
	wd_sumsq_merge(&t->aa, &p->aa);
	t->maxd = p->maxd > t->maxd ? p->maxd : t->maxd;
	t->n_diff += p->n_diff;
	t->n_cmp += p->n_cmp;
}

/*
 * Blocks b0..b1 of the job into out[0..]: two full blocks at a time where
 * the AVX2 code reads both tensors in place (PAIR_TWO_AVX2), every other
 * block alone. The same partials either way.
 */
static void pair_blocks(const struct pair_job *j, uint64_t b0, uint64_t b1, struct pair_partial *out)
{
	uint64_t blk = b0;

#ifdef PAIR_AVX2
	enum wd_dtype t = j->a->dtype;

	if (pair_code() == CPU_PAIR_AVX2 && t == j->b->dtype && (t == WD_F32 || t == WD_BF16))
		for (; blk + 2 <= b1 && (blk + 2) * BLOCK <= j->a->numel; blk += 2) {
			uint64_t at = blk * BLOCK;
			if (t == WD_F32)
				pair_two_f32_avx2((const float *)j->a->data + at,
						  (const float *)j->b->data + at, &out[blk - b0]);
			else
				pair_two_bf16_avx2((const uint16_t *)j->a->data + at,
						   (const uint16_t *)j->b->data + at, &out[blk - b0]);
		}
#endif
	for (; blk < b1; blk++)
		out[blk - b0] = pair_block(j, blk);
}

static void pair_part(void *ctx, uint64_t first, uint64_t b0, uint64_t b1)
{
	struct pair_job *j = ctx;

	pair_blocks(j, b0, b1, &j->partial[b0 - first]);
}

static void pair_combine(void *ctx, uint64_t first, uint64_t end)
{
	struct pair_job *j = ctx;
	for (uint64_t blk = first; blk < end; blk++)
		pair_add(&j->total, &j->partial[blk - first]);
}

int cpu_pair_stats(struct cpu_engine *c, const struct wd_view *a, const struct wd_view *b,
		   struct wd_pair_stats *out)
{
	struct pair_job j = { a, b, NULL, { { 0, 0, 0 }, { 0, 0, 0 }, 0, 0, 0 } };
	uint64_t nblocks;

	if (a->numel != b->numel || !wd_dtype_size(a->dtype) ||
	    !wd_dtype_size(b->dtype) || (a->numel && (!a->data || !b->data)))
		return -EINVAL;
	nblocks = (a->numel + BLOCK - 1) / BLOCK;
	if (cpu_parts(c, a->numel) > 1 &&
	    (j.partial = malloc((nblocks < CPU_ROUND ? nblocks : CPU_ROUND) * sizeof(*j.partial)))) {
		cpu_blocks(c, nblocks, a->numel, pair_part, pair_combine, &j);
		free(j.partial);
	} else {
		struct pair_partial some[64];
		for (uint64_t blk = 0; blk < nblocks; blk += 64) {
			uint64_t end = nblocks - blk < 64 ? nblocks : blk + 64;
			pair_blocks(&j, blk, end, some);
			for (uint64_t k = 0; k < end - blk; k++)
				pair_add(&j.total, &some[k]);
		}
	}
	out->n_diff = j.total.n_diff;
	out->n_compared = j.total.n_cmp;
	out->max_abs_diff = j.total.n_cmp ? j.total.maxd : NAN;
	if (wd_sumsq_zero(&j.total.dd))
		out->rel_l2 = j.total.n_cmp ? 0 : NAN;
	else
		out->rel_l2 = !wd_sumsq_zero(&j.total.aa) ? wd_sumsq_ratio(&j.total.dd, &j.total.aa) : NAN;
	return 0;
}
