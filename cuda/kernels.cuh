/*
 * kernels.cuh: the CUDA kernels of the engine, with no host code. Included
 * by cuda/engine_cuda.cu (the backend) and cuda/lab/ (the kernel lab).
 * Depends on CUDA and CUB only.
 *
 * Conventions shared with the CPU engine (lib/radix_sort.h): a float's radix
 * key flips all bits of a negative value and the sign bit of a positive one,
 * so unsigned key order is value order. Non-finite values get the largest
 * key (all ones), which no finite value has, so they sort last and every
 * kernel reads only the first n_finite keys.
 *
 * Reductions write one partial per block; the host adds the partials in a
 * fixed order, so results do not depend on the order blocks finish in.
 */
#ifndef WD_KERNELS_CUH
#define WD_KERNELS_CUH

#include <stdint.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>

#define RED_THREADS 256	/* threads per block of the reduction kernels */
#define HIST_THREADS 1024
#define HIST_HALF 32768u	/* bins per block: one sign half of 65536 */
#define HIST_CHUNK (1u << 20)	/* elements per pair of histogram blocks */
#define MERGE_ITEMS 16	/* merged positions per thread */
#define SCAN_THREADS 1024

/* --- keys and values --- */

__device__ __forceinline__ uint32_t key_of(uint32_t u)
{
	return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}

__device__ __forceinline__ unsigned long long key_of(unsigned long long u)
{
	return u ^ ((unsigned long long)((long long)u >> 63) | 0x8000000000000000ull);
}

__device__ __forceinline__ double value_of(uint32_t k)
{
	uint32_t u = k ^ (((k >> 31) - 1) | 0x80000000u);
	return (double)__uint_as_float(u);
}

__device__ __forceinline__ double value_of(unsigned long long k)
{
	unsigned long long u = k ^ (((k >> 63) - 1) | 0x8000000000000000ull);
	return __longlong_as_double((long long)u);
}

/* Raw element loads, as doubles (exact for every dtype). */
struct load_f32 { typedef float T; __device__ static double at(const T *p, size_t i) { return p[i]; } };
struct load_f64 { typedef double T; __device__ static double at(const T *p, size_t i) { return p[i]; } };
struct load_f16 {
	typedef uint16_t T;
	__device__ static double at(const T *p, size_t i) { return __half2float(__ushort_as_half(p[i])); }
};
struct load_bf16 {
	typedef uint16_t T;
	__device__ static double at(const T *p, size_t i) { return __uint_as_float((uint32_t)p[i] << 16); }
};

/* Non-finite class of fp32 bits: 0 finite, 1 NaN, 2 +Inf, 3 -Inf. */
__device__ __forceinline__ int class_of(uint32_t u)
{
	if ((u & 0x7f800000u) != 0x7f800000u)
		return 0;
	return (u & 0x7fffffu) ? 1 : (u >> 31) ? 3 : 2;
}

