// sort_vq.cc: sort_vq.h over Highway's vqsort, compiled here for AVX2,
// AVX3 and AVX3_DL (and the baseline Highway requires, never called), and
// dispatched by this file, not by Highway (vq_code_chosen). The only C++ in the
// library: vqsort is a template library, instantiated for the two key
// types. It needs nothing at run time but libc: the functions it would
// take from libhwy and libhwy_contrib, which CPU this is, a seed for its
// pivot sampling and, in debug builds, the abort of a failed check, are
// this file's (cpu_targets, Fill24Bytes, Abort), so
// that libwdrift.so links neither. libhwy's constructor measured the
// clock in every process that loaded it, about 4 ms of each CLI command,
// the daemon's start, a training job's `import wdrift` (docs/performance.md).
// Compiled with clang++: GCC 12 copies vqsort's constant tables to the
// stack on every partition step (rep movsq), which made it 7x slower.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

// Which of Highway's x86 targets the CPU and the OS can run: the CPUID
// feature groups that Highway's own detection (hwy/targets.cc) requires
// of each, the AVX3_DL group as its newer releases have it (GFNI too),
// and the register state XCR0 says the OS saves. A target compiled with
// "-mavx512vbmi2" and run where the CPU lacks it dies of SIGILL: a bit
// too many asked for costs the faster code, one too few costs the process.
enum : uint64_t {
	F_SSE3 = 1u << 0, F_SSSE3 = 1u << 1, F_SSE41 = 1u << 2, F_SSE42 = 1u << 3,
	F_CLMUL = 1u << 4, F_AES = 1u << 5, F_AVX = 1u << 6, F_AVX2 = 1u << 7,
	F_F16C = 1u << 8, F_FMA = 1u << 9, F_LZCNT = 1u << 10, F_BMI = 1u << 11,
	F_BMI2 = 1u << 12, F_AVX512F = 1u << 13, F_AVX512VL = 1u << 14,
	F_AVX512CD = 1u << 15, F_AVX512DQ = 1u << 16, F_AVX512BW = 1u << 17,
	F_VNNI = 1u << 18, F_VPCLMULQDQ = 1u << 19, F_VBMI = 1u << 20,
	F_VBMI2 = 1u << 21, F_VAES = 1u << 22, F_POPCNTDQ = 1u << 23,
	F_BITALG = 1u << 24, F_GFNI = 1u << 25, F_OSXSAVE = 1u << 26,
};
static const uint64_t GROUP_AVX2 = F_SSE3 | F_SSSE3 | F_SSE41 | F_SSE42 | F_CLMUL | F_AES |
	F_AVX | F_AVX2 | F_F16C | F_FMA | F_LZCNT | F_BMI | F_BMI2;
static const uint64_t GROUP_AVX3 = GROUP_AVX2 | F_AVX512F | F_AVX512VL | F_AVX512CD |
	F_AVX512DQ | F_AVX512BW;
static const uint64_t GROUP_AVX3_DL = GROUP_AVX3 | F_VNNI | F_VPCLMULQDQ | F_VBMI | F_VBMI2 |
	F_VAES | F_POPCNTDQ | F_BITALG | F_GFNI;

