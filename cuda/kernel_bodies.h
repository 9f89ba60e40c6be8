/*
 * kernel_bodies.h: what each thread of the engine's kernels does, written
 * once for the GPU and for the CPU test that runs it.
 *
 * Every kernel in cuda/kernels.cuh is a thin __global__ wrapper around one
 * body here. A body is a template on its thread context X, which supplies
 * the thread's indices and everything CUDA-specific the body needs: warp
 * votes and shuffles, block barriers and reductions, atomics, and the
 * shared memory of the other block of a cluster. On the GPU X is
 * dev_thread (kernels.cuh: intrinsics and CUB). In tests/kernels X is
 * host_thread, a SIMT emulator that runs each thread of a block as a fiber
 * over the same index space, so that the test exercises this code, warp
 * votes included, and compares it with the CPU engine on every machine.
 *
 * So this header includes no CUDA header, and uses nothing a host C++17
 * compiler lacks. WD_HD marks what both sides compile.
 *
 * Conventions:
 * - Sorted tensors on the device are plain floats or doubles in ascending
 *   order, sorted by CUB's radix sort, whose key map is the CPU engine's
 *   (lib/radix_sort.h): NaNs with the sign bit set come first, then -Inf,
 *   the finite values, +Inf and the other NaNs. nonfinite_ends_body finds
 *   the finite range; every other kernel reads only that range.
 * - 16-bit tensors are counted into 65536 bins indexed by code.
 * - Reductions write one partial per block; the host adds the partials in
 *   a fixed order, so results do not depend on the order blocks finish in.
 * - Every sum is in double; CDF fractions are divided (i / na), as scipy
 *   and the CPU engine do (lib/w1.c).
 */
#ifndef WD_KERNEL_BODIES_H
#define WD_KERNEL_BODIES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../lib/cdf.h"	/* W1's step heights, as the CPU engine's */
#include "../lib/sumsq.h"	/* rel_l2's sums of squares, as the CPU engine's */

#ifdef __CUDACC__
#define WD_HD __host__ __device__ __forceinline__
#else
#define WD_HD inline
#endif

#define RED_THREADS 256		/* threads per block of the reductions */
#define RED_BLOCKS_PER_SM 8	/* __launch_bounds__ minimum: full occupancy */
#define HIST_THREADS 1024
#define HIST_HALF 32768u	/* bins per block: one sign half of 65536 */
#define HIST_CHUNK (1u << 20)	/* elements per cluster of two count blocks */
#define MERGE_ITEMS 16		/* merged positions per thread */
#define EXPAND_ITEMS 16		/* output values per lane of the expansion */
#define SCAN_THREADS 1024
#define PAIR_UNROLL 4		/* independent loads in flight per thread */
#define SUMMARY_PARTIALS 5	/* per block: sum (x - m), sum (x - m)^2, x's sums of squares (3) */
#define PAIR_PARTIALS 9		/* per block: max |d|, |d| and |a| sums of squares (3 each), counts */

/*
 * Blocks for a grid-stride kernel over items, threads per block: enough to
 * cover them, at most blocks_per_sm per SM and cap (the partials a result
 * may have). The engine and the CPU test size their grids with it.
 */
WD_HD unsigned grid_for_items(size_t items, unsigned threads, int sms, int blocks_per_sm,
			      unsigned cap)
{
	size_t blocks = (items + threads - 1) / threads;
	size_t most = (size_t)sms * blocks_per_sm;
	if (most > cap)
		most = cap;
	return (unsigned)(blocks < 1 ? 1 : blocks < most ? blocks : most);
}

/* --- bits and values --- */

WD_HD float f32_of_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, 4);
	return f;
#endif
}

/* The value of a 16-bit format's code, exactly (every code fits a float). */
struct fmt_bf16 {
	WD_HD static float value(unsigned code) { return f32_of_bits((uint32_t)code << 16); }
	/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf, as lib/dtype.h's half_class */
	WD_HD static int cls(unsigned code)
	{
		if ((code & 0x7f80u) != 0x7f80u)
			return 0;
		return (code & 0x7fu) ? 1 : (code >> 15) ? 3 : 2;
	}
};

