/*
 * crc32.c: CRC-32 by carry-less multiplication (see crc32.h).
 *
 * The bytes are taken 64 at a time in four 128-bit lanes; each lane is
 * folded forward over the next 64 bytes by multiplying its two halves by
 * x^(512+64) and x^512 mod P (k1, k2) and adding (XOR) the new data. At
 * the end the lanes fold into one (k3, k4, 128 bits apart), the 128 bits
 * reduce to 64 and then 32 (k5), and a Barrett reduction (mu, P) gives
 * the remainder. Every constant is for the bit-reflected polynomial
 * 0xEDB88320, as zlib and gzip use; they are the ones of Intel's "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ" (2009) and the
 * Linux kernel's crc32-pclmul. Fewer than 64 bytes, and the last n % 16,
 * go to zlib. The test (test_crc32) checks every length to 4 KiB at every
 * alignment against zlib.
 */
#include <zlib.h>

#include "crc32.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define FOLD_MIN 64

/* The raw CRC state s (zlib's value inverted) over len bytes: len >= 64, a multiple of 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t fold(const unsigned char *p, size_t len, uint32_t s)
{
	const __m128i k2k1 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
	const __m128i k4k3 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
	const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);
	const __m128i mu_p = _mm_set_epi64x(0x1f7011641, 0x1db710641);
	const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
	__m128i x0 = _mm_loadu_si128((const __m128i *)p), x1 = _mm_loadu_si128((const __m128i *)(p + 16));
	__m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32)), x3 = _mm_loadu_si128((const __m128i *)(p + 48));

	x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)s));
	for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
#define FOLD(x, k, next) \
	x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)
		FOLD(x0, k2k1, _mm_loadu_si128((const __m128i *)p));
		FOLD(x1, k2k1, _mm_loadu_si128((const __m128i *)(p + 16)));
		FOLD(x2, k2k1, _mm_loadu_si128((const __m128i *)(p + 32)));
		FOLD(x3, k2k1, _mm_loadu_si128((const __m128i *)(p + 48)));
	}
	FOLD(x0, k4k3, x1);
	FOLD(x0, k4k3, x2);
	FOLD(x0, k4k3, x3);
	for (; len >= 16; p += 16, len -= 16)
		FOLD(x0, k4k3, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
	/* 128 bits to 64, with 32 zero bits appended */
	x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), _mm_clmulepi64_si128(k4k3, x0, 0x01));
	/* 64 to 32 */
	x1 = _mm_clmulepi64_si128(_mm_and_si128(x0, low32), k5, 0x00);
	x0 = _mm_xor_si128(_mm_srli_si128(x0, 4), x1);
	/* Barrett: the remainder mod P */
	x1 = _mm_clmulepi64_si128(_mm_and_si128(x0, low32), mu_p, 0x10);
	x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), mu_p, 0x00);
	return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x0, x1), 1);
}

/* -1: not asked yet; asked once (CPUID traps to a VM's hypervisor) */
static int cpu_folds = -1, use_fold = 1;

int wd_crc32_folds(void)
{
	int f = __atomic_load_n(&cpu_folds, __ATOMIC_RELAXED);

	if (f < 0) {
		__builtin_cpu_init();
		f = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
		__atomic_store_n(&cpu_folds, f, __ATOMIC_RELAXED);
	}
	return f && __atomic_load_n(&use_fold, __ATOMIC_RELAXED);
}
#else
#define FOLD_MIN SIZE_MAX
static int use_fold;
static uint32_t fold(const unsigned char *p, size_t len, uint32_t s)
{
	(void)p;
	(void)len;
	return s;
}

int wd_crc32_folds(void)
{
	return 0;
}
#endif

void wd_crc32_use(int f)
{
	__atomic_store_n(&use_fold, f != 0, __ATOMIC_RELAXED);
}

/* zlib's, whose length is a uInt: fed in pieces */
static uint32_t by_zlib(uint32_t crc, const unsigned char *p, size_t n)
{
	while (n > 0) {
		uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
		crc = (uint32_t)crc32(crc, p, chunk);
		p += chunk;
		n -= chunk;
	}
	return crc;
}

uint32_t wd_crc32(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;

	if (n >= FOLD_MIN && wd_crc32_folds()) {
		size_t bulk = n & ~(size_t)15;
		crc = ~fold(p, bulk, ~crc);
		p += bulk;
		n -= bulk;
	}
	return by_zlib(crc, p, n);
}

uint32_t wd_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	return (uint32_t)crc32_combine(crc_a, crc_b, (z_off_t)len_b);	/* z_off_t: 64-bit here */
}
