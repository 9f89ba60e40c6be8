/*
 * kernels.cuh: the engine's CUDA kernels. Each is a thin __global__ wrapper
 * around a body in kernel_bodies.h, which the CPU test (tests/kernels)
 * runs through a SIMT emulator; dev_thread below is what a body sees on
 * the GPU. Included by the backend's files that launch kernels
 * (cuda/prepare_cuda.cu, cuda/w1_stats_cuda.cu) and by cuda/lab/.
 * Depends on CUDA and CUB only.
 *
 * Without relocatable device code each file that includes this one gets
 * its own copy of the kernels it uses: each template is instantiated by
 * one file only, and the kernels that are not templates are KERNEL_LOCAL
 * (static, so that two files' copies do not clash; maybe unused, since
 * each file launches only some of them).
 */
#ifndef WD_KERNELS_CUH
#define WD_KERNELS_CUH

#include <stdint.h>
#include <cooperative_groups.h>
#include <cub/cub.cuh>

#include "kernel_bodies.h"

#define KERNEL_LOCAL [[maybe_unused]] static

/*
 * One GPU thread, as a body sees it. THREADS is the block size the kernel
 * is launched with, for CUB's block reductions.
 */
template <int THREADS>
struct dev_thread {
	__device__ unsigned tid() const { return threadIdx.x; }
	__device__ unsigned bid() const { return blockIdx.x; }
	__device__ unsigned bdim() const { return blockDim.x; }
	__device__ unsigned lane() const { return threadIdx.x & 31; }
	__device__ size_t gtid() const { return blockIdx.x * (size_t)blockDim.x + threadIdx.x; }
	__device__ size_t gthreads() const { return (size_t)gridDim.x * blockDim.x; }

	__device__ void sync() const { __syncthreads(); }
	__device__ int all(int p) const { return __all_sync(0xffffffffu, p); }
	__device__ unsigned shfl0(unsigned v) const { return __shfl_sync(0xffffffffu, v, 0); }
	__device__ unsigned warp_sum(unsigned v) const { return __reduce_add_sync(0xffffffffu, v); }
	__device__ unsigned warp_or(unsigned v) const { return __reduce_or_sync(0xffffffffu, v); }

	__device__ void atomic_add(unsigned *p, unsigned v) const { atomicAdd(p, v); }
	__device__ void atomic_add(unsigned long long *p, unsigned long long v) const { atomicAdd(p, v); }
	__device__ void atomic_or(unsigned long long *p, unsigned long long v) const { atomicOr(p, v); }

	/* clusters: 1-D grids of clusters of consecutive blocks */
	__device__ unsigned cluster_rank() const { return cooperative_groups::this_cluster().block_rank(); }
	__device__ unsigned cluster_id() const
	{
		return blockIdx.x / cooperative_groups::this_cluster().dim_blocks().x;
	}
	__device__ void cluster_sync() const { cooperative_groups::this_cluster().sync(); }
	template <typename T>
	__device__ T *map_shared(T *p, unsigned rank) const
	{
		return cooperative_groups::this_cluster().map_shared_rank(p, rank);
	}

	/* thread 0 writes the block's sum (max) of v to out[stride * block + k] */
	__device__ void block_sum_out(double v, double *out, int stride = 1, int k = 0) const
	{
		typedef cub::BlockReduce<double, THREADS> R;
		__shared__ typename R::TempStorage tmp;
		double s = R(tmp).Sum(v);
		if (threadIdx.x == 0)
			out[(size_t)stride * blockIdx.x + k] = s;
	}
	__device__ void block_max_out(double v, double *out, int stride = 1, int k = 0) const
	{
		typedef cub::BlockReduce<double, THREADS> R;
		__shared__ typename R::TempStorage tmp;
		double s = R(tmp).Reduce(v, cuda::maximum<double>());
		if (threadIdx.x == 0)
			out[(size_t)stride * blockIdx.x + k] = s;
	}
	/* the sum of v over the threads below this one */
	__device__ unsigned long long block_exclusive_sum(unsigned long long v) const
	{
		typedef cub::BlockScan<unsigned long long, THREADS> S;
		__shared__ typename S::TempStorage tmp;
		unsigned long long r;
		S(tmp).ExclusiveSum(v, r);
		__syncthreads();	/* tmp is reused by the next call */
		return r;
	}
};

