/*
 * prepare_cpu.c: preparing a tensor on the CPU (backend_cpu.h:
 * cpu_prepare). Preparing is where the time goes: one fused pass
 * classifies the values, counts non-finite ones and writes sort keys;
 * vqsort sorts them (or the radix sort, in three passes for fp32, from the
 * digit histograms the same pass counts).
 * 16-bit data, and fp32 data that is upcast bf16, is counted into 65536
 * bins instead. docs/engine.md, "How a tensor is prepared". Depends on
 * libc only; calls nothing in engine.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "bigbuf.h"
#include "dtype.h"
#include "pool.h"
#include "prepared.h"
#include "radix_sort.h"
#include "spares.h"
#include "sort_vq.h"

/* Makes sure the scratch buffer holds at least size bytes. */
static void *cpu_scratch(struct cpu_engine *c, size_t size)
{
	if (c->scratch_size < size) {
		free(c->scratch);
		c->scratch = bigbuf_alloc(size);
		c->scratch_size = c->scratch ? size : 0;
	}
	return c->scratch;
}

/*
 * Sorting leaves the result in either our buffer or the scratch one. When it
 * is the scratch, the prepared tensor takes it and the engine keeps ours as
 * its next scratch: no copy. A scratch much larger than needed (left by an
 * earlier, bigger tensor) is not handed out: the result is copied instead.
 */
static void *cpu_adopt(struct cpu_engine *c, void *mine, size_t mine_size,
		       void *result, size_t used)
{
	if (result == mine)
		return mine;
	if (c->scratch_size > 2 * mine_size) {
		memcpy(mine, result, used);
		return mine;
	}
	c->scratch = mine;
	c->scratch_size = mine_size;
	return result;
}

int cpu_sort_vq(const struct cpu_engine *c)
{
	return c->sort != WD_SORT_RADIX && vq_available();
}

/*
 * fp32 tensors of 16 Ki to 128 Ki elements go to the radix sort where
 * vqsort runs its AVX2 code, unless vqsort was asked for: there the radix
 * passes run in L2 without the line buffers, and were 1.2-1.6x faster
 * than vqsort's AVX2 code on one thread (Zen 3); below and above, and
 * for fp64 at every size, vqsort was the faster. Its AVX-512 code (Zen 5)
 * was 1.2-2.4x faster than the radix sort at those sizes too
 * (docs/performance.md, 2026-11-30). Either gives the same bits.
 */
#define VQ_RADIX32_FROM (1u << 14)
#define VQ_RADIX32_TO (1u << 17)

int cpu_sort_vq_for(const struct cpu_engine *c, uint64_t n, size_t key_size)
{
	if (!cpu_sort_vq(c))
		return 0;
	return c->sort == WD_SORT_VQSORT || key_size != 4 || n <= VQ_RADIX32_FROM ||
	       n >= VQ_RADIX32_TO || strcmp(vq_target_name(), "avx2") != 0;
}

#define PS_NAME prepare_sorted_f32
#define PS_(x) x##_f32
#define PS_BITS uint32_t
#define PS_EXP 0x7f800000u
#define PS_MANT 0x7fffffu
#define PS_KEY key32_from_bits
#define PS_UNKEY key32_to_bits
#define PS_DIGITS RADIX32_DIGITS
#define PS_SORT radix_sort32
#define PS_VQ vq_sort32
#define PS_STORE WD_F32
#include "prepare_sorted_body.h"

#define PS_NAME prepare_sorted_f64
#define PS_(x) x##_f64
#define PS_BITS uint64_t
#define PS_EXP 0x7ff0000000000000ull
#define PS_MANT 0x000fffffffffffffull
#define PS_KEY key64_from_bits
#define PS_UNKEY key64_to_bits
#define PS_DIGITS RADIX64_DIGITS
#define PS_SORT radix_sort64
#define PS_VQ vq_sort64
#define PS_STORE WD_F64
#include "prepare_sorted_body.h"

/*
 * Counts 16-bit codes (shift 0 over uint16_t, or the upper halves of
 * uint32_t words with shift 16). Two interleaved 32-bit sub-histograms break
 * the store-to-load chain when neighbours hit the same hot bin near zero;
 * chunks keep each sub-count below 2^32.
 */
#define HIST_CHUNK (1ull << 31)

static void hist16_count16(const uint16_t *c, uint64_t n, uint32_t *h0,
			   uint32_t *h1)
{
	uint64_t i = 0;
	for (; i + 2 <= n; i += 2) {
		h0[c[i]]++;
		h1[c[i + 1]]++;
	}
	if (i < n)
		h0[c[i]]++;
}

