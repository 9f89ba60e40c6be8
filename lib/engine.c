/*
 * engine.c: the engine API: backend choice, preparing tensors, and W1
 * dispatch. Preparing is where the time goes: one fused pass classifies the
 * values, counts non-finite ones and writes radix keys with their digit
 * histograms; the radix sort then runs three passes (fp32). 16-bit data, and
 * fp32 data that is upcast bf16, is counted into 65536 bins instead.
 *
 * The CUDA backend (cuda/) plugs in behind the same functions; today the
 * engine runs on the CPU only. Depends on libc only.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigbuf.h"
#include "dtype.h"
#include "prepared.h"
#include "radix_sort.h"

struct wd_engine {
	enum wd_backend backend;
	char desc[96];
	void *scratch;		/* radix ping-pong buffer, grown on demand */
	size_t scratch_size;
};

int wd_engine_open(enum wd_backend backend, struct wd_engine **out)
{
	struct wd_engine *e;

	*out = NULL;
	if (backend == WD_BACKEND_CUDA)
		return -ENODEV;	/* not built in: see cuda/README.md */
	if (backend != WD_BACKEND_AUTO && backend != WD_BACKEND_CPU)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->backend = WD_BACKEND_CPU;
	snprintf(e->desc, sizeof(e->desc), "cpu (exact, 1 thread)");
	*out = e;
	return 0;
}

void wd_engine_close(struct wd_engine **e)
{
	if (!*e)
		return;
	free((*e)->scratch);
	free(*e);
	*e = NULL;
}

const char *wd_engine_describe(const struct wd_engine *e)
{
	return e->desc;
}

/* Makes sure the scratch buffer holds at least size bytes. */
static void *engine_scratch(struct wd_engine *e, size_t size)
{
	if (e->scratch_size < size) {
		free(e->scratch);
		e->scratch = bigbuf_alloc(size);
		e->scratch_size = e->scratch ? size : 0;
	}
	return e->scratch;
}

/*
 * Sorting leaves the result in either our buffer or the scratch one. When it
 * is the scratch, the prepared tensor takes it and the engine keeps ours as
 * its next scratch: no copy. A scratch much larger than needed (left by an
 * earlier, bigger tensor) is not handed out: the result is copied instead.
 */
static void *engine_adopt(struct wd_engine *e, void *mine, size_t mine_size,
			  void *result, size_t used)
{
	if (result == mine)
		return mine;
	if (e->scratch_size > 2 * mine_size) {
		memcpy(mine, result, used);
		return mine;
	}
	e->scratch = mine;
	e->scratch_size = mine_size;
	return result;
}

