/*
 * test_crc32.c: wd_crc32 (lib/crc32.c) is zlib's crc32() on every input:
 * every length from 0 to 4 KiB at every alignment in a 16-byte line, from
 * several starting values, chained over two calls split anywhere, and a
 * 64 MiB buffer; with the carry-less fold and with zlib's code
 * (wd_crc32_use), which must agree; the check value of "123456789".
 * wd_crc32_combine is zlib's crc32_combine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "crc32.h"
#include "harness.h"
#include "rng.h"

#define MAXLEN 4096

static uint32_t zlib_crc(uint32_t crc, const unsigned char *p, size_t n)
{
	return (uint32_t)crc32(crc, p, (uInt)n);
}

/* Every length and alignment from start: the first mismatch in *len and *off, or 0. */
static int sweep(const unsigned char *buf, uint32_t start, size_t *len, size_t *off)
{
	for (size_t o = 0; o < 16; o++)
		for (size_t n = 0; n <= MAXLEN; n++)
			if (wd_crc32(start, buf + o, n) != zlib_crc(start, buf + o, n)) {
				*len = n;
				*off = o;
				return -1;
			}
	return 0;
}

int main(void)
{
	unsigned char *buf = malloc(MAXLEN + 64);
	size_t big = (size_t)64 << 20, len = 0, off = 0;
	unsigned char *huge = malloc(big);

	for (size_t i = 0; i < MAXLEN + 64; i++)
		buf[i] = (unsigned char)rng_next();
	for (size_t i = 0; i < big; i++)
		huge[i] = (unsigned char)(i * 2654435761u >> 13);
	int folds = wd_crc32_folds();
	printf("# the carry-less fold: %s\n", folds ? "used (this CPU has PCLMULQDQ)" : "not on this CPU: zlib's code only");

	for (int use = 1; use >= 0; use--) {
		wd_crc32_use(use);
		const char *how = wd_crc32_folds() ? "folded" : "zlib's";
		CHECK(wd_crc32_folds() == (use && folds), "%s: wd_crc32_use(%d) picks it", how, use);
		CHECK(wd_crc32(0, "123456789", 9) == 0xcbf43926u && wd_crc32(0, NULL, 0) == 0,
		      "%s: the check value of '123456789', and nothing is 0", how);
		uint32_t starts[] = { 0, 0xffffffffu, 0x12345678u };
		for (size_t k = 0; k < 3; k++)
			CHECK(sweep(buf, starts[k], &len, &off) == 0,
			      "%s: from 0x%08x, every length 0..%d at every alignment is zlib's (first "
			      "mismatch: %zu bytes at +%zu)", how, starts[k], MAXLEN, len, off);
		int chained = 1;
		for (size_t cut = 0; cut <= 600; cut++) {
			uint32_t whole = zlib_crc(0, buf + 3, 600);
			if (wd_crc32(wd_crc32(0, buf + 3, cut), buf + 3 + cut, 600 - cut) != whole)
				chained = 0;
		}
		CHECK(chained, "%s: two calls split anywhere in 600 bytes give the whole's", how);
		CHECK(wd_crc32(7, huge, big) == zlib_crc(7, huge, big), "%s: 64 MiB is zlib's", how);
	}
	wd_crc32_use(1);
	uint32_t a = zlib_crc(0, buf, 1000), b = zlib_crc(0, buf + 1000, 3000);
	CHECK(wd_crc32_combine(a, b, 3000) == zlib_crc(0, buf, 4000), "combine: A then B from theirs");
	free(buf);
	free(huge);
	return tap_done();
}