__device__ __forceinline__ int class_of(unsigned long long u)
{
	if ((u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull)
		return 0;
	return (u & 0x000fffffffffffffull) ? 1 : (u >> 63) ? 3 : 2;
}

/* --- prepare: keys and counts --- */

/* Adds a warp's non-finite counts into cnt[0..2] (NaN, +Inf, -Inf). */
__device__ __forceinline__ void warp_count_add(unsigned nan, unsigned pinf, unsigned ninf,
					       unsigned long long *cnt)
{
	/* per-thread counts are far below 2^32 / 32 for any tensor a GPU holds */
	nan = __reduce_add_sync(0xffffffffu, nan);
	pinf = __reduce_add_sync(0xffffffffu, pinf);
	ninf = __reduce_add_sync(0xffffffffu, ninf);
	if ((threadIdx.x & 31) == 0) {
		if (nan)
			atomicAdd(&cnt[0], (unsigned long long)nan);
		if (pinf)
			atomicAdd(&cnt[1], (unsigned long long)pinf);
		if (ninf)
			atomicAdd(&cnt[2], (unsigned long long)ninf);
	}
}

/*
 * Writes each value's radix key (all ones for non-finite values) and counts
 * NaN, +Inf and -Inf into cnt[0..2]. For 32-bit data it also ORs every low
 * half into cnt[3]: zero means the data is upcast bf16. Every thread of the
 * (full) blocks reaches the warp reductions.
 */
template <typename U>
__global__ void classify_kernel(const U *in, U *keys, size_t n, unsigned long long *cnt)
{
	unsigned nan = 0, pinf = 0, ninf = 0, low = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		U u = in[i];
		int k = class_of(u);
		keys[i] = k ? (U)~(U)0 : key_of(u);
		nan += k == 1;	/* no array indexed by k: it would live in local memory */
		pinf += k == 2;
		ninf += k == 3;
		low |= (unsigned)(u & 0xffff);
	}
	warp_count_add(nan, pinf, ninf, cnt);
	low = __reduce_or_sync(0xffffffffu, low);
	if ((threadIdx.x & 31) == 0 && low)
		atomicOr(&cnt[3], (unsigned long long)low);
}

/*
 * 16-bit codes (bf16 or fp16) to fp32 radix keys, for sorting 16-bit data,
 * counting non-finite values into cnt[0..2] as classify_kernel does.
 */
template <typename L>
__global__ void keys_from16_kernel(const uint16_t *in, uint32_t *keys, size_t n,
				   unsigned long long *cnt)
{
	unsigned nan = 0, pinf = 0, ninf = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t u = __float_as_uint((float)L::at(in, i));
		int k = class_of(u);
		keys[i] = k ? 0xffffffffu : key_of(u);
		nan += k == 1;
		pinf += k == 2;
		ninf += k == 3;
	}
	warp_count_add(nan, pinf, ninf, cnt);
}

/*
 * Exact 65536-bin count of 16-bit codes. 65536 x 4 B does not fit one
 * block's shared memory, so the bins are split by sign: block 2c+h counts,
 * in chunk c, the codes whose sign bit is h, into 32768 shared bins (128
 * KiB). The two blocks of a chunk are adjacent, so the second read of the
 * chunk mostly hits L2. A warp whose 32 codes are all equal (a constant or
 * zero tensor) adds once instead of contending 32 times on one bin.
 * SHIFT 16 reads the codes from the upper halves of fp32 words (upcast bf16).
 */
template <typename T, int SHIFT>
__global__ void __launch_bounds__(HIST_THREADS)
hist16_kernel(const T *in, size_t n, unsigned long long *hist)
{
	extern __shared__ unsigned bins[];
	unsigned half = blockIdx.x & 1;
	size_t begin = (size_t)(blockIdx.x >> 1) * HIST_CHUNK;
	size_t end = begin + HIST_CHUNK < n ? begin + HIST_CHUNK : n;

	for (unsigned i = threadIdx.x; i < HIST_HALF; i += blockDim.x)
		bins[i] = 0;
	__syncthreads();
	/* Whole warps iterate together so that the warp votes below are safe. */
	size_t span = end - begin, rounds = (span + blockDim.x - 1) / blockDim.x;
	for (size_t r = 0; r < rounds; r++) {
		size_t i = begin + r * blockDim.x + threadIdx.x;
		int valid = i < end;
		unsigned code = valid ? (unsigned)(in[i] >> SHIFT) & 0xffffu : 0;
		int mine = valid && (code >> 15) == half;
		unsigned first = __shfl_sync(0xffffffffu, code, 0);
		if (__all_sync(0xffffffffu, mine && code == first)) {
			if ((threadIdx.x & 31) == 0)
				atomicAdd(&bins[first & 0x7fff], 32u);
		} else if (mine) {
			atomicAdd(&bins[code & 0x7fff], 1u);
		}
	}
	__syncthreads();
	for (unsigned i = threadIdx.x; i < HIST_HALF; i += blockDim.x)
		if (bins[i])
			atomicAdd(&hist[(half << 15) | i], (unsigned long long)bins[i]);
}

