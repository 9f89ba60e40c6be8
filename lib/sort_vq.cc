// sort_vq.cc: sort_vq.h over Highway's vqsort, compiled here for AVX2
// (and the baseline Highway requires, never called). The only C++ in the
// library: vqsort is a template library, instantiated for the two key
// types, and needs libhwy and libhwy_contrib (Debian's libhwy1) at run
// time. Compiled with clang++: GCC 12 copies vqsort's constant tables to
// the stack on every partition step (rep movsq), which made it 7x slower.
//
// Highway's foreach_target.h includes this file once per target that
// HWY_DISABLED_TARGETS (the Makefile) leaves; HWY_ONCE marks the last.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/sort_vq.cc"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>
#include <hwy/contrib/sort/traits-inl.h>
#include <hwy/contrib/sort/vqsort-inl.h>

HWY_BEFORE_NAMESPACE();
namespace hwy {
namespace HWY_NAMESPACE {
namespace wd {

template <typename T> static void SortAscending(T *keys, size_t n)
{
	using Order = detail::SharedTraits<detail::TraitsLane<detail::OrderAscending<T>>>;
	if (n < 2)	// Sort asserts num != 0 (debug and sanitizer builds); 1 is sorted
		return;
	// No buffer: on fixed-width targets vqsort keeps its own on the stack.
	Sort(SortTag<T>(), Order(), keys, n, static_cast<T *>(nullptr));
}

void Sort32(uint32_t *keys, size_t n)
{
	SortAscending(keys, n);
}

void Sort64(uint64_t *keys, size_t n)
{
	SortAscending(keys, n);
}

}  // namespace wd
}  // namespace HWY_NAMESPACE
}  // namespace hwy
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "sort_vq.h"

#if !HWY_ARCH_X86 || !(HWY_TARGETS & HWY_AVX2)
#error "sort_vq.cc is for x86-64 with AVX2 among Highway's targets: elsewhere, make VQSORT=0"
#endif

extern "C" int vq_available(void)
{
	return (hwy::SupportedTargets() & HWY_AVX2) != 0;
}

extern "C" int vq_sort32(uint32_t *keys, size_t n)
{
	if (!vq_available())
		return -1;
	hwy::N_AVX2::wd::Sort32(keys, n);
	return 0;
}

extern "C" int vq_sort64(uint64_t *keys, size_t n)
{
	if (!vq_available())
		return -1;
	hwy::N_AVX2::wd::Sort64(keys, n);
	return 0;
}
#endif  // HWY_ONCE