static void hist16_count32(const uint32_t *c, uint64_t n, uint32_t *h0,
			   uint32_t *h1)
{
	uint64_t i = 0;
	for (; i + 2 <= n; i += 2) {
		h0[c[i] >> 16]++;
		h1[c[i + 1] >> 16]++;
	}
	if (i < n)
		h0[c[i] >> 16]++;
}

/* Part i's counts of its slice of a 16-bit job, into out[i]. */
struct hist16_job {
	const void *src;
	int upper_halves;
	uint64_t n;
	uint64_t **out;		/* out[0] is the prepared tensor's */
	int *failed;		/* per part: no memory for its sub-counts */
};

/*
 * A slice this short is counted straight into the 64-bit counts: the two
 * sub-counts would cost more to clear and fold (2 x 65,536 bins) than the
 * chain they break.
 */
#define HIST_DIRECT (1u << 16)

static void hist16_part(void *ctx, int i, int parts)
{
	const struct hist16_job *j = ctx;
	uint64_t from = (uint64_t)((unsigned __int128)j->n * (unsigned)i / (unsigned)parts);
	uint64_t to = (uint64_t)((unsigned __int128)j->n * (unsigned)(i + 1) / (unsigned)parts);
	uint64_t *h = j->out[i];

	if (to - from <= HIST_DIRECT) {
		for (uint64_t at = from; at < to; at++)
			h[j->upper_halves ? ((const uint32_t *)j->src)[at] >> 16
					  : ((const uint16_t *)j->src)[at]]++;
		return;
	}
	/* two 32-bit counts in one buffer of a 64-bit count's size */
	uint32_t *sub = (uint32_t *)cpu_hist_get();
	if (!sub) {
		j->failed[i] = 1;
		return;
	}
	for (uint64_t at = from; at < to; at += HIST_CHUNK) {
		uint64_t len = to - at < HIST_CHUNK ? to - at : HIST_CHUNK;
		if (j->upper_halves)
			hist16_count32((const uint32_t *)j->src + at, len, sub, sub + HALF_CODES);
		else
			hist16_count16((const uint16_t *)j->src + at, len, sub, sub + HALF_CODES);
		for (uint32_t c = 0; c < HALF_CODES; c++) {
			h[c] += (uint64_t)sub[c] + sub[HALF_CODES + c];
			sub[c] = sub[HALF_CODES + c] = 0;
		}
	}
	cpu_hist_put((uint64_t *)sub);
}

#define HIST_BYTES (HALF_CODES * sizeof(uint64_t))
static struct spares hist_spares = SPARES_INIT(HIST_BYTES, 2 * HIST_BYTES, CPU_SPARE_BYTES);
static struct spares keys_spares = SPARES_INIT(CPU_KEYS_SPARE_MIN, CPU_KEYS_SPARE_MAX, CPU_SPARE_BYTES);

uint64_t *cpu_hist_get(void)
{
	return spares_get(&hist_spares, HIST_BYTES, 1);
}

void cpu_hist_put(uint64_t *hist)
{
	spares_put(&hist_spares, hist);
}

void *cpu_keys_get(size_t size)
{
	return spares_get(&keys_spares, size, 0);
}

void cpu_keys_put(void *keys)
{
	spares_put(&keys_spares, keys);
}

void cpu_spares_trim(void)
{
	spares_trim(&keys_spares);
	spares_trim(&hist_spares);
}

uint64_t cpu_spares_kept(void)
{
	return (uint64_t)spares_kept(&keys_spares) + spares_kept(&hist_spares);
}

/*
 * Counts the codes, each part its slice into its own counts (integers:
 * they add up to the same whatever the split).
 */
static int prepare_hist16(struct cpu_engine *c, const void *src, int upper_halves,
			  enum wd_dtype fmt, uint64_t n, struct wd_prepared *p)
{
	const struct half_table *t = half_table_get(fmt);
	int parts = cpu_parts(c, n), r = 0;
	uint64_t **out = calloc((size_t)parts, sizeof(*out));
	int *failed = calloc((size_t)parts, sizeof(*failed));