static int prepare_sorted_f32(struct wd_engine *e, const uint32_t *src,
			      uint64_t n, struct wd_prepared *p)
{
	uint64_t (*hist)[RADIX_BUCKETS] = calloc(RADIX32_DIGITS, sizeof(*hist));
	uint32_t *keys = bigbuf_alloc(n * 4 + 4);
	uint32_t *tmp = engine_scratch(e, n * 4 + 4);
	uint64_t k = 0;

	if (!hist || !keys || !tmp) {
		free(hist);
		free(keys);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint32_t u = src[i];
		if ((u & 0x7f800000u) == 0x7f800000u) {
			if (u & 0x7fffffu)
				p->nonfinite.nan++;
			else if (u >> 31)
				p->nonfinite.neginf++;
			else
				p->nonfinite.posinf++;
			continue;
		}
		uint32_t key = key32_from_bits(u);
		keys[k++] = key;
		for (int d = 0; d < RADIX32_DIGITS; d++)
			hist[d][(key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
	}
	p->values = engine_adopt(e, keys, n * 4 + 4,
				 radix_sort32(keys, tmp, k, hist, 1), k * 4);
	p->n_finite = k;
	p->store = WD_F32;
	free(hist);
	return 0;
}

static int prepare_sorted_f64(struct wd_engine *e, const uint64_t *src,
			      uint64_t n, struct wd_prepared *p)
{
	uint64_t (*hist)[RADIX_BUCKETS] = calloc(RADIX64_DIGITS, sizeof(*hist));
	uint64_t *keys = bigbuf_alloc(n * 8 + 8);
	uint64_t *tmp = engine_scratch(e, n * 8 + 8);
	uint64_t k = 0;

	if (!hist || !keys || !tmp) {
		free(hist);
		free(keys);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t u = src[i];
		if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) {
			if (u & 0x000fffffffffffffull)
				p->nonfinite.nan++;
			else if (u >> 63)
				p->nonfinite.neginf++;
			else
				p->nonfinite.posinf++;
			continue;
		}
		uint64_t key = key64_from_bits(u);
		keys[k++] = key;
		for (int d = 0; d < RADIX64_DIGITS; d++)
			hist[d][(key >> (d * RADIX_BITS)) & (RADIX_BUCKETS - 1)]++;
	}
	p->values = engine_adopt(e, keys, n * 8 + 8,
				 radix_sort64(keys, tmp, k, hist, 1), k * 8);
	p->n_finite = k;
	p->store = WD_F64;
	free(hist);
	return 0;
}

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

static int prepare_hist16(const void *src, int upper_halves, enum wd_dtype fmt,
			  uint64_t n, struct wd_prepared *p)
{
	uint32_t *sub = calloc(2 * HALF_CODES, sizeof(*sub));
	const struct half_table *t = half_table_get(fmt);

	p->hist = calloc(HALF_CODES, sizeof(*p->hist));
	if (!sub || !p->hist) {
		free(sub);
		return -ENOMEM;
	}
	for (uint64_t at = 0; at < n; at += HIST_CHUNK) {
		uint64_t len = n - at < HIST_CHUNK ? n - at : HIST_CHUNK;
		if (upper_halves)
			hist16_count32((const uint32_t *)src + at, len, sub, sub + HALF_CODES);
		else
			hist16_count16((const uint16_t *)src + at, len, sub, sub + HALF_CODES);
		for (uint32_t c = 0; c < HALF_CODES; c++) {
			p->hist[c] += (uint64_t)sub[c] + sub[HALF_CODES + c];
			sub[c] = sub[HALF_CODES + c] = 0;
		}
	}
	free(sub);
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
static int prepare_sorted_from16(struct wd_engine *e, const uint16_t *src,
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
	r = prepare_sorted_f32(e, (const uint32_t *)f, n, p);
	free(f);
	return r;
}

int wd_prepare(struct wd_engine *e, const struct wd_view *v, unsigned flags,
	       struct wd_prepared **out)
{
	struct wd_prepared *p;
	int force_sort = flags & WD_PREP_FORCE_SORT;
	int r;

	*out = NULL;
	if (!wd_dtype_size(v->dtype) || (!v->data && v->numel))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->dtype = v->dtype;
	p->numel = v->numel;
	p->method = WD_METHOD_SORT;
	switch (v->dtype) {
	case WD_F32:
		if (!force_sort && v->numel && f32_is_upcast_bf16(v->data, v->numel)) {
			p->method = WD_METHOD_HIST16;
			r = prepare_hist16(v->data, 1, WD_BF16, v->numel, p);
		} else {
			r = prepare_sorted_f32(e, v->data, v->numel, p);
		}
		break;
	case WD_F64:
		r = prepare_sorted_f64(e, v->data, v->numel, p);
		break;
	default:
		if (force_sort) {
			r = prepare_sorted_from16(e, v->data, v->dtype, v->numel, p);
		} else {
			p->method = WD_METHOD_HIST16;
			r = prepare_hist16(v->data, 0, v->dtype, v->numel, p);
		}
		break;
	}
	if (r < 0) {
		wd_prepared_free(&p);
		return r;
	}
	*out = p;
	return 0;
}

void wd_prepared_free(struct wd_prepared **p)
{
	if (!*p)
		return;
	free((*p)->values);
	free((*p)->hist);
	free(*p);
	*p = NULL;
}

enum wd_method wd_prepared_method(const struct wd_prepared *p) { return p->method; }
enum wd_dtype wd_prepared_dtype(const struct wd_prepared *p) { return p->dtype; }
uint64_t wd_prepared_numel(const struct wd_prepared *p) { return p->numel; }
uint64_t wd_prepared_finite(const struct wd_prepared *p) { return p->n_finite; }

void wd_prepared_nonfinite(const struct wd_prepared *p, struct wd_nonfinite *out)
{
	*out = p->nonfinite;
}

int wd_w1(struct wd_engine *e, const struct wd_prepared *a,
	  const struct wd_prepared *b, double *w1)
{
	(void)e;
	if (!a || !b)
		return -EINVAL;
	*w1 = (a->n_finite && b->n_finite) ? w1_cpu(a, b) : NAN;
	return 0;
}