static uint64_t cpu_features(void)
{
	unsigned a, b, c, d, max;
	uint64_t f = 0;

	if (!__get_cpuid(0, &max, &b, &c, &d) || max < 1)
		return 0;
	__cpuid_count(1, 0, a, b, c, d);
	f |= (c & 1u << 0 ? F_SSE3 : 0) | (c & 1u << 1 ? F_CLMUL : 0) | (c & 1u << 9 ? F_SSSE3 : 0) |
	     (c & 1u << 12 ? F_FMA : 0) | (c & 1u << 19 ? F_SSE41 : 0) | (c & 1u << 20 ? F_SSE42 : 0) |
	     (c & 1u << 25 ? F_AES : 0) | (c & 1u << 27 ? F_OSXSAVE : 0) | (c & 1u << 28 ? F_AVX : 0) |
	     (c & 1u << 29 ? F_F16C : 0);
	if (__get_cpuid(0x80000001u, &a, &b, &c, &d))
		f |= c & 1u << 5 ? F_LZCNT : 0;
	if (max >= 7) {
		__cpuid_count(7, 0, a, b, c, d);
		f |= (b & 1u << 3 ? F_BMI : 0) | (b & 1u << 5 ? F_AVX2 : 0) | (b & 1u << 8 ? F_BMI2 : 0) |
		     (b & 1u << 16 ? F_AVX512F : 0) | (b & 1u << 17 ? F_AVX512DQ : 0) |
		     (b & 1u << 28 ? F_AVX512CD : 0) | (b & 1u << 30 ? F_AVX512BW : 0) |
		     (b & 1u << 31 ? F_AVX512VL : 0);
		f |= (c & 1u << 1 ? F_VBMI : 0) | (c & 1u << 6 ? F_VBMI2 : 0) | (c & 1u << 8 ? F_GFNI : 0) |
		     (c & 1u << 9 ? F_VAES : 0) | (c & 1u << 10 ? F_VPCLMULQDQ : 0) |
		     (c & 1u << 11 ? F_VNNI : 0) | (c & 1u << 12 ? F_BITALG : 0) |
		     (c & 1u << 14 ? F_POPCNTDQ : 0);
	}
	return f;
}

// Highway's target bits (HWY_AVX2, ...) this machine can run.
static int64_t cpu_targets(void)
{
	uint64_t f = cpu_features();
	int64_t t = 0;

	if (!(f & F_OSXSAVE))	// no XGETBV: the OS saves no YMM or ZMM state
		return 0;
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	bool ymm = (lo & 0x6) == 0x6;		// XMM and YMM
	bool zmm = ymm && (lo & 0xe0) == 0xe0;	// opmask, ZMM 0-15 upper halves, ZMM 16-31
	if (ymm && (f & GROUP_AVX2) == GROUP_AVX2)
		t |= HWY_AVX2;
	if (zmm && (f & GROUP_AVX3) == GROUP_AVX3)
		t |= HWY_AVX3;
	if (zmm && (f & GROUP_AVX3_DL) == GROUP_AVX3_DL)
		t |= HWY_AVX3_DL;
	return t;
}

// Where vqsort's checks fail (HWY_ASSERT; debug and sanitizer builds
// compile the HWY_DASSERTs in too): libhwy's would print and abort, as this does.
void hwy::Abort(const char *file, int line, const char *format, ...)
{
	va_list ap;

	fprintf(stderr, "vqsort: abort at %s:%d: ", file, line);
	va_start(ap, format);
	vfprintf(stderr, format, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

// vqsort's pivot sampling draws from a generator seeded here (the one
// function of libhwy_contrib that vqsort-inl.h calls). Any seed gives the
// same sorted keys; it varies per call so that no input is slow on every
// run. Addresses (ASLR), the size and a counter, through splitmix64.
void hwy::Sorter::Fill24Bytes(const void *seed_heap, size_t seed_num, void *bytes)
{
	static uint64_t calls;
	uint64_t x = (uint64_t)(uintptr_t)seed_heap ^ (uint64_t)seed_num << 32 ^
		     (uint64_t)(uintptr_t)&x ^ __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	uint64_t out[3];

	for (int k = 0; k < 3; k++) {
		uint64_t z = (x += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		out[k] = z ^ (z >> 31);
	}
	memcpy(bytes, out, sizeof(out));
}

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

// Asked once: CPUID traps to a VM's hypervisor (15 us each, more than a
// small tensor's whole sort).
static const vq_code *vq_code_chosen(void)
{
	static int chosen = -1;
	int c = __atomic_load_n(&chosen, __ATOMIC_RELAXED);

	if (c < 0) {
		int64_t have = cpu_targets();
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
