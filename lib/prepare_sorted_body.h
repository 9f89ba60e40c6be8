/*
 * prepare_sorted_body.h: the one body of prepare_sorted_f32 and
 * prepare_sorted_f64, which prepare_cpu.c includes twice, with these
 * defined (and undefines after):
 *   PS_NAME      the function's name
 *   PS_(x)       x with the type appended, for its helpers' names
 *   PS_BITS      the float's bits as an unsigned type, uint32_t or uint64_t
 *   PS_EXP       the exponent mask (all ones: Inf or NaN)
 *   PS_MANT      the mantissa mask (nonzero under PS_EXP: NaN)
 *   PS_KEY       the bits to radix key map (radix_sort.h)
 *   PS_DIGITS    the key's digit count
 *   PS_SORT      radix_sort32 or radix_sort64
 *   PS_STORE     WD_F32 or WD_F64, the type of the sorted values[]
 * One fused pass classifies each value, counts the non-finite ones, writes
 * the finite ones' keys and counts every digit's histogram; the sort then
 * needs no counting pass for its first digit. Split between threads, each
 * part does this for its slice of the input, writing its keys from the
 * slice's own start; the slices are then closed up (only when some value
 * was not finite) and the sort's first pass takes them as its ranges.
 * No include guard: it is included more than once.
 */
struct PS_(job) {
	const PS_BITS *src;
	PS_BITS *keys;
	uint64_t n;
	uint64_t *k;			/* per part: finite keys written */
	struct wd_nonfinite *nf;	/* per part */
	uint64_t (*hist)[RADIX_BUCKETS];	/* part i's digits: rows i * PS_DIGITS + d */
};

static inline uint64_t PS_(slice)(uint64_t n, int i, int parts)
{
	return (uint64_t)((unsigned __int128)n * (unsigned)i / (unsigned)parts);
}

static void PS_(classify_part)(void *ctx, int i, int parts)
{
	const struct PS_(job) *j = ctx;
	uint64_t from = PS_(slice)(j->n, i, parts), to = PS_(slice)(j->n, i + 1, parts);
	const PS_BITS *src = j->src;
	PS_BITS *keys = j->keys + from;
	uint64_t (*hist)[RADIX_BUCKETS] = j->hist + (size_t)i * PS_DIGITS;
	struct wd_nonfinite nf = { 0, 0, 0 };
	uint64_t k = 0;

	for (uint64_t x = from; x < to; x++) {
		PS_BITS u = src[x];
		if ((u & PS_EXP) == PS_EXP) {
			if (u & PS_MANT)
				nf.nan++;
			else if (u >> (sizeof(PS_BITS) * 8 - 1))
				nf.neginf++;
			else
				nf.posinf++;
			continue;
		}
		PS_BITS key = PS_KEY(u);
		keys[k++] = key;
		for (int d = 0; d < PS_DIGITS; d++)
			hist[d][(key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
	}
	j->k[i] = k;
	j->nf[i] = nf;
}

static int PS_NAME(struct cpu_engine *c, const PS_BITS *src, uint64_t n,
		   struct wd_prepared *p)
{
	int parts = cpu_parts(c, n);
	uint64_t (*hist)[RADIX_BUCKETS] = calloc((size_t)parts * PS_DIGITS, sizeof(*hist));
	size_t *start = malloc(((size_t)parts + 1) * sizeof(*start));
	uint64_t *k = calloc((size_t)parts, sizeof(*k));
	struct wd_nonfinite *nf = calloc((size_t)parts, sizeof(*nf));
	PS_BITS *keys = bigbuf_alloc(n * sizeof(PS_BITS) + sizeof(PS_BITS));
	PS_BITS *tmp = cpu_scratch(c, n * sizeof(PS_BITS) + sizeof(PS_BITS));
	PS_BITS *sorted = NULL;
	uint64_t total = 0;

	if (hist && start && k && nf && keys && tmp) {
		struct PS_(job) j = { src, keys, n, k, nf, hist };
		pool_run(parts > 1 ? c->pool : NULL, parts, PS_(classify_part), &j);
		for (int i = 0; i < parts; i++) {
			uint64_t from = PS_(slice)(n, i, parts);
			if (from != total && k[i])	/* values before it were not finite */
				memmove(keys + total, keys + from, k[i] * sizeof(PS_BITS));
			start[i] = total;
			total += k[i];
			p->nonfinite.nan += nf[i].nan;
			p->nonfinite.posinf += nf[i].posinf;
			p->nonfinite.neginf += nf[i].neginf;
		}
		start[parts] = total;
		struct radix_split rs = { c->pool, parts, start, hist };
		sorted = PS_SORT(keys, tmp, total, &rs, 1);
	}
	free(hist);
	free(start);
	free(k);
	free(nf);
	if (!sorted) {
		free(keys);
		return -ENOMEM;
	}
	p->values = cpu_adopt(c, keys, n * sizeof(PS_BITS) + sizeof(PS_BITS), sorted,
			      total * sizeof(PS_BITS));
	p->n_finite = total;
	p->store = PS_STORE;
	return 0;
}

#undef PS_NAME
#undef PS_
#undef PS_BITS
#undef PS_EXP
#undef PS_MANT
#undef PS_KEY
#undef PS_DIGITS
#undef PS_SORT
#undef PS_STORE