typedef dev_thread<HIST_THREADS> hist_thread;
typedef dev_thread<RED_THREADS> red_thread;
typedef dev_thread<SCAN_THREADS> scan_thread;
typedef dev_thread<256> plain_thread;

/* Launched in clusters of 2, HIST_HALF * 4 bytes of dynamic shared memory. */
template <class F, typename W, int V>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(HIST_THREADS)
hist16_kernel(const W *in, size_t n, unsigned long long *hist, unsigned long long *cnt)
{
	extern __shared__ unsigned bins[];
	hist_thread x;
	hist16_body<hist_thread, F, W, V>(x, in, n, bins, hist, cnt);
}

KERNEL_LOCAL __global__ void low_halves_kernel(const uint32_t *in, size_t n, unsigned long long *low)
{
	plain_thread x;
	low_halves_body(x, in, n, low);
}

template <class F>
__global__ void widen16_kernel(const uint16_t *in, size_t n, float *out)
{
	plain_thread x;
	widen16_body<plain_thread, F>(x, in, n, out);
}

/* One thread. */
template <typename T>
__global__ void nonfinite_ends_kernel(const T *sorted, size_t n, unsigned long long *ends,
				      unsigned long long *cnt)
{
	nonfinite_ends<T>(sorted, n, ends, cnt);
}

template <typename TA, typename TB, int V>
__global__ void __launch_bounds__(RED_THREADS, RED_BLOCKS_PER_SM)
w1_equal_kernel(const TA *a, const TB *b, size_t n, double *partial)
{
	red_thread x;
	w1_equal_body<red_thread, TA, TB, V>(x, a, b, n, partial);
}

template <typename TA, typename TB>
__global__ void __launch_bounds__(RED_THREADS, RED_BLOCKS_PER_SM)
w1_merge_kernel(const TA *a, size_t na, const TB *b, size_t nb, double *partial)
{
	red_thread x;
	w1_merge_body<red_thread, TA, TB>(x, a, na, b, nb, partial);
}

KERNEL_LOCAL __global__ void __launch_bounds__(SCAN_THREADS)
w1_hist_scan_kernel(const unsigned long long *ha, unsigned long long na,
		    const unsigned long long *hb, unsigned long long nb,
		    const uint16_t *order, const double *gap, unsigned n_order, double *out)
{
	scan_thread x;
	w1_hist_scan_body(x, ha, na, hb, nb, order, gap, n_order, out);
}

KERNEL_LOCAL __global__ void gather_counts_kernel(const unsigned long long *hist, const uint16_t *order,
				     unsigned n_order, unsigned long long *gathered)
{
	plain_thread x;
	gather_counts_body(x, hist, order, n_order, gathered);
}

template <class F>
__global__ void expand_kernel(const unsigned long long *offset, const uint16_t *order,
			      unsigned n_order, float *out)
{
	plain_thread x;
	expand_body<plain_thread, F>(x, offset, order, n_order, out);
}

template <typename T, int V>
__global__ void __launch_bounds__(RED_THREADS, RED_BLOCKS_PER_SM)
summary_kernel(const T *v, size_t n, double *partial)
{
	red_thread x;
	summary_body<red_thread, T, V>(x, v, n, partial);
}

/*
 * 4 blocks per SM (64 registers): at 8 (32 registers) every pair spilled
 * once rel_l2's sums of squares became three each (ptxas -v: 60 to 68
 * bytes), and a pair with an fp64 side spilled before that.
 */
template <class LA, class LB>
__global__ void __launch_bounds__(RED_THREADS, 4)
pair_stats_kernel(const typename LA::T *a, const typename LB::T *b, size_t n, double *partial)
{
	red_thread x;
	pair_stats_body<red_thread, LA, LB>(x, a, b, n, partial);
}

#endif
