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
#include <math.h>
#include <stddef.h>

#include <hwy/contrib/sort/vqsort.h>

extern "C" double vqsort_peer_w1(float *a, float *b, size_t n)
{
	static const hwy::Sorter sorter;
	double total = 0;

	sorter(a, n, hwy::SortAscending());
	sorter(b, n, hwy::SortAscending());
	for (size_t i = 0; i < n; i++)
		total += fabs((double)a[i] - (double)b[i]);
	return n ? total / (double)n : 0;
}
