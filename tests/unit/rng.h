/*
 * rng.h: the tests' random numbers: xorshift64, so that a failure shows
 * the same data again, and a rough normal scaled like weights. A test
 * that wants other data sets rng_state first.
 */
#ifndef WD_TEST_RNG_H
#define WD_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Roughly normal (a sum of four uniforms), times scale. */
static inline double rng_normal(double scale)
{
	double s = 0;
	for (int i = 0; i < 4; i++)
		s += (double)(rng_next() >> 11) / 9007199254740992.0 - 0.5;
	return s * scale;
}

#endif