struct fmt_f16 {
	WD_HD static float value(unsigned code)
	{
		uint32_t sign = (uint32_t)(code & 0x8000u) << 16;
		unsigned exp = (code >> 10) & 0x1f, mant = code & 0x3ff;
		if (exp == 0)	/* zero or subnormal: mant x 2^-24, exact */
			return f32_of_bits(sign) + (sign ? -1.0f : 1.0f) * (float)mant * 5.9604644775390625e-8f;
		if (exp == 31)
			return f32_of_bits(sign | 0x7f800000u | ((uint32_t)mant << 13));
		return f32_of_bits(sign | ((uint32_t)(exp + 112) << 23) | ((uint32_t)mant << 13));
	}
	WD_HD static int cls(unsigned code)
	{
		if ((code & 0x7c00u) != 0x7c00u)
			return 0;
		return (code & 0x3ffu) ? 1 : (code >> 15) ? 3 : 2;
	}
};

/* Raw elements of each dtype (T), and their values as doubles (exact). */
struct load_f32 { typedef float T; WD_HD static double of(T v) { return v; } };
struct load_f64 { typedef double T; WD_HD static double of(T v) { return v; } };
struct load_f16 { typedef uint16_t T; WD_HD static double of(T v) { return fmt_f16::value(v); } };
struct load_bf16 { typedef uint16_t T; WD_HD static double of(T v) { return fmt_bf16::value(v); } };

/*
 * V consecutive elements from i on, as one 16-byte load when they are all
 * below end (i must then be a multiple of V and p 16-byte aligned: the
 * launch picks V = 1 otherwise), else one by one. Returns how many are
 * valid; the rest are zero.
 */
template <typename T, int V>
struct alignas(V * sizeof(T) >= 16 ? 16 : alignof(T)) vec { T v[V]; };

template <typename T, int V>
WD_HD int load_group(const T *p, size_t i, size_t end, T out[V])
{
	if (i + V <= end) {
		vec<T, V> t = *reinterpret_cast<const vec<T, V> *>(p + i);
		for (int k = 0; k < V; k++)
			out[k] = t.v[k];
		return V;
	}
	int valid = 0;
	for (int k = 0; k < V; k++) {
		out[k] = i + k < end ? p[i + k] : (T)0;
		valid += i + k < end;
	}
	return valid;
}

/* --- the 16-bit count --- */

/* A code word: the code itself, or an fp32 whose upper half is a bf16. */
template <typename W> struct code_of;
template <> struct code_of<uint16_t> { WD_HD static unsigned get(uint16_t w) { return w; } };
template <> struct code_of<uint32_t> { WD_HD static unsigned get(uint32_t w) { return w >> 16; } };

/*
 * Adds the warp's per-lane counts of NaN, +Inf and -Inf into cnt[0..2].
 * Every lane of the warp calls it.
 */
template <class X>
WD_HD void warp_count_add(X &x, unsigned nan, unsigned pinf, unsigned ninf,
			  unsigned long long *cnt)
{
	/* per-lane counts stay far below 2^32 / 32 for any tensor a GPU holds */
	nan = x.warp_sum(nan);
	pinf = x.warp_sum(pinf);
	ninf = x.warp_sum(ninf);
	if (x.lane() == 0) {
		if (nan)
			x.atomic_add(&cnt[0], (unsigned long long)nan);
		if (pinf)
			x.atomic_add(&cnt[1], (unsigned long long)pinf);
		if (ninf)
			x.atomic_add(&cnt[2], (unsigned long long)ninf);
	}
}

/*
 * Exact 65536-bin count of 16-bit codes (format F, words W holding them,
 * V words per load), and of their NaN, +Inf and -Inf into cnt[0..2].
 *
 * 65536 bins x 4 B do not fit one block's shared memory, so a cluster of
 * two blocks holds them, split by sign: block rank h owns the 32768 codes
 * whose sign bit is h, in its bins[] (128 KiB). Cluster c counts chunk c;
 * its 2048 threads each read V words at a time, once, and add each code
 * to the bins of the block that owns it, through distributed shared
 * memory. A warp whose 32 lanes hold the same code in a slot (a constant
 * or zero tensor) adds 32 once instead of contending 32 times on one bin.
 * Every thread of the cluster runs the same number of rounds, so that the
 * warp votes see whole warps.
 */
