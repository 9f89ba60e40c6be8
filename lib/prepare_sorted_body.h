/*
 * prepare_sorted_body.h: the one body of prepare_sorted_f32 and
 * prepare_sorted_f64, which prepare_cpu.c includes twice, with these
 * defined (and undefines after):
 *   PS_NAME      the function's name
 *   PS_BITS      the float's bits as an unsigned type, uint32_t or uint64_t
 *   PS_EXP       the exponent mask (all ones: Inf or NaN)
 *   PS_MANT      the mantissa mask (nonzero under PS_EXP: NaN)
 *   PS_KEY       the bits to radix key map (radix_sort.h)
 *   PS_DIGITS    the key's digit count
 *   PS_SORT      radix_sort32 or radix_sort64
 *   PS_STORE     WD_F32 or WD_F64, the type of the sorted values[]
 * One fused pass classifies each value, counts the non-finite ones, writes
 * the finite ones' keys and counts every digit's histogram; the sort then
 * needs no counting pass. No include guard: it is included more than once.
 */
static int PS_NAME(struct cpu_engine *c, const PS_BITS *src, uint64_t n,
		   struct wd_prepared *p)
{
	uint64_t (*hist)[RADIX_BUCKETS] = calloc(PS_DIGITS, sizeof(*hist));
	PS_BITS *keys = bigbuf_alloc(n * sizeof(PS_BITS) + sizeof(PS_BITS));
	PS_BITS *tmp = cpu_scratch(c, n * sizeof(PS_BITS) + sizeof(PS_BITS));
	uint64_t k = 0;

	if (!hist || !keys || !tmp) {
		free(hist);
		free(keys);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++) {
		PS_BITS u = src[i];
		if ((u & PS_EXP) == PS_EXP) {
			if (u & PS_MANT)
				p->nonfinite.nan++;
			else if (u >> (sizeof(PS_BITS) * 8 - 1))
				p->nonfinite.neginf++;
			else
				p->nonfinite.posinf++;
			continue;
		}
		PS_BITS key = PS_KEY(u);
		keys[k++] = key;
		for (int d = 0; d < PS_DIGITS; d++)
			hist[d][(key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
	}
	p->values = cpu_adopt(c, keys, n * sizeof(PS_BITS) + sizeof(PS_BITS),
			      PS_SORT(keys, tmp, k, hist, 1), k * sizeof(PS_BITS));
	p->n_finite = k;
	p->store = PS_STORE;
	free(hist);
	return 0;
}

#undef PS_NAME
#undef PS_BITS
#undef PS_EXP
#undef PS_MANT
#undef PS_KEY
#undef PS_DIGITS
#undef PS_SORT
#undef PS_STORE
