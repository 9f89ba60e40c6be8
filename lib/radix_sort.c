/*
 * radix_sort.c: least-significant-digit radix sort on 11-bit digits.
 *
 * 11-bit digits make three passes for 32-bit keys. Each pass is one read and
 * one scattered write of the array. The 32-bit scatter goes through
 * software write-combining: each bucket fills a cache-line buffer (2048 x 64
 * bytes, in L2) and whole lines are copied out, so the scatter costs about a
 * streaming pass instead of a cache miss per key. The 32- and 64-bit sorts
 * are one body (radix_sort_body.h), included twice.
 *
 * With more than one thread each pass is split: every part counts the
 * digit over its range, the offsets are laid out bucket by bucket and
 * part by part in that order, and every part scatters its range with its
 * own line buffers. A part's first and last line of a bucket may be
 * shared with its neighbour's; those are written with plain stores of its
 * own keys only, and only whole lines of its own go out non-temporal.
 */
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "pool.h"
#include "radix_sort.h"

#define WC_KEYS 16	/* 32-bit keys per 64-byte line */

struct wc_line {
	uint32_t v[WC_KEYS];
} __attribute__((aligned(64)));

/*
 * Copies keys [from, to) of a bucket's line buffer out to dst. A whole,
 * aligned line goes out with non-temporal stores: the destination is not
 * read first (no read-for-ownership), which saves a third of the traffic.
 */
static inline void wc_flush(uint32_t *dst, const struct wc_line *l, size_t from, size_t to)
{
#ifdef __SSE2__
	if (to - from == WC_KEYS && !((uintptr_t)(dst + from) & 63)) {
		__m128i *d = (__m128i *)(dst + from);
		const __m128i *s = (const __m128i *)l->v;
		_mm_stream_si128(d, _mm_load_si128(s));
		_mm_stream_si128(d + 1, _mm_load_si128(s + 1));
		_mm_stream_si128(d + 2, _mm_load_si128(s + 2));
		_mm_stream_si128(d + 3, _mm_load_si128(s + 3));
		return;
	}
#endif
	if (to - from == WC_KEYS)
		memcpy(dst + from, l->v, sizeof(l->v));
	else
		memcpy(dst + from, &l->v[from % WC_KEYS], (to - from) * sizeof(uint32_t));
}

/*
 * One scatter pass through the line buffers. off[b] is where bucket b's next
 * key goes; a bucket's first line may start mid-line, so flushes never reach
 * below the bucket's start.
 */
static void scatter32_wc(const uint32_t *src, uint32_t *dst, size_t n,
			 unsigned shift, size_t *off, struct wc_line *wc,
			 int to_bits)
{
	size_t start[RADIX_BUCKETS];

	memcpy(start, off, sizeof(start));
	for (size_t i = 0; i < n; i++) {
		uint32_t k = src[i];
		unsigned b = (k >> shift) & (RADIX_BUCKETS - 1);
		size_t o = off[b]++;
		wc[b].v[o % WC_KEYS] = to_bits ? key32_to_bits(k) : k;
		if (o % WC_KEYS == WC_KEYS - 1) {
			size_t line = o - (WC_KEYS - 1);
			wc_flush(dst, &wc[b], line < start[b] ? start[b] : line, o + 1);
		}
	}
#ifdef __SSE2__
	_mm_sfence();	/* order the streamed lines before anyone reads dst */
#endif
	for (unsigned b = 0; b < RADIX_BUCKETS; b++) {
		size_t line = off[b] - off[b] % WC_KEYS;
		size_t from = line < start[b] ? start[b] : line;
		if (from < off[b])
			wc_flush(dst, &wc[b], from, off[b]);
	}
}

/* 1 when one bucket holds all n keys: the digit orders nothing. */
static int radix_trivial(const uint64_t *count, size_t n)
{
	for (unsigned b = 0; b < RADIX_BUCKETS; b++)
		if (count[b])
			return count[b] == n;
	return 1;
}

/*
 * A 32-bit pass through the line buffers, for arrays big enough that the
 * plain scatter would miss the cache on every key. Allocates the buffers
 * at the first such pass (*wc, freed by the caller). Returns 0 when the
 * plain scatter is to run instead: a small array, or no memory for them.
 */
static int scatter32_big(struct wc_line **wc, const uint32_t *src, uint32_t *dst, size_t n,
			 unsigned shift, size_t *off, int bits)
{
	if (!*wc && n >= 4 * RADIX_BUCKETS * WC_KEYS)
		*wc = aligned_alloc(64, RADIX_BUCKETS * sizeof(**wc));
	if (!*wc)
		return 0;
	/* constant last arguments, so that each call is specialised */
	if (bits)
		scatter32_wc(src, dst, n, shift, off, *wc, 1);
	else
		scatter32_wc(src, dst, n, shift, off, *wc, 0);
	return 1;
}

#define RS_NAME radix_sort32
#define RS_(x) x##32
#define RS_KEY uint32_t
#define RS_DIGITS RADIX32_DIGITS
#define RS_TO_BITS key32_to_bits
#define RS_SCATTER_WC scatter32_big
#include "radix_sort_body.h"

/* 64-bit keys: the plain scatter only (line buffers would hold 8 keys). */
#define RS_NAME radix_sort64
#define RS_(x) x##64
#define RS_KEY uint64_t
#define RS_DIGITS RADIX64_DIGITS
#define RS_TO_BITS key64_to_bits
#define RS_SCATTER_WC(wc, src, dst, n, shift, off, bits) 0
#include "radix_sort_body.h"
