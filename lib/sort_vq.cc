// sort_vq.cc: sort_vq.h over Highway's vqsort, compiled here for AVX2,
// AVX3 and AVX3_DL (and the baseline Highway requires, never called), and
// dispatched by this file, not by Highway (vq_code_chosen). The only C++ in the
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

// The code each target compiled: the last that the CPU has and may use wins.
struct vq_code {
	const char *name;
	int64_t target;
	void (*sort32)(uint32_t *, size_t);
	void (*sort64)(uint64_t *, size_t);
};
static const vq_code codes[] = {
	{ "none", 0, nullptr, nullptr },
	{ "avx2", HWY_AVX2, hwy::N_AVX2::wd::Sort32, hwy::N_AVX2::wd::Sort64 },
#if HWY_TARGETS & HWY_AVX3
	{ "avx3", HWY_AVX3, hwy::N_AVX3::wd::Sort32, hwy::N_AVX3::wd::Sort64 },
#endif
#if HWY_TARGETS & HWY_AVX3_DL
	{ "avx3_dl", HWY_AVX3_DL, hwy::N_AVX3_DL::wd::Sort32, hwy::N_AVX3_DL::wd::Sort64 },
#endif
};

// Asked once: Highway 1.0.3 runs CPUID at every SupportedTargets() call,
// which a VM traps (15 us each, more than a small tensor's whole sort).
static const vq_code *vq_code_chosen(void)
{
	static int chosen = -1;
	int c = __atomic_load_n(&chosen, __ATOMIC_RELAXED);

	if (c < 0) {
		int64_t have = hwy::SupportedTargets();
		bool avx512_ok = !compress_store_slow();
		c = 0;
		for (int k = 1; k < (int)(sizeof(codes) / sizeof(codes[0])); k++)
			if ((have & codes[k].target) && (codes[k].target == HWY_AVX2 || avx512_ok))
				c = k;
		__atomic_store_n(&chosen, c, __ATOMIC_RELAXED);
	}
	return &codes[c];
}

extern "C" int vq_available(void)
{
	return vq_code_chosen()->sort32 != nullptr;
}

extern "C" const char *vq_target_name(void)
{
	return vq_code_chosen()->name;
}

extern "C" int vq_sort32(uint32_t *keys, size_t n)
{
	const vq_code *code = vq_code_chosen();

	if (!code->sort32)
		return -1;
	code->sort32(keys, n);
	return 0;
}

extern "C" int vq_sort64(uint64_t *keys, size_t n)
{
	const vq_code *code = vq_code_chosen();

	if (!code->sort64)
		return -1;
	code->sort64(keys, n);
	return 0;
}
#endif  // HWY_ONCE
