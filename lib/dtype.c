/*
 * dtype.c: dtype names, 16-bit decoding and ordering, and rounding to bf16 or
 * fp16. The 16-bit tables are exact: every code's value is representable in
 * a double, and so is the gap between neighbours.
 */
#include <errno.h>
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "dtype.h"

static const char *const dtype_names[WD_DTYPE_COUNT] = {
	[WD_F32] = "f32", [WD_F64] = "f64", [WD_F16] = "f16", [WD_BF16] = "bf16",
};

const char *wd_dtype_name(enum wd_dtype t)
{
	return (unsigned)t < WD_DTYPE_COUNT ? dtype_names[t] : "?";
}

int wd_dtype_parse(const char *s, enum wd_dtype *out)
{
	static const struct { const char *name; enum wd_dtype t; } aliases[] = {
		{ "f32", WD_F32 }, { "float32", WD_F32 }, { "float", WD_F32 },
		{ "f64", WD_F64 }, { "float64", WD_F64 }, { "double", WD_F64 },
		{ "f16", WD_F16 }, { "float16", WD_F16 }, { "half", WD_F16 },
		{ "fp16", WD_F16 }, { "bf16", WD_BF16 }, { "bfloat16", WD_BF16 },
	};
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (!strcmp(s, aliases[i].name)) {
			*out = aliases[i].t;
			return 0;
		}
	return -EINVAL;
}

size_t wd_dtype_size(enum wd_dtype t)
{
	switch (t) {
	case WD_F32: return 4;
	case WD_F64: return 8;
	case WD_F16: case WD_BF16: return 2;
	}
	return 0;
}

/* Format parameters: mantissa bits, exponent bits, minimum normal exponent. */
struct half_format { int mbits, ebits, emin, emax; };

static const struct half_format *half_format_of(enum wd_dtype t)
{
	static const struct half_format bf16 = { 7, 8, -126, 127 };
	static const struct half_format f16 = { 10, 5, -14, 15 };
	return t == WD_BF16 ? &bf16 : t == WD_F16 ? &f16 : NULL;
}

int half_class(enum wd_dtype t, uint16_t code)
{
	const struct half_format *f = half_format_of(t);
	unsigned emask = (1u << f->ebits) - 1;
	unsigned mmask = (1u << f->mbits) - 1;

	if (((code >> f->mbits) & emask) != emask)
		return 0;
	if (code & mmask)
		return 1;
	return (code & 0x8000) ? 3 : 2;
}

/* Decodes from the bit fields, with ldexp: independent of any cast. */
static double half_decode_fields(const struct half_format *f, uint16_t code)
{
	unsigned emask = (1u << f->ebits) - 1;
	unsigned mmask = (1u << f->mbits) - 1;
	unsigned e = (code >> f->mbits) & emask, m = code & mmask;
	double sign = (code & 0x8000) ? -1.0 : 1.0;
	int bias = (1 << (f->ebits - 1)) - 1;

	if (e == emask)
		return m ? NAN : sign * INFINITY;
	if (e == 0)
		return sign * ldexp((double)m, 1 - bias - f->mbits);
	return sign * ldexp((double)(m | (1u << f->mbits)), (int)e - bias - f->mbits);
}

static struct half_table bf16_table, f16_table;
/* each built on its first use: a process that sees one 16-bit format pays for that one */
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT, f16_once = PTHREAD_ONCE_INIT;

static void half_table_build(struct half_table *t, enum wd_dtype dt)
{
	const struct half_format *f = half_format_of(dt);
	uint32_t n = 0;

	for (uint32_t c = 0; c < HALF_CODES; c++)
		t->value[c] = half_decode_fields(f, (uint16_t)c);
	/*
	 * Sign-magnitude order: negatives from the largest magnitude down to -0,
	 * then +0 up to the largest positive. -0 and +0 are both kept; their gap
	 * is 0.
	 */
	for (uint32_t k = 0; k < HALF_CODES; k++) {
		uint16_t code = (k & 0x8000) ? (uint16_t)(k & 0x7fff)
					     : (uint16_t)(~k & 0xffff);
		if (half_class(dt, code) == 0)
			t->order[n++] = code;
	}
	t->n_order = n;
	for (uint32_t j = 0; j + 1 < n; j++)
		t->gap[j] = t->value[t->order[j + 1]] - t->value[t->order[j]];
	t->gap[n - 1] = 0;
}

static void bf16_build(void)
{
	half_table_build(&bf16_table, WD_BF16);
}