	p->hist = cpu_hist_get();
	if (!out || !failed || !p->hist)
		r = -ENOMEM;
	for (int i = 0; !r && i < parts; i++)
		if (!(out[i] = i ? cpu_hist_get() : p->hist))
			r = -ENOMEM;
	if (!r) {
		struct hist16_job j = { src, upper_halves, n, out, failed };
		pool_run(parts > 1 ? c->pool : NULL, parts, hist16_part, &j);
		for (int i = 0; i < parts; i++)
			if (failed[i])
				r = -ENOMEM;
		for (int i = 1; !r && i < parts; i++)
			for (uint32_t code = 0; code < HALF_CODES; code++)
				p->hist[code] += out[i][code];
	}
	for (int i = 1; out && i < parts; i++)
		cpu_hist_put(out[i]);
	free(out);
	free(failed);
	if (r)
		return r;
	half_count_nonfinite(fmt, p->hist, &p->nonfinite);
	p->n_finite = 0;
	for (uint32_t j = 0; j < t->n_order; j++)
		p->n_finite += p->hist[t->order[j]];
	p->store = fmt;
	return 0;
}

/* True when every fp32 value has zero low 16 bits: it is upcast bf16. */
static int f32_is_upcast_bf16(const uint32_t *u, uint64_t n)
{
	/* Real fp32 data fails on the first few elements; check a prefix first. */
	uint64_t head = n < 64 ? n : 64;
	for (uint64_t i = 0; i < head; i++)
		if (u[i] & 0xffff)
			return 0;
	uint32_t any = 0;
	for (uint64_t i = head; i < n; i++)
		any |= u[i];
	return !(any & 0xffff);
}

/* 16-bit data sorted as fp32 values: exact, since both formats fit in fp32. */
static int prepare_sorted_from16(struct cpu_engine *c, const uint16_t *src,
				 enum wd_dtype fmt, uint64_t n,
				 struct wd_prepared *p)
{
	const struct half_table *t = half_table_get(fmt);
	float *f = malloc(n * 4 + 4);
	int r;

	if (!f)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		f[i] = (float)t->value[src[i]];
	r = prepare_sorted_f32(c, (const uint32_t *)f, n, p);
	free(f);
	return r;
}

int cpu_prepare_in_result(const struct cpu_engine *c, const struct wd_view *v, unsigned flags)
{
	switch (v->dtype) {
	case WD_F32:
		return cpu_sort_vq_for(c, v->numel, 4);
	case WD_F64:
		return cpu_sort_vq_for(c, v->numel, 8);
	default:
		return !(flags & WD_PREP_FORCE_SORT);
	}
}

uint64_t cpu_prepare_cost(const struct wd_view *v, unsigned flags)
{
	int counted = (v->dtype == WD_BF16 || v->dtype == WD_F16) && !(flags & WD_PREP_FORCE_SORT);

	return counted ? v->numel / 16 + 1 : v->numel;
}

uint64_t cpu_prepare_bytes(const struct cpu_engine *c, const struct wd_view *v, unsigned flags)
{
	const uint64_t tables = (uint64_t)1 << 20;	/* counts, digit histograms, splitters */
	uint64_t keys = (v->numel + 1) * (v->dtype == WD_F64 ? 8 : 4);

	switch (v->dtype) {
	case WD_F32:
	case WD_F64:	/* the sorted keys; the radix sort's scratch beside them (cpu_scratch) */
		return (cpu_prepare_in_result(c, v, flags) ? keys : 2 * keys) + tables;
	default:	/* forced to sort: the decoded floats, their keys and the scratch */
		return (flags & WD_PREP_FORCE_SORT ? 3 * keys : 0) + tables;
	}
}

int cpu_prepare(struct cpu_engine *c, const struct wd_view *v, unsigned flags,
		struct wd_prepared *p)
{
	int force_sort = flags & WD_PREP_FORCE_SORT;

	if (flags & WD_PREP_KEEP_RAW)
		p->host_raw = v->data;
	switch (v->dtype) {
	case WD_F32:
		if (!force_sort && v->numel && f32_is_upcast_bf16(v->data, v->numel)) {
			p->method = WD_METHOD_HIST16;
			return prepare_hist16(c, v->data, 1, WD_BF16, v->numel, p);
		}
		return prepare_sorted_f32(c, v->data, v->numel, p);
	case WD_F64:
		return prepare_sorted_f64(c, v->data, v->numel, p);
	default:
		if (force_sort)
			return prepare_sorted_from16(c, v->data, v->dtype, v->numel, p);
		p->method = WD_METHOD_HIST16;
		return prepare_hist16(c, v->data, 0, v->dtype, v->numel, p);
	}
}
