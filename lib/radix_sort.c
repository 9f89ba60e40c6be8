/*
 * radix_sort.c: least-significant-digit radix sort on 11-bit digits.
 *
 * 11-bit digits make three passes for 32-bit keys. Each pass is one read and
 * one scattered write of the array. The 32-bit scatter goes through
 * software write-combining: each bucket fills a cache-line buffer (2048 x 64
 * bytes, in L2) and whole lines are copied out, so the scatter costs about a
 * streaming pass instead of a cache miss per key.
 */
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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

/* Turns counts into start offsets; returns 1 when one bucket holds all n. */
static int radix_offsets(const uint64_t *count, size_t *off, size_t n)
{
	size_t sum = 0;
	for (unsigned b = 0; b < RADIX_BUCKETS; b++) {
		if (count[b] == n)
			return 1;
		off[b] = sum;
		sum += count[b];
	}
	return 0;
}

uint32_t *radix_sort32(uint32_t *keys, uint32_t *tmp, size_t n,
		       uint64_t hist[RADIX32_DIGITS][RADIX_BUCKETS], int to_bits)
{
	size_t off[RADIX32_DIGITS][RADIX_BUCKETS];
	int live[RADIX32_DIGITS], last = -1;
	uint32_t *src = keys, *dst = tmp;
	struct wc_line *wc = NULL;

	for (int d = 0; d < RADIX32_DIGITS; d++) {
		live[d] = n > 1 && !radix_offsets(hist[d], off[d], n);
		if (live[d])
			last = d;
	}
	for (int d = 0; d <= last; d++) {
		if (!live[d])
			continue;
		unsigned shift = (unsigned)d * RADIX_BITS;
		size_t *o = off[d];
		int bits = d == last && to_bits;
		if (!wc && n >= 4 * RADIX_BUCKETS * WC_KEYS)
			wc = aligned_alloc(64, RADIX_BUCKETS * sizeof(*wc));
		if (wc) {
			if (bits)
				scatter32_wc(src, dst, n, shift, o, wc, 1);
			else
				scatter32_wc(src, dst, n, shift, o, wc, 0);
		} else {	/* small arrays, or no memory for the line buffers */
			for (size_t i = 0; i < n; i++) {
				uint32_t k = src[i];
				dst[o[(k >> shift) & (RADIX_BUCKETS - 1)]++] =
					bits ? key32_to_bits(k) : k;
			}
		}
		uint32_t *t = src; src = dst; dst = t;
	}
	free(wc);
	if (last < 0 && to_bits)
		for (size_t i = 0; i < n; i++)
			src[i] = key32_to_bits(src[i]);
	return src;
}

uint64_t *radix_sort64(uint64_t *keys, uint64_t *tmp, size_t n,
		       uint64_t hist[RADIX64_DIGITS][RADIX_BUCKETS], int to_bits)
{
	size_t off[RADIX64_DIGITS][RADIX_BUCKETS];
	int live[RADIX64_DIGITS], last = -1;
	uint64_t *src = keys, *dst = tmp;

	for (int d = 0; d < RADIX64_DIGITS; d++) {
		live[d] = n > 1 && !radix_offsets(hist[d], off[d], n);
		if (live[d])
			last = d;
	}
	for (int d = 0; d <= last; d++) {
		if (!live[d])
			continue;
		unsigned shift = (unsigned)d * RADIX_BITS;
		size_t *o = off[d];
		for (size_t i = 0; i < n; i++) {
			uint64_t k = src[i];
			uint64_t v = (d == last && to_bits) ? key64_to_bits(k) : k;
			dst[o[(k >> shift) & (RADIX_BUCKETS - 1)]++] = v;
		}
		uint64_t *t = src; src = dst; dst = t;
	}
	if (last < 0 && to_bits)
		for (size_t i = 0; i < n; i++)
			src[i] = key64_to_bits(src[i]);
	return src;
}
