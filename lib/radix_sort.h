/*
 * radix_sort.h: LSD radix sort of 32- and 64-bit keys, and the order-keeping
 * maps from IEEE floats to unsigned keys. Internal; libc only.
 *
 * The key map flips every bit of a negative float and only the sign bit of a
 * positive one, so unsigned key order is value order: -Inf < ... < -0 < +0 <
 * ... < +Inf. -0 and +0 get adjacent keys and compare equal as values.
 */
#ifndef WD_RADIX_SORT_H
#define WD_RADIX_SORT_H

#include <stddef.h>
#include <stdint.h>

#ifndef RADIX_BITS
#define RADIX_BITS 11
#endif
#define RADIX_BUCKETS (1u << RADIX_BITS)
#define RADIX32_DIGITS ((32 + RADIX_BITS - 1) / RADIX_BITS)
#define RADIX64_DIGITS ((64 + RADIX_BITS - 1) / RADIX_BITS)

static inline uint32_t key32_from_bits(uint32_t u)
{
	return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}

static inline uint32_t key32_to_bits(uint32_t k)
{
	return k ^ (((k >> 31) - 1) | 0x80000000u);
}

static inline uint64_t key64_from_bits(uint64_t u)
{
	return u ^ ((uint64_t)((int64_t)u >> 63) | 0x8000000000000000ull);
}

static inline uint64_t key64_to_bits(uint64_t k)
{
	return k ^ (((k >> 63) - 1) | 0x8000000000000000ull);
}

struct wd_pool;

/*
 * How a sort is split between threads: parts contiguous ranges of the
 * keys, [start[i], start[i + 1]), and each part's digit counts over its
 * range, hist[i * DIGITS + d][b]: how many keys of part i have value b in
 * digit d (the caller counts them while it writes the keys, saving a
 * pass). One part is the single-thread sort; pool may then be NULL.
 */
struct radix_split {
	struct wd_pool *pool;
	int parts;
	const size_t *start;
	uint64_t (*hist)[RADIX_BUCKETS];
};

/*
 * Sorts n keys ascending, stable, each pass split between the parts: a
 * part scatters its range of the pass's input to the offsets that the
 * counts of the parts before it leave free, so the result is the one
 * sorted array whatever the split. Digits where every key agrees are
 * skipped. If to_bits is set, the last pass writes the floats' bits back
 * instead of keys. Returns the buffer holding the result, keys or tmp (the
 * other is garbage), or NULL when its per-part memory could not be had.
 */
uint32_t *radix_sort32(uint32_t *keys, uint32_t *tmp, size_t n, const struct radix_split *s,
		       int to_bits);
uint64_t *radix_sort64(uint64_t *keys, uint64_t *tmp, size_t n, const struct radix_split *s,
		       int to_bits);

#endif
