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
 *   PS_UNKEY     its inverse
 *   PS_DIGITS    the key's digit count
 *   PS_SORT      radix_sort32 or radix_sort64
 *   PS_VQ        vq_sort32 or vq_sort64 (sort_vq.h)
 *   PS_STORE     WD_F32 or WD_F64, the type of the sorted values[]
 * One fused pass classifies each value, counts the non-finite ones, writes
 * the finite ones' keys and counts every digit's histogram; the sort then
 * needs no counting pass for its first digit. Split between threads, each
 * part does this for its slice of the input, writing its keys from the
 * slice's own start; the slices are then closed up (only when some value
 * was not finite) and the sort's first pass takes them as its ranges.
 *
 * With vqsort (cpu_sort_vq) the keys need no histograms, and a split
 * needs no merge: the keys are dealt by value into one bucket per part,
 * between splitters drawn from a sample, and each part sorts a bucket in
 * place. Every bucket holds a range of values, so the buckets in order are
 * the one sorted array whatever the splitters: they set only the balance.
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

static inline int PS_(finite)(PS_BITS u)
{
	return (u & PS_EXP) != PS_EXP;
}

/* Counts u in nf and says so when it is NaN or +-Inf. */
static inline int PS_(nonfinite)(PS_BITS u, struct wd_nonfinite *nf)
{
	if (PS_(finite)(u))
		return 0;
	if (u & PS_MANT)
		nf->nan++;
	else if (u >> (sizeof(PS_BITS) * 8 - 1))
		nf->neginf++;
	else
		nf->posinf++;
	return 1;
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
		if (PS_(nonfinite)(u, &nf))
			continue;
		PS_BITS key = PS_KEY(u);
		keys[k++] = key;
		for (int d = 0; d < PS_DIGITS; d++)
			hist[d][(key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
	}
	j->k[i] = k;
	j->nf[i] = nf;
}

/*
 * The vqsort path. A job of parts > 1 deals the keys into buckets: a first
 * pass counts each part's keys per bucket, a second writes them to the
 * offsets those counts give, bucket by bucket and part by part in that
 * order; then part b sorts bucket b. One part writes its keys in order
 * and sorts them all. The sorted keys are mapped back to the floats' bits
 * in place.
 */
struct PS_(vq_job) {
	const PS_BITS *src;
	PS_BITS *keys;
	uint64_t n;
	int parts;
	unsigned width;			/* splitters rounded up to a power of two */
	const PS_BITS *split;		/* width - 1 of them, ascending; ~0 pads */
	uint64_t *at;			/* [part * parts + bucket]: counts, then offsets */
	uint64_t *end;			/* the same: where each part's share of a bucket ends */
	uint64_t *bucket;		/* parts + 1: bucket b is [bucket[b], bucket[b + 1]) */
	struct wd_nonfinite *nf;	/* per part */
	int failed;			/* a part had no memory */
	int sort_failed;
};

/*
 * The bucket of a finite key: how many splitters are <= it. The pads are
 * all ones, above every finite float's key, so no key passes them.
 */
static inline unsigned PS_(vq_bucket)(const struct PS_(vq_job) *j, PS_BITS key)
{
	unsigned b = 0;
	for (unsigned step = j->width / 2; step; step /= 2)
		b += key >= j->split[b + step - 1] ? step : 0;
	return b;
}

/*
 * Counting into at[] directly would chain every key on the last store to
 * the same count (two buckets: every other key): four interleaved counts,
 * or with two buckets one sum in a register, keep the loop free of that.
 */
static void PS_(vq_count_part)(void *ctx, int i, int parts)
{
	struct PS_(vq_job) *j = ctx;
	uint64_t from = PS_(slice)(j->n, i, parts), to = PS_(slice)(j->n, i + 1, parts);
	uint64_t *at = j->at + (size_t)i * parts;
	const PS_BITS *src = j->src;

	/*
	 * Fault the part's slice of the fresh key buffer in here, each part its
	 * own: faulted by the deal's writes, where the parts' buckets
	 * interleave, the same pages cost 5x as much (clear_page on 2 threads).
	 */
	for (uint64_t x = from; x < to; x += 4096 / sizeof(PS_BITS))
		j->keys[x] = 0;
	if (parts == 2) {
		PS_BITS s = j->split[0];
		uint64_t finite = 0, upper = 0;
		for (uint64_t x = from; x < to; x++) {
			PS_BITS u = src[x];
			int f = PS_(finite)(u);
			finite += f;
			upper += f & (PS_KEY(u) >= s);
		}
		at[0] = finite - upper;
		at[1] = upper;
		return;
	}
	uint64_t *sub = calloc(4 * (size_t)parts, sizeof(*sub));
	if (!sub) {
		__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
		return;
	}
	for (uint64_t x = from; x < to; x++) {
		PS_BITS u = src[x];
		if (PS_(finite)(u))
			sub[(x & 3) * (size_t)parts + PS_(vq_bucket)(j, PS_KEY(u))]++;
	}
	for (int b = 0; b < parts; b++)
		at[b] = sub[b] + sub[parts + b] + sub[2 * parts + b] + sub[3 * parts + b];
	free(sub);
}

#define PS_VQ_BLOCK 16

/* Keys PS_VQ_BLOCK values into out; says whether all were finite. */
static inline int PS_(key_block)(const PS_BITS *restrict in, PS_BITS *restrict out)
{
	PS_BITS odd = 0;

	for (int b = 0; b < PS_VQ_BLOCK; b++) {
		out[b] = PS_KEY(in[b]);
		odd |= (PS_BITS)((in[b] & PS_EXP) == PS_EXP);
	}
	return !odd;
}

static void PS_(vq_deal_part)(void *ctx, int i, int parts)
{
	struct PS_(vq_job) *j = ctx;
	uint64_t from = PS_(slice)(j->n, i, parts), to = PS_(slice)(j->n, i + 1, parts);
	uint64_t *at = j->at + (size_t)i * parts;
	PS_BITS *keys = j->keys;
	struct wd_nonfinite nf = { 0, 0, 0 };

	if (parts == 1) {	/* one bucket, from 0: no search, and the count is the offset */
		uint64_t k = 0, x = from;
		/*
		 * PS_VQ_BLOCK values at a time with no branch, which the compiler
		 * makes vectors of; a block that holds a value that is not finite
		 * is keyed again one by one over what it wrote. The one-by-one
		 * loop alone, a branch and a store per value, took 10% of a 2^24
		 * tensor's prepare (docs/performance.md).
		 */
		for (; x + PS_VQ_BLOCK <= to; x += PS_VQ_BLOCK) {
			if (PS_(key_block)(j->src + x, keys + k)) {
				k += PS_VQ_BLOCK;
				continue;
			}
			for (int b = 0; b < PS_VQ_BLOCK; b++)
				if (!PS_(nonfinite)(j->src[x + b], &nf))
					keys[k++] = PS_KEY(j->src[x + b]);
		}
		for (; x < to; x++)
			if (!PS_(nonfinite)(j->src[x], &nf))
				keys[k++] = PS_KEY(j->src[x]);
		at[0] = k;
	} else if (parts == 2) {	/* both ends in registers: no chain through at[] */
		const uint64_t *end = j->end + (size_t)i * parts;
		PS_BITS s = j->split[0], *lo = keys + at[0], *hi = keys + at[1];
		uintptr_t lo_end = (uintptr_t)(keys + end[0]), hi_end = (uintptr_t)(keys + end[1]);
		for (uint64_t x = from; x < to; x++) {
			PS_BITS u = j->src[x];
			if (!PS_(nonfinite)(u, &nf)) {
				PS_BITS key = PS_KEY(u);
				uintptr_t up = key >= s, mask = -up;
				/* a select, not a branch: the bucket is a coin toss */
				uintptr_t dst = (uintptr_t)lo + (((uintptr_t)hi - (uintptr_t)lo) & mask);
				if (dst == lo_end + ((hi_end - lo_end) & mask))
					break;	/* more than counted: the input changed */
				*(PS_BITS *)dst = key;
				hi += up;
				lo += 1 - up;
			}
		}
		at[0] = (uint64_t)(lo - keys);
		at[1] = (uint64_t)(hi - keys);
	} else {
		const uint64_t *end = j->end + (size_t)i * parts;
		for (uint64_t x = from; x < to; x++) {
			PS_BITS u = j->src[x];
			if (!PS_(nonfinite)(u, &nf)) {
				PS_BITS key = PS_KEY(u);
				unsigned b = PS_(vq_bucket)(j, key);
				if (at[b] == end[b])
					break;	/* more than counted: the input changed */
				keys[at[b]++] = key;
			}
		}
	}
	j->nf[i] = nf;
}

static void PS_(vq_sort_part)(void *ctx, int b, int parts)
{
	struct PS_(vq_job) *j = ctx;
	PS_BITS *k = j->keys + j->bucket[b];
	uint64_t len = j->bucket[b + 1] - j->bucket[b];

	(void)parts;
	if (PS_VQ(k, len)) {
		__atomic_store_n(&j->sort_failed, 1, __ATOMIC_RELAXED);
		return;
	}
	for (uint64_t x = 0; x < len; x++)
		k[x] = PS_UNKEY(k[x]);
}

/*
 * Samples per part for the splitters, which estimate the quantiles: on
 * make bench's 2^24 normal values, 2 parts got 51.4% and 48.6% of them.
 */
#define PS_VQ_SAMPLES 256

/*
 * Splitters from an evenly spaced sample of the finite values: the keys at
 * every (samples / parts)th place of the sorted sample. Returns -ENOMEM.
 */
static int PS_(vq_splitters)(struct PS_(vq_job) *j, PS_BITS *split)
{
	uint64_t want = (uint64_t)PS_VQ_SAMPLES * (unsigned)j->parts, m = 0;
	PS_BITS *s;

	if (want > j->n)
		want = j->n;
	s = malloc(want * sizeof(*s) + sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (uint64_t x = 0; x < want; x++) {
		PS_BITS u = j->src[(uint64_t)((unsigned __int128)j->n * x / want)];
		if (PS_(finite)(u))
			s[m++] = PS_KEY(u);
	}
	for (unsigned b = 0; b + 1 < j->width; b++)
		split[b] = (PS_BITS)~(PS_BITS)0;
	if (m && !PS_VQ(s, m))
		for (int b = 1; b < j->parts; b++)
			split[b - 1] = s[(uint64_t)m * (unsigned)b / (unsigned)j->parts];
	free(s);
	return 0;
}

/*
 * Sorts with vqsort: 0, -ENOMEM, or -EAGAIN when the input changed between
 * the count and the deal (a buffer shared with another process or thread),
 * so that the two passes disagree: nothing is written past a part's
 * share, and the caller sorts again with the radix sort, which reads each
 * value once.
 */
static int PS_(prepare_vq)(struct cpu_engine *c, const PS_BITS *src, uint64_t n,
			   struct wd_prepared *p)
{
	int parts = cpu_parts(c, n);
	unsigned width = 1;
	PS_BITS *keys = cpu_keys_get(n * sizeof(PS_BITS) + sizeof(PS_BITS));
	uint64_t *at = calloc((size_t)parts * (size_t)parts, sizeof(*at));
	uint64_t *end = calloc((size_t)parts * (size_t)parts, sizeof(*end));
	uint64_t *bucket = calloc((size_t)parts + 1, sizeof(*bucket));
	struct wd_nonfinite *nf = calloc((size_t)parts, sizeof(*nf));
	PS_BITS *split = NULL;
	int r = -ENOMEM;

	while (width < (unsigned)parts)
		width *= 2;
	split = malloc(width * sizeof(*split));
	if (keys && at && end && bucket && nf && split) {
		struct PS_(vq_job) j = { src, keys, n, parts, width, split, at, end, bucket, nf, 0, 0 };
		struct wd_pool *pool = parts > 1 ? c->pool : NULL;
		uint64_t total = 0;

		r = parts > 1 ? PS_(vq_splitters)(&j, split) : 0;
		if (!r && parts > 1) {
			pool_run(pool, parts, PS_(vq_count_part), &j);
			r = j.failed ? -ENOMEM : 0;
		}
		if (!r && parts > 1) {
			for (int b = 0; b < parts; b++) {
				bucket[b] = total;
				for (int i = 0; i < parts; i++) {
					size_t ib = (size_t)i * parts + b;
					uint64_t count = at[ib];
					at[ib] = total;
					total += count;
					end[ib] = total;
				}
			}
		}
		if (!r) {
			pool_run(pool, parts, PS_(vq_deal_part), &j);
			if (parts == 1)
				total = at[0];
			/* every share filled to its end, or the input changed */
			for (size_t ib = 0; parts > 1 && ib < (size_t)parts * parts; ib++)
				if (at[ib] != end[ib])
					r = -EAGAIN;
		}
		if (!r) {
			bucket[parts] = total;
			pool_run(pool, parts, PS_(vq_sort_part), &j);
			r = j.sort_failed ? -ENOTSUP : 0;
		}
		for (int i = 0; !r && i < parts; i++) {
			p->nonfinite.nan += nf[i].nan;
			p->nonfinite.posinf += nf[i].posinf;
			p->nonfinite.neginf += nf[i].neginf;
		}
		if (!r)
			p->n_finite = total;
	}
	free(at);
	free(end);
	free(bucket);
	free(nf);
	free(split);
	if (r) {
		cpu_keys_put(keys);
		return r;
	}
	p->values = keys;
	p->store = PS_STORE;
	return 0;
}

static int PS_(prepare_radix)(struct cpu_engine *c, const PS_BITS *src, uint64_t n,
			      struct wd_prepared *p)
{
	int parts = cpu_parts(c, n);
	uint64_t (*hist)[RADIX_BUCKETS] = calloc((size_t)parts * PS_DIGITS, sizeof(*hist));
	size_t *start = malloc(((size_t)parts + 1) * sizeof(*start));
	uint64_t *k = calloc((size_t)parts, sizeof(*k));
	struct wd_nonfinite *nf = calloc((size_t)parts, sizeof(*nf));
	PS_BITS *keys = cpu_keys_get(n * sizeof(PS_BITS) + sizeof(PS_BITS));
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
		cpu_keys_put(keys);
		return -ENOMEM;
	}
	p->values = cpu_adopt(c, keys, n * sizeof(PS_BITS) + sizeof(PS_BITS), sorted,
			      total * sizeof(PS_BITS));
	p->n_finite = total;
	p->store = PS_STORE;
	return 0;
}

static int PS_NAME(struct cpu_engine *c, const PS_BITS *src, uint64_t n,
		   struct wd_prepared *p)
{
	if (cpu_sort_vq_for(c, n, sizeof(PS_BITS))) {
		int r = PS_(prepare_vq)(c, src, n, p);
		if (r != -EAGAIN)
			return r;
	}
	return PS_(prepare_radix)(c, src, n, p);
}

#undef PS_NAME
#undef PS_
#undef PS_BITS
#undef PS_EXP
#undef PS_MANT
#undef PS_KEY
#undef PS_DIGITS
#undef PS_SORT
#undef PS_VQ
#undef PS_UNKEY
#undef PS_STORE