/* --- W1 --- */

__device__ __forceinline__ double cdf_diff(unsigned long long ca, unsigned long long na,
					   unsigned long long cb, unsigned long long nb)
{
	/* divide, as scipy does: n/n is exactly 1 (see lib/w1.c) */
	return fabs((double)ca / (double)na - (double)cb / (double)nb);
}

struct max_op {
	__device__ __forceinline__ double operator()(double x, double y) const { return fmax(x, y); }
};

/* Writes the block's sum of v to out[blockIdx.x]. */
template <int THREADS>
__device__ __forceinline__ void block_sum_out(double v, double *out)
{
	typedef cub::BlockReduce<double, THREADS> R;
	__shared__ typename R::TempStorage tmp;
	double s = R(tmp).Sum(v);
	if (threadIdx.x == 0)
		out[blockIdx.x] = s;
}

/* Equal sizes: partial sums of |a_i - b_i| over sorted keys. */
template <typename K>
__global__ void __launch_bounds__(RED_THREADS)
w1_equal_kernel(const K *a, const K *b, size_t n, double *partial)
{
	double s = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += fabs(value_of(a[i]) - value_of(b[i]));
	block_sum_out<RED_THREADS>(s, partial);
}

/*
 * Any sizes: the CDF form over the merged order of a and b. Each thread
 * finds its start on the merge path by binary search, then walks
 * MERGE_ITEMS positions: after each, F = i/na and G = j/nb hold up to the
 * next merged value. Ties give zero-width steps, so their order is free.
 */