template <class X, class F, typename W, int V>
WD_HD void hist16_body(X &x, const W *in, size_t n, unsigned *bins,
		       unsigned long long *hist, unsigned long long *cnt)
{
	unsigned rank = x.cluster_rank();
	for (unsigned i = x.tid(); i < HIST_HALF; i += x.bdim())
		bins[i] = 0;
	x.cluster_sync();	/* both halves are zero before any add */
	/*
	 * This block's half is reached directly (shared-memory atomics), the
	 * other's through distributed shared memory. Two names, not an array:
	 * an indexed array would live in local memory.
	 */
	unsigned *peer = x.map_shared(bins, rank ^ 1);
	size_t begin = (size_t)x.cluster_id() * HIST_CHUNK;
	size_t end = begin + HIST_CHUNK < n ? begin + HIST_CHUNK : n;
	size_t threads = 2 * (size_t)x.bdim(), me = rank * (size_t)x.bdim() + x.tid();
	size_t groups = (end - begin + V - 1) / V, rounds = (groups + threads - 1) / threads;
	unsigned nan = 0, pinf = 0, ninf = 0;

	for (size_t r = 0; r < rounds; r++) {
		W w[V];
		int valid = load_group<W, V>(in, begin + (r * threads + me) * V, end, w);
		for (int k = 0; k < V; k++) {
			int mine = k < valid;
			unsigned code = mine ? code_of<W>::get(w[k]) : 0;
			int c = mine ? F::cls(code) : 0;
			nan += c == 1;	/* no array indexed by c: it would live in local memory */
			pinf += c == 2;
			ninf += c == 3;
			unsigned first = x.shfl0(code);
			if (x.all(mine && code == first)) {
				if (x.lane() == 0)
					x.atomic_add(&((first >> 15) == rank ? bins : peer)[first & 0x7fffu], 32u);
			} else if (mine) {
				x.atomic_add(&((code >> 15) == rank ? bins : peer)[code & 0x7fffu], 1u);
			}
		}
	}
	warp_count_add(x, nan, pinf, ninf, cnt);
	x.cluster_sync();	/* every add into this block's bins is done */
	for (unsigned i = x.tid(); i < HIST_HALF; i += x.bdim())
		if (bins[i])
			x.atomic_add(&hist[(rank << 15) | i], (unsigned long long)bins[i]);
}

/*
 * ORs the low halves of fp32 words into *low (zero: the tensor is upcast
 * bf16). Run only when the first 64 words' low halves are zero, as the
 * CPU engine checks: real fp32 data fails there.
 */
template <class X>
WD_HD void low_halves_body(X &x, const uint32_t *in, size_t n, unsigned long long *low)
{
	unsigned acc = 0;
	for (size_t i = x.gtid(); i < n; i += x.gthreads())
		acc |= in[i] & 0xffffu;
	acc = x.warp_or(acc);
	if (x.lane() == 0 && acc)
		x.atomic_or(low, (unsigned long long)acc);
}

/* 16-bit codes widened to floats, for sorting them (WD_PREP_FORCE_SORT). */
template <class X, class F>
WD_HD void widen16_body(X &x, const uint16_t *in, size_t n, float *out)
{
	for (size_t i = x.gtid(); i < n; i += x.gthreads())
		out[i] = F::value(in[i]);
}

/*
 * The finite range of n sorted values: ends[0] is its first index, ends[1]
 * its length; cnt[0..2] get the NaN, +Inf and -Inf at either end. One
 * thread: four binary searches, each for the end of a prefix on which a
 * class predicate holds.
 */
struct neg_nan { template <typename T> WD_HD static int is(T v) { return isnan(v) && signbit(v); } };
struct neg_nonfinite { template <typename T> WD_HD static int is(T v) { return !isfinite(v) && signbit(v); } };
struct below_pos_nonfinite { template <typename T> WD_HD static int is(T v) { return isfinite(v) || signbit(v); } };
struct below_pos_nan { template <typename T> WD_HD static int is(T v) { return !isnan(v) || signbit(v); } };

template <class P, typename T>
WD_HD size_t prefix_end(const T *s, size_t lo, size_t hi)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (P::is(s[mid]))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

