/*
 * radix_sort_body.h: the one body of radix_sort32 and radix_sort64, which
 * radix_sort.c includes twice, with these defined (and undefines after):
 *   RS_NAME        the function's name
 *   RS_(x)         x with the key width appended, for its helpers' names
 *   RS_KEY         the key type, uint32_t or uint64_t
 *   RS_DIGITS      its digit count, RADIX32_DIGITS or RADIX64_DIGITS
 *   RS_TO_BITS     the key back to the float's bits (radix_sort.h)
 *   RS_SCATTER_WC  (wc, src, dst, n, shift, off, bits): a pass through
 *                  write-combining line buffers, 1 if it ran it, 0 if the
 *                  plain scatter is to run (always 0 for 64-bit keys)
 * No include guard: it is meant to be included more than once.
 */

/* One pass, shared by its parts; part i reads src[start[i] .. start[i + 1]). */
struct RS_(job) {
	const RS_KEY *src;
	RS_KEY *dst;
	const size_t *start;
	size_t (*off)[RADIX_BUCKETS];	/* part i's next place in each bucket */
	uint64_t (*cnt)[RADIX_BUCKETS];	/* part i's counts of the digit */
	struct wc_line **wc;		/* part i's line buffers, or NULL */
	unsigned shift;
	int bits;
};

static void RS_(count_part)(void *ctx, int i, int parts)
{
	const struct RS_(job) *j = ctx;
	uint64_t *c = j->cnt[i];

	(void)parts;
	memset(c, 0, sizeof(j->cnt[i]));
	for (size_t k = j->start[i]; k < j->start[i + 1]; k++)
		c[(j->src[k] >> j->shift) & (RADIX_BUCKETS - 1)]++;
}

static void RS_(scatter_part)(void *ctx, int i, int parts)
{
	const struct RS_(job) *j = ctx;
	const RS_KEY *src = j->src + j->start[i];
	size_t n = j->start[i + 1] - j->start[i], *o = j->off[i];
	unsigned shift = j->shift;
	RS_KEY *dst = j->dst;

	(void)parts;
	if (RS_SCATTER_WC(&j->wc[i], src, dst, n, shift, o, j->bits))
		return;
	if (j->bits)
		for (size_t k = 0; k < n; k++)
			dst[o[(src[k] >> shift) & (RADIX_BUCKETS - 1)]++] = RS_TO_BITS(src[k]);
	else
		for (size_t k = 0; k < n; k++)
			dst[o[(src[k] >> shift) & (RADIX_BUCKETS - 1)]++] = src[k];
}

/* No pass ran: the keys back to bits where they are (src is dst here). */
static void RS_(decode_part)(void *ctx, int i, int parts)
{
	const struct RS_(job) *j = ctx;

	(void)parts;
	for (size_t k = j->start[i]; k < j->start[i + 1]; k++)
		j->dst[k] = RS_TO_BITS(j->dst[k]);
}

RS_KEY *RS_NAME(RS_KEY *keys, RS_KEY *tmp, size_t n, const struct radix_split *s, int to_bits)
{
	int parts = s->parts, live[RS_DIGITS], last = -1, first = 1;
	uint64_t (*total)[RADIX_BUCKETS] = calloc(RS_DIGITS, sizeof(*total));
	size_t (*off)[RADIX_BUCKETS] = malloc((size_t)parts * sizeof(*off));
	uint64_t (*cnt)[RADIX_BUCKETS] = malloc((size_t)parts * sizeof(*cnt));
	struct wc_line **wc = calloc((size_t)parts, sizeof(*wc));
	size_t *equal = malloc(((size_t)parts + 1) * sizeof(*equal));
	RS_KEY *src = keys, *dst = tmp;

	if (!total || !off || !cnt || !wc || !equal) {
		src = NULL;
		goto out;
	}
	/* equal ranges, for the passes after the first (whose ranges are the caller's) */
	for (int i = 0; i <= parts; i++)
		equal[i] = (size_t)((unsigned __int128)n * (unsigned)i / (unsigned)parts);
	for (int i = 0; i < parts; i++)
		for (int d = 0; d < RS_DIGITS; d++)
			for (unsigned b = 0; b < RADIX_BUCKETS; b++)
				total[d][b] += s->hist[i * RS_DIGITS + d][b];
	for (int d = 0; d < RS_DIGITS; d++) {
		live[d] = n > 1 && !radix_trivial(total[d], n);
		if (live[d])
			last = d;
	}
	for (int d = 0; d <= last; d++) {
		struct RS_(job) j = { src, dst, s->start, off, cnt, wc, (unsigned)d * RADIX_BITS,
				      d == last && to_bits };
		if (!live[d])
			continue;
		if (first || parts == 1) {
			/* the caller's ranges and counts: the keys are where it wrote them */
			for (int i = 0; i < parts; i++)
				memcpy(cnt[i], parts == 1 ? total[d] : s->hist[i * RS_DIGITS + d],
				       sizeof(cnt[i]));
		} else {
			j.start = equal;
			pool_run(s->pool, parts, RS_(count_part), &j);
		}
		/* part i's place in bucket b: after every key of a smaller digit, and
		 * after the bucket's keys of the parts before it (stable) */
		size_t at = 0;
		for (unsigned b = 0; b < RADIX_BUCKETS; b++)
			for (int i = 0; i < parts; i++) {
				off[i][b] = at;
				at += cnt[i][b];
			}
		pool_run(s->pool, parts, RS_(scatter_part), &j);
		RS_KEY *t = src; src = dst; dst = t;
		first = 0;
	}
	if (last < 0 && to_bits) {
		struct RS_(job) j = { src, src, equal, off, cnt, wc, 0, 1 };
		pool_run(s->pool, parts, RS_(decode_part), &j);
	}
out:
	for (int i = 0; wc && i < parts; i++)
		free(wc[i]);
	free(wc);
	free(total);
	free(off);
	free(cnt);
	free(equal);
	return src;
}

#undef RS_NAME
#undef RS_
#undef RS_KEY
#undef RS_DIGITS
#undef RS_TO_BITS
#undef RS_SCATTER_WC
