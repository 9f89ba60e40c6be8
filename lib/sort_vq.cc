// sort_vq.cc: sort_vq.h over Highway's vqsort, compiled here for AVX2,
// AVX3 and AVX3_DL (and the baseline Highway requires, never called), and
// dispatched by this file, not by Highway (vq_target). The only C++ in the
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

#include <cpuid.h>

// AMD family 19h (Zen 3, Zen 4): of these only Zen 4 has AVX-512, and it
// runs the memory form of VCOMPRESS, with which vqsort's AVX-512 code
// partitions, in microcode (22 M keys/s against 166 M on AVX2). Zen 5
// (1Ah) and Intel's AVX-512 CPUs do not: there AVX-512 is the faster.
static bool compress_store_slow(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth"enticAMD */ ||
	    !__get_cpuid(1, &a, &b, &c, &d))
		return false;
	unsigned family = (a >> 8) & 0xf;
	if (family == 0xf)
		family += (a >> 20) & 0xff;
	return family == 0x19;
}

enum vq_target { VQ_NONE, VQ_AVX2, VQ_AVX3, VQ_AVX3_DL };

// Asked once: Highway 1.0.3 runs CPUID at every SupportedTargets() call,
// which a VM traps (15 us each, more than a small tensor's whole sort).
static int vq_target(void)
{
	static int target = -1;
	int t = __atomic_load_n(&target, __ATOMIC_RELAXED);

	if (t < 0) {
		int64_t have = hwy::SupportedTargets();
		t = (have & HWY_AVX2) ? VQ_AVX2 : VQ_NONE;
		if (!compress_store_slow()) {
#if HWY_TARGETS & HWY_AVX3
			if (have & HWY_AVX3)
				t = VQ_AVX3;
#endif
#if HWY_TARGETS & HWY_AVX3_DL
			if (have & HWY_AVX3_DL)
				t = VQ_AVX3_DL;
#endif
		}
		__atomic_store_n(&target, t, __ATOMIC_RELAXED);
	}
	return t;
}

extern "C" int vq_available(void)
{
	return vq_target() != VQ_NONE;
}

extern "C" const char *vq_target_name(void)
{
	static const char *const names[] = { "none", "avx2", "avx3", "avx3_dl" };
	return names[vq_target()];
}

extern "C" int vq_sort32(uint32_t *keys, size_t n)
{
	switch (vq_target()) {
#if HWY_TARGETS & HWY_AVX3_DL
	case VQ_AVX3_DL: hwy::N_AVX3_DL::wd::Sort32(keys, n); return 0;
#endif
#if HWY_TARGETS & HWY_AVX3
	case VQ_AVX3: hwy::N_AVX3::wd::Sort32(keys, n); return 0;
#endif
	case VQ_AVX2: hwy::N_AVX2::wd::Sort32(keys, n); return 0;
	default: return -1;
	}
}

extern "C" int vq_sort64(uint64_t *keys, size_t n)
{
	switch (vq_target()) {
#if HWY_TARGETS & HWY_AVX3_DL
	case VQ_AVX3_DL: hwy::N_AVX3_DL::wd::Sort64(keys, n); return 0;
#endif
#if HWY_TARGETS & HWY_AVX3
	case VQ_AVX3: hwy::N_AVX3::wd::Sort64(keys, n); return 0;
#endif
	case VQ_AVX2: hwy::N_AVX2::wd::Sort64(keys, n); return 0;
	default: return -1;
	}
}
#endif  // HWY_ONCE
