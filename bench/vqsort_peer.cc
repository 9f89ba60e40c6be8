// vqsort_peer.cc: Highway's vqsort as the engine's peer in `make bench`
// (docs/performance.md). The only C++ in the tree outside cuda/: a C
// function over hwy::Sorter, linked into wdrift-bench-vqsort alone, so that
// neither the library nor the other programs need libhwy_contrib.
//
// The peer is what a user of the best library sort would write for W1 of
// two equal-size fp32 tensors: sort each (in place, on copies made before
// the clock starts), then (1/n) sum |a_i - b_i| in double. The bench data
// holds no NaN, so vqsort's float order (which puts NaN last and does not
// split -0 from +0) gives the same W1 as the engine's key order.
//
// The best the library does on this machine is the peer, so it is timed on
// two dispatches: Highway's own choice, and AVX2 at most. On AMD Zen 4,
// Debian's Highway 1.0.3 picks AVX3_DL (AVX-512), whose partition stores
// with VCOMPRESSPS to memory: microcoded there (AMD's optimization guide
// for Zen 4: avoid the memory form of COMPRESS), 22 M keys/s against 166 M
// with AVX2 (docs/performance.md). Highway 1.1 has a Zen 4 target for it.
#include <math.h>
#include <stddef.h>

#include <thread>

#include <hwy/contrib/sort/vqsort.h>
#include <hwy/targets.h>

// Limits the dispatch to AVX2 and below (avx2_only), or lets Highway pick
// from everything the CPU has; returns the target the next sort uses.
extern "C" const char *vqsort_peer_target(int avx2_only)
{
	hwy::SetSupportedTargetsForTest(avx2_only ? HWY_AVX2 | HWY_SSE4 | HWY_SSSE3 | HWY_EMU128 : 0);
	int64_t t = hwy::SupportedTargets();
	return hwy::TargetName(t & -t);
}

// sum |a_i - b_i| over [lo, hi), in double
static double abs_diff_sum(const float *a, const float *b, size_t lo, size_t hi)
{
	double total = 0;

	for (size_t i = lo; i < hi; i++)
		total += fabs((double)a[i] - (double)b[i]);
	return total;
}

extern "C" double vqsort_peer_w1(float *a, float *b, size_t n)
{
	static const hwy::Sorter sorter;

	sorter(a, n, hwy::SortAscending());
	sorter(b, n, hwy::SortAscending());
	return n ? abs_diff_sum(a, b, 0, n) / (double)n : 0;
}

// The same on two threads, as that user would write it for two cores: each
// thread sorts one tensor (vqsort itself runs on one), then each sums half
// of |a_i - b_i|. Not the ideal peer (the one-thread time / 2), which
// assumes two sorts at once run as fast as one: this is what two cores that
// share one memory bus give the best library sort, measured beside the
// engine (docs/performance.md). A hwy::Sorter holds a buffer: one each.

extern "C" double vqsort_peer_w1_two_threads(float *a, float *b, size_t n)
{
	static const hwy::Sorter sorter_a, sorter_b;
	double upper = 0;

	std::thread other([&] { sorter_b(b, n, hwy::SortAscending()); });
	sorter_a(a, n, hwy::SortAscending());
	other.join();
	std::thread half([&] { upper = abs_diff_sum(a, b, n / 2, n); });
	double total = abs_diff_sum(a, b, 0, n / 2);
	half.join();
	return n ? (total + upper) / (double)n : 0;
}