template <typename T>
WD_HD void nonfinite_ends(const T *s, size_t n, unsigned long long *ends,
			  unsigned long long *cnt)
{
	size_t neg_nans = prefix_end<neg_nan>(s, 0, n);
	size_t lo = prefix_end<neg_nonfinite>(s, neg_nans, n);
	size_t hi = prefix_end<below_pos_nonfinite>(s, lo, n);
	size_t pos_nan = prefix_end<below_pos_nan>(s, hi, n);
	ends[0] = lo;
	ends[1] = hi - lo;
	cnt[0] = neg_nans + (n - pos_nan);
	cnt[1] = pos_nan - hi;
	cnt[2] = lo - neg_nans;
}

/* --- W1 --- */

/*
 * Equal sizes: partial sums of |a_i - b_i| over sorted values, V per load
 * (16 bytes; the launch picks V = 1 when a buffer is not 16-byte aligned).
 */
template <class X, typename TA, typename TB, int V>
WD_HD void w1_equal_body(X &x, const TA *a, const TB *b, size_t n, double *partial)
{
	double s = 0;
	size_t step = x.gthreads() * (size_t)V;

	for (size_t i = x.gtid() * (size_t)V; i < n; i += step) {
		TA va[V];
		TB vb[V];
		int got = load_group<TA, V>(a, i, n, va);
		load_group<TB, V>(b, i, n, vb);
		for (int k = 0; k < got; k++)
			s += fabs((double)va[k] - (double)vb[k]);
	}
	x.block_sum_out(s, partial);
}

/*
 * Any sizes: the CDF form over the merged order of a and b. Each thread
 * finds its start on the merge path by binary search, then walks
 * MERGE_ITEMS positions: after each, F = i/na and G = j/nb hold up to the
 * next merged value. Ties give zero-width steps, so their order is free.
 */
