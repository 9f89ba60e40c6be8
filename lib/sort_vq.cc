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
#if HWY_MAJOR == 1 && HWY_MINOR == 0 && HWY_PATCH <= 4
	// Up to 1.0.4, vqsort uses a buffer of its own on the stack on
	// fixed-width targets, whatever is passed.
	Sort(SortTag<T>(), Order(), keys, n, static_cast<T *>(nullptr));
#else
	// From 1.0.5 the five-argument Sort needs a real buffer; the
	// four-argument one keeps its own (not built here: Debian 12 has 1.0.3).
	Sort(SortTag<T>(), Order(), keys, n);
#endif
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

// Asked once: Highway 1.0.3 runs CPUID at every SupportedTargets() call,
// which a VM traps (15 us each, more than a small tensor's whole sort).
extern "C" int vq_available(void)
{
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);

	if (h < 0) {
		h = (hwy::SupportedTargets() & HWY_AVX2) != 0;
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
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
