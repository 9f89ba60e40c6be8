/*
 * radix_sort_body.h: the one body of radix_sort32 and radix_sort64, which
 * radix_sort.c includes twice, with these defined (and undefines after):
 *   RS_NAME        the function's name
 *   RS_KEY         the key type, uint32_t or uint64_t
 *   RS_DIGITS      its digit count, RADIX32_DIGITS or RADIX64_DIGITS
 *   RS_TO_BITS     the key back to the float's bits (radix_sort.h)
 *   RS_SCATTER_WC  (wc, src, dst, n, shift, off, bits): a pass through
 *                  write-combining line buffers, 1 if it ran it, 0 if the
 *                  plain scatter is to run (always 0 for 64-bit keys)
 * No include guard: it is meant to be included more than once.
 */
RS_KEY *RS_NAME(RS_KEY *keys, RS_KEY *tmp, size_t n,
		uint64_t hist[RS_DIGITS][RADIX_BUCKETS], int to_bits)
{
	size_t off[RS_DIGITS][RADIX_BUCKETS];
	int live[RS_DIGITS], last = -1;
	RS_KEY *src = keys, *dst = tmp;
	struct wc_line *wc = NULL;	/* allocated by RS_SCATTER_WC, when used */

	for (int d = 0; d < RS_DIGITS; d++) {
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
		if (!RS_SCATTER_WC(&wc, src, dst, n, shift, o, bits)) {
			for (size_t i = 0; i < n; i++) {
				RS_KEY k = src[i];
				dst[o[(k >> shift) & (RADIX_BUCKETS - 1)]++] = bits ? RS_TO_BITS(k) : k;
			}
		}
		RS_KEY *t = src; src = dst; dst = t;
	}
	free(wc);
	if (last < 0 && to_bits)
		for (size_t i = 0; i < n; i++)
			src[i] = RS_TO_BITS(src[i]);
	return src;
}

#undef RS_NAME
#undef RS_KEY
#undef RS_DIGITS
#undef RS_TO_BITS
#undef RS_SCATTER_WC
