/*
 * cdf.h: |F(x) - G(x)|, the height of one step of W1's integral, from the
 * counts at or below x (ca of na values, cb of nb). One definition for the
 * CPU engine (lib/w1.c) and the CUDA kernel bodies.
 *
 * It is |ca*nb - cb*na| / (na*nb): the difference is exact, in 128-bit
 * integers, and rounded once, then divided once. Two divisions and a
 * subtraction, as scipy computes it, cancel when F and G are close (2e-5
 * relative error in W1 at n = 10^6, nearly equal distributions). Past
 * both maxima, ca = na and cb = nb, and the difference is exactly 0, even
 * across the 1e38-wide gaps at the top of the bf16 range.
 */
#ifndef WD_CDF_H
#define WD_CDF_H

#include "host_device.h"

WD_SHARED double wd_cdf_diff(unsigned long long ca, unsigned long long na,
			     unsigned long long cb, unsigned long long nb)
{
	unsigned __int128 x = (unsigned __int128)ca * nb, y = (unsigned __int128)cb * na;
	unsigned __int128 d = x > y ? x - y : y - x;
	/*
	 * Below 2^64 (counts below 2^32), the 64-bit conversion: rounded the
	 * same, and inline, where the 128-bit one is a call into libgcc, around
	 * which the CPU's scan kept its running sum in memory.
	 */
	double h = (d >> 64) ? (double)d : (double)(unsigned long long)d;
	return h / ((double)na * (double)nb);
}

#endif