template <typename KA, typename KB>
__global__ void __launch_bounds__(RED_THREADS)
w1_merge_kernel(const KA *a, size_t na, const KB *b, size_t nb, double *partial)
{
	size_t total = na + nb;
	double s = 0;

	for (size_t d = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * MERGE_ITEMS;
	     d < total; d += (size_t)gridDim.x * blockDim.x * MERGE_ITEMS) {
		size_t lo = d > nb ? d - nb : 0, hi = d < na ? d : na;
		while (lo < hi) {	/* first i with a[i] > b[d - i - 1] */
			size_t mid = (lo + hi) / 2;
			if (value_of(a[mid]) <= value_of(b[d - mid - 1]))
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t i = lo, j = d - lo;
		for (int k = 0; k < MERGE_ITEMS && i + j < total; k++) {
			double x;
			if (i < na && (j >= nb || value_of(a[i]) <= value_of(b[j])))
				x = value_of(a[i++]);
			else
				x = value_of(b[j++]);
			if (i + j == total)
				break;	/* F = G = 1 from here on */
			double y = i >= na ? value_of(b[j]) : j >= nb ? value_of(a[i])
				 : fmin(value_of(a[i]), value_of(b[j]));
			s += cdf_diff(i, na, j, nb) * (y - x);
		}
	}
	block_sum_out<RED_THREADS>(s, partial);
}

/*
 * Two counts of one 16-bit format: one block scans the finite codes in
 * value order (order[], with gap[] to the next code), summing |F - G| times
 * the gap. Each thread takes a run of codes; a block scan gives it the
 * counts below its run.
 */
__global__ void __launch_bounds__(SCAN_THREADS)
w1_hist_scan_kernel(const unsigned long long *ha, unsigned long long na,
		    const unsigned long long *hb, unsigned long long nb,
		    const uint16_t *order, const double *gap, unsigned n_order,
		    double *out)
{
	typedef cub::BlockScan<unsigned long long, SCAN_THREADS> Scan;
	__shared__ typename Scan::TempStorage scan_tmp;
	unsigned per = (n_order + SCAN_THREADS - 1) / SCAN_THREADS;
	unsigned j0 = threadIdx.x * per, j1 = min(j0 + per, n_order);
	unsigned long long la = 0, lb = 0, ca, cb;

	for (unsigned j = j0; j < j1; j++) {
		la += ha[order[j]];
		lb += hb[order[j]];
	}
	Scan(scan_tmp).ExclusiveSum(la, ca);
	__syncthreads();
	Scan(scan_tmp).ExclusiveSum(lb, cb);
	double s = 0;
	for (unsigned j = j0; j < j1; j++) {
		ca += ha[order[j]];
		cb += hb[order[j]];
		if (j + 1 < n_order)
			s += cdf_diff(ca, na, cb, nb) * gap[j];
	}
	__syncthreads();
	block_sum_out<SCAN_THREADS>(s, out);
}

/*
 * Counts back to sorted fp32 keys, for W1 against a tensor prepared another
 * way: block j writes count[order[j]] copies of that code's key from
 * offset[j] on.
 */
template <typename L>
__global__ void expand_hist_kernel(const unsigned long long *hist, const uint16_t *order,
				   const unsigned long long *offset, unsigned n_order,
				   uint32_t *keys)
{
	for (unsigned j = blockIdx.x; j < n_order; j += gridDim.x) {
		uint16_t code = order[j];
		unsigned long long c = hist[code], o = offset[j];
		uint32_t k = key_of(__float_as_uint((float)L::at(&code, 0)));
		for (unsigned long long t = threadIdx.x; t < c; t += blockDim.x)
			keys[o + t] = k;
	}
}

/* --- statistics --- */

/*
 * Summary of sorted finite keys, shifted by the median m so that a large
 * mean does not cancel a small spread: per block, sum (x - m), sum (x - m)^2
 * and sum x^2 go to partial[3 * block + 0..2].
 */
template <typename K>
__global__ void __launch_bounds__(RED_THREADS)
summary_kernel(const K *keys, size_t n, double *partial)
{
	typedef cub::BlockReduce<double, RED_THREADS> R;
	__shared__ typename R::TempStorage tmp;
	double m = value_of(keys[n / 2]), s1 = 0, s2 = 0, sq = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		double x = value_of(keys[i]), d = x - m;
		s1 += d;
		s2 += d * d;
		sq += x * x;
	}
	double v[3] = { s1, s2, sq };
	for (int k = 0; k < 3; k++) {
		double t = R(tmp).Sum(v[k]);
		if (threadIdx.x == 0)
			partial[3 * blockIdx.x + k] = t;
		__syncthreads();
	}
}

/*
 * Element-wise statistics of a raw pair, in one pass: per block, max |d|,
 * sum d^2 and sum a^2 over positions where both are finite, and the counts
 * of compared and differing positions, to partial[5 * block + 0..4].
 */
template <typename LA, typename LB>
__global__ void __launch_bounds__(RED_THREADS)
pair_stats_kernel(const typename LA::T *a, const typename LB::T *b, size_t n,
		  double *partial)
{
	typedef cub::BlockReduce<double, RED_THREADS> R;
	__shared__ typename R::TempStorage tmp;
	double mx = 0, dd = 0, aa = 0, ncmp = 0, ndiff = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		double x = LA::at(a, i), y = LB::at(b, i);
		if (isfinite(x) && isfinite(y)) {
			double d = fabs(x - y);
			ncmp += 1;
			ndiff += d != 0;
			mx = fmax(mx, d);
			dd += d * d;
			aa += x * x;
		} else if (!(x == y || (isnan(x) && isnan(y)))) {
			ndiff += 1;
		}
	}
	double v[5] = { mx, dd, aa, ncmp, ndiff };
	for (int k = 0; k < 5; k++) {
		double t = k == 0 ? R(tmp).Reduce(v[k], max_op()) : R(tmp).Sum(v[k]);
		if (threadIdx.x == 0)
			partial[5 * blockIdx.x + k] = t;
		__syncthreads();
	}
}

#endif