template <class X, typename TA, typename TB>
WD_HD void w1_merge_body(X &x, const TA *a, size_t na, const TB *b, size_t nb, double *partial)
{
	size_t total = na + nb;
	double s = 0;

	for (size_t d = x.gtid() * MERGE_ITEMS; d < total; d += x.gthreads() * MERGE_ITEMS) {
		size_t lo = d > nb ? d - nb : 0, hi = d < na ? d : na;
		while (lo < hi) {	/* first i with a[i] > b[d - i - 1] */
			size_t mid = (lo + hi) / 2;
			if ((double)a[mid] <= (double)b[d - mid - 1])
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t i = lo, j = d - lo;
		for (int k = 0; k < MERGE_ITEMS && i + j < total; k++) {
			double v;
			if (i < na && (j >= nb || (double)a[i] <= (double)b[j]))
				v = a[i++];
			else
				v = b[j++];
			if (i + j == total)
				break;	/* F = G = 1 from here on */
			double next = i >= na ? (double)b[j] : j >= nb ? (double)a[i]
				    : fmin((double)a[i], (double)b[j]);
			s += wd_cdf_diff(i, na, j, nb) * (next - v);
		}
	}
	x.block_sum_out(s, partial);
}

/*
 * Two counts of one 16-bit format: one block scans the finite codes in
 * value order (order[], with gap[] to the next code), summing |F - G|
 * times the gap. Each thread takes a run of codes; a block scan gives it
 * the counts below its run.
 */
template <class X>
WD_HD void w1_hist_scan_body(X &x, const unsigned long long *ha, unsigned long long na,
			     const unsigned long long *hb, unsigned long long nb,
			     const uint16_t *order, const double *gap, unsigned n_order,
			     double *out)
{
	unsigned per = (n_order + x.bdim() - 1) / x.bdim();
	unsigned j0 = x.tid() * per < n_order ? x.tid() * per : n_order;
	unsigned j1 = j0 + per < n_order ? j0 + per : n_order;
	unsigned long long la = 0, lb = 0;

	for (unsigned j = j0; j < j1; j++) {
		la += ha[order[j]];
		lb += hb[order[j]];
	}
	unsigned long long ca = x.block_exclusive_sum(la);
	unsigned long long cb = x.block_exclusive_sum(lb);
	double s = 0;
	for (unsigned j = j0; j < j1; j++) {
		ca += ha[order[j]];
		cb += hb[order[j]];
		if (j + 1 < n_order)
			s += wd_cdf_diff(ca, na, cb, nb) * gap[j];
	}
	x.block_sum_out(s, out);
}

/*
 * A count back to sorted floats, for W1 against a tensor prepared another
 * way. gathered[j] = hist[order[j]], the counts in value order; the host
 * scans them (cub::DeviceScan) into offset[], with offset[n_order] the
 * total. Each lane writes EXPAND_ITEMS outputs 32 apart, finding the code
 * of its first by binary search: a code of many copies (a tensor of zeros)
 * is spread over every thread, not left to one block.
 */
template <class X>
WD_HD void gather_counts_body(X &x, const unsigned long long *hist, const uint16_t *order,
			      unsigned n_order, unsigned long long *gathered)
{
	for (size_t j = x.gtid(); j <= n_order; j += x.gthreads())
		gathered[j] = j < n_order ? hist[order[j]] : 0;
}

template <class X, class F>
WD_HD void expand_body(X &x, const unsigned long long *offset, const uint16_t *order,
		       unsigned n_order, float *out)
{
	unsigned long long total = offset[n_order];
	/*
	 * A warp writes a tile of 32 x EXPAND_ITEMS consecutive outputs, lane l
	 * the outputs l, l + 32, ...: each store of the warp is coalesced.
	 */
	const unsigned long long tile = 32ull * EXPAND_ITEMS;
	unsigned long long warps = x.gthreads() / 32, warp = x.gtid() / 32;

	for (unsigned long long base = warp * tile; base < total; base += warps * tile) {
		unsigned long long o = base + x.lane();
		if (o >= total)
			continue;	/* no collective below */
		unsigned lo = 0, hi = n_order;	/* last j with offset[j] <= o */
		while (hi - lo > 1) {
			unsigned mid = lo + (hi - lo) / 2;
			if (offset[mid] <= o)
				lo = mid;
			else
				hi = mid;
		}
		unsigned j = lo;
		for (; o < base + tile && o < total; o += 32) {
			while (offset[j + 1] <= o)
				j++;
			out[o] = F::value(order[j]);
		}
	}
}

/* --- statistics --- */

/*
 * Summary of sorted finite values, shifted by the median m so that a large
 * mean does not cancel a small spread: per block, sum (x - m),
 * sum (x - m)^2 and the three sums of x^2 by magnitude (lib/sumsq.h, as
 * the CPU's l2) go to partial[SUMMARY_PARTIALS * block + 0..4].
 */
template <class X, typename T, int V>
WD_HD void summary_body(X &x, const T *v, size_t n, double *partial)
{
	double m = v[n / 2], s1 = 0, s2 = 0;
	struct wd_sumsq sq = { 0, 0, 0 };
	size_t step = x.gthreads() * (size_t)V;

	for (size_t i = x.gtid() * (size_t)V; i < n; i += step) {
		T t[V];
		int got = load_group<T, V>(v, i, n, t);
		for (int k = 0; k < got; k++) {
			double y = t[k], d = y - m;
			s1 += d;
			s2 += d * d;
			wd_sumsq_add(&sq, y);
		}
	}
	double sums[SUMMARY_PARTIALS] = { s1, s2, sq.sml, sq.med, sq.big };
	for (int k = 0; k < SUMMARY_PARTIALS; k++) {
		x.block_sum_out(sums[k], partial, SUMMARY_PARTIALS, k);
		x.sync();	/* the reduction's scratch is reused */
	}
}

/*
 * Element-wise statistics of a raw pair, in one pass: per block, max |d|,
 * sum d^2 and sum a^2 over positions where both are finite, and the counts
 * of compared and differing positions, to partial[5 * block + 0..4].
 * PAIR_UNROLL coalesced loads per thread are in flight at once.
 */
template <class X, class LA, class LB>
WD_HD void pair_stats_body(X &x, const typename LA::T *a, const typename LB::T *b, size_t n,
			   double *partial)
{
	double mx = 0, ncmp = 0, ndiff = 0;
	struct wd_sumsq dd = { 0, 0, 0 }, aa = { 0, 0, 0 };
	size_t tile = x.gthreads() * (size_t)PAIR_UNROLL;

	for (size_t base = (size_t)x.bid() * x.bdim() * PAIR_UNROLL + x.tid(); base < n; base += tile) {
		/* raw, as loaded: a register each for 32- and 16-bit types */
		typename LA::T ra[PAIR_UNROLL];
		typename LB::T rb[PAIR_UNROLL];
		int got = 0;
		for (int k = 0; k < PAIR_UNROLL; k++) {
			size_t i = base + (size_t)k * x.bdim();
			if (i < n) {
				ra[k] = a[i];
				rb[k] = b[i];
				got++;
			}
		}
		for (int k = 0; k < got; k++) {
			double p = LA::of(ra[k]), q = LB::of(rb[k]);
			if (isfinite(p) && isfinite(q)) {
				double d = fabs(p - q);
				ncmp += 1;
				ndiff += d != 0;
				mx = fmax(mx, d);
				wd_sumsq_add(&dd, d);
				wd_sumsq_add(&aa, p);
			} else if (!(p == q || (isnan(p) && isnan(q)))) {
				ndiff += 1;
			}
		}
	}
	double sums[PAIR_PARTIALS] = { mx, dd.sml, dd.med, dd.big, aa.sml, aa.med, aa.big, ncmp, ndiff };
	x.block_max_out(sums[0], partial, PAIR_PARTIALS, 0);
	x.sync();
	for (int k = 1; k < PAIR_PARTIALS; k++) {
		x.block_sum_out(sums[k], partial, PAIR_PARTIALS, k);
		x.sync();
	}
}

/* --- on the host: partials to results --- */

/*
 * The summary statistics from summary_body's partials (g blocks) and the
 * median m it shifted by: mean, std, and l2. Host code; in one place so
 * that the engine and the CPU test finish alike.
 */
static inline void summary_finish(const double *partial, unsigned g, double m, double n,
				  double *mean, double *std_out, double *l2)
{
	double s1 = 0, s2 = 0;
	struct wd_sumsq sq = { 0, 0, 0 };
	for (unsigned k = 0; k < g; k++) {
		const double *p = partial + (size_t)SUMMARY_PARTIALS * k;
		struct wd_sumsq bq = { p[2], p[3], p[4] };
		s1 += p[0];
		s2 += p[1];
		wd_sumsq_merge(&sq, &bq);
	}
	*mean = m + s1 / n;
	double var = (s2 - s1 * s1 / n) / n;
	*std_out = sqrt(var > 0 ? var : 0);
	*l2 = wd_sumsq_norm(&sq);
}

/*
 * Element-wise statistics from pair_stats_body's partials: max |d|,
 * relative L2, and the counts compared and differing (as lib/stats.c).
 */
static inline void pair_stats_finish(const double *partial, unsigned g, double *max_abs_diff,
				     double *rel_l2, uint64_t *n_compared, uint64_t *n_diff)
{
	double mx = 0, ncmp = 0, ndiff = 0;
	struct wd_sumsq dd = { 0, 0, 0 }, aa = { 0, 0, 0 };
	for (unsigned k = 0; k < g; k++) {
		const double *p = partial + (size_t)PAIR_PARTIALS * k;
		mx = fmax(mx, p[0]);
		struct wd_sumsq bd = { p[1], p[2], p[3] }, ba = { p[4], p[5], p[6] };
		wd_sumsq_merge(&dd, &bd);
		wd_sumsq_merge(&aa, &ba);
		ncmp += p[7];
		ndiff += p[8];
	}
	*n_compared = (uint64_t)ncmp;
	*n_diff = (uint64_t)ndiff;
	*max_abs_diff = ncmp > 0 ? mx : NAN;
	*rel_l2 = wd_sumsq_zero(&dd) ? (ncmp > 0 ? 0 : NAN)
		: !wd_sumsq_zero(&aa) ? wd_sumsq_ratio(&dd, &aa) : NAN;
}

/* The sum of a result's partials, in block order (the engine's sync). */
static inline double partials_sum(const double *partial, size_t count)
{
	double s = 0;
	for (size_t k = 0; k < count; k++)
		s += partial[k];
	return s;
}

#endif
