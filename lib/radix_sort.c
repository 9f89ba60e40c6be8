/*
 * radix_sort.c: least-significant-digit radix sort on 11-bit digits.
 *
 * 11-bit digits make three passes for 32-bit keys; 2048 buckets of write
 * cursors still fit in L1. Each pass is one read and one scattered write of
 * the array, so the sort costs about 3 (or 6) streaming passes.
 */
#include "radix_sort.h"

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
		if (d == last && to_bits) {
			for (size_t i = 0; i < n; i++) {
				uint32_t k = src[i];
				dst[o[(k >> shift) & (RADIX_BUCKETS - 1)]++] = key32_to_bits(k);
			}
		} else {
			for (size_t i = 0; i < n; i++) {
				uint32_t k = src[i];
				dst[o[(k >> shift) & (RADIX_BUCKETS - 1)]++] = k;
			}
		}
		uint32_t *t = src; src = dst; dst = t;
	}
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