static void f16_build(void)
{
	half_table_build(&f16_table, WD_F16);
}

const struct half_table *half_table_get(enum wd_dtype t)
{
	if (t == WD_BF16) {
		pthread_once(&bf16_once, bf16_build);
		return &bf16_table;
	}
	if (t == WD_F16) {
		pthread_once(&f16_once, f16_build);
		return &f16_table;
	}
	return NULL;
}

double wd_decode16(enum wd_dtype t, uint16_t code)
{
	const struct half_table *tab = half_table_get(t);
	return tab ? tab->value[code] : NAN;
}

void half_count_nonfinite(enum wd_dtype t, const uint64_t *hist,
			  struct wd_nonfinite *nf)
{
	const struct half_format *f = half_format_of(t);
	unsigned emask = (1u << f->ebits) - 1;
	uint32_t base = emask << f->mbits;	/* exponent all ones, mantissa 0 */
	uint32_t span = 1u << f->mbits;

	for (uint32_t s = 0; s <= 0x8000; s += 0x8000) {
		if (s)
			nf->neginf += hist[s | base];
		else
			nf->posinf += hist[base];
		for (uint32_t m = 1; m < span; m++)
			nf->nan += hist[s | base | m];
	}
}

/*
 * Rounds a double to the nearest value of the format, ties to even, with
 * overflow to Inf. x / q and r * q are exact (q is a power of two), and
 * nearbyint rounds to nearest even in the default rounding mode, so the only
 * rounding is the one we want: no double rounding through float.
 */
static double half_round(const struct half_format *f, double x)
{
	if (!isfinite(x) || x == 0)
		return x;
	int e = ilogb(x);
	if (e < f->emin)
		e = f->emin;
	double q = ldexp(1.0, e - f->mbits);
	double r = nearbyint(x / q) * q;
	double maxv = ldexp(2.0 - ldexp(1.0, -f->mbits), f->emax);
	if (fabs(r) > maxv)
		r = copysign(INFINITY, x);
	return r;
}

/* Encodes a value that is exactly representable in the format. */
static uint16_t half_encode_exact(const struct half_format *f, double r)
{
	unsigned emask = (1u << f->ebits) - 1;
	int bias = (1 << (f->ebits - 1)) - 1;
	uint16_t sign = signbit(r) ? 0x8000 : 0;
	double a = fabs(r);

	if (isnan(r))
		return (uint16_t)(sign | (emask << f->mbits) | (1u << (f->mbits - 1)));
	if (isinf(r))
		return (uint16_t)(sign | (emask << f->mbits));
	if (a == 0)
		return sign;
	int e = ilogb(a);
	if (e < f->emin)	/* subnormal: a = m * 2^(emin - mbits) */
		return (uint16_t)(sign | (uint16_t)ldexp(a, f->mbits - f->emin));
	uint32_t m = (uint32_t)ldexp(a, f->mbits - e) - (1u << f->mbits);
	return (uint16_t)(sign | ((uint32_t)(e + bias) << f->mbits) | m);
}

/* fp32 to bf16, ties to even, on the bits: the rounding PyTorch uses. */
static uint16_t f32_to_bf16(uint32_t u)
{
	if ((u & 0x7f800000) == 0x7f800000 && (u & 0x7fffff))
		return (uint16_t)((u >> 16) | 0x40);	/* keep NaN a NaN */
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

int wd_round16(const struct wd_view *src, enum wd_dtype to, uint16_t *dst)
{
	const struct half_format *f = half_format_of(to);
	const struct half_table *from16 = half_table_get(src->dtype);

	if (!f || (!src->data && src->numel))
		return -EINVAL;
	if (src->dtype == WD_F32 && to == WD_BF16) {
		const uint32_t *u = src->data;
		for (uint64_t i = 0; i < src->numel; i++)
			dst[i] = f32_to_bf16(u[i]);
		return 0;
	}
	if (src->dtype == to) {
		memcpy(dst, src->data, src->numel * 2);
		return 0;
	}
	int mode = fegetround();
	fesetround(FE_TONEAREST);
	for (uint64_t i = 0; i < src->numel; i++) {
		double x;
		switch (src->dtype) {
		case WD_F32: x = ((const float *)src->data)[i]; break;
		case WD_F64: x = ((const double *)src->data)[i]; break;
		default: x = from16->value[((const uint16_t *)src->data)[i]]; break;
		}
		dst[i] = half_encode_exact(f, half_round(f, x));
	}
	fesetround(mode);
	return 0;
}
