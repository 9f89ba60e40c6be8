/*
 * test_engine.c: the CPU engine against definitions and an independent
 * reference: a qsort and a CDF merge in long double, written here without
 * any of the engine's code.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"	/* cpu_pair_code: each pair-statistics code in turn */
#include "cdf.h"
#include "harness.h"
#include "wdrift.h"
#include "rng.h"

#define REL 1e-9
#define ABS 1e-15

static int cmp_ld(const void *a, const void *b)
{
	long double x = *(const long double *)a, y = *(const long double *)b;
	return (x > y) - (x < y);
}

/* Reference W1 of the finite values, as scipy defines it. */
static double ref_w1(const double *a, size_t na, const double *b, size_t nb)
{
	long double *u = malloc((na + 1) * sizeof(*u)), *v = malloc((nb + 1) * sizeof(*v));
	size_t n = 0, m = 0, i = 0, j = 0;
	long double w = 0, prev = 0;

	for (size_t k = 0; k < na; k++)
		if (isfinite(a[k]))
			u[n++] = a[k];
	for (size_t k = 0; k < nb; k++)
		if (isfinite(b[k]))
			v[m++] = b[k];
	if (!n || !m) {
		free(u);
		free(v);
		return NAN;
	}
	qsort(u, n, sizeof(*u), cmp_ld);
	qsort(v, m, sizeof(*v), cmp_ld);
	prev = u[0] < v[0] ? u[0] : v[0];
	while (i < n || j < m) {
		long double x = (j >= m || (i < n && u[i] <= v[j])) ? u[i] : v[j];
		w += fabsl((long double)i / n - (long double)j / m) * (x - prev);
		while (i < n && u[i] == x) i++;
		while (j < m && v[j] == x) j++;
		prev = x;
	}
	free(u);
	free(v);
	return (double)w;
}

static struct wd_engine *eng;

/* W1 of two double arrays given as the dtype t (converted here). */
static void *to_dtype(const double *x, size_t n, enum wd_dtype t)
{
	/* the exact size, so that ASan sees a read past the last value */
	void *out = malloc(n ? n * wd_dtype_size(t) : 1);
	struct wd_view src = { WD_F64, x, n };
	for (size_t i = 0; i < n; i++) {
		if (t == WD_F32) ((float *)out)[i] = (float)x[i];
		if (t == WD_F64) ((double *)out)[i] = x[i];
	}
	if (t == WD_F16 || t == WD_BF16)
		wd_round16(&src, t, out);
	return out;
}

/* The values a dtype really holds, back as doubles, for the reference. */
static double *as_held(const void *data, size_t n, enum wd_dtype t)
{
	double *d = malloc(n * 8 + 8);
	for (size_t i = 0; i < n; i++) {
		switch (t) {
		case WD_F32: d[i] = ((const float *)data)[i]; break;
		case WD_F64: d[i] = ((const double *)data)[i]; break;
		default: d[i] = wd_decode16(t, ((const uint16_t *)data)[i]); break;
		}
	}
	return d;
}

static double engine_w1(const void *a, size_t na, enum wd_dtype ta, unsigned fa,
			const void *b, size_t nb, enum wd_dtype tb, unsigned fb)
{
	struct wd_view va = { ta, a, na }, vb = { tb, b, nb };
	struct wd_prepared *pa = NULL, *pb = NULL;
	double w = -1;

	if (wd_prepare(eng, &va, fa, &pa) || wd_prepare(eng, &vb, fb, &pb))
		return -1;
	wd_w1(eng, pa, pb, &w);
	wd_prepared_free(&pa);
	wd_prepared_free(&pb);
	return w;
}

/* Checks W1 of x (as ta) and y (as tb) against the reference. */
static void check_pair(const char *what, const double *x, size_t nx, enum wd_dtype ta,
		       const double *y, size_t ny, enum wd_dtype tb)
{
	void *a = to_dtype(x, nx, ta), *b = to_dtype(y, ny, tb);
	double *ha = as_held(a, nx, ta), *hb = as_held(b, ny, tb);
	double want = ref_w1(ha, nx, hb, ny);
	double got = engine_w1(a, nx, ta, 0, b, ny, tb, 0);
	double sorted = engine_w1(a, nx, ta, WD_PREP_FORCE_SORT, b, ny, tb, WD_PREP_FORCE_SORT);

	CHECK(close_to(got, want, REL, ABS), "%s %s/%s n=%zu/%zu: w1 %.17g want %.17g",
	      what, wd_dtype_name(ta), wd_dtype_name(tb), nx, ny, got, want);
	CHECK(close_to(sorted, want, REL, ABS), "%s %s/%s n=%zu/%zu sort path: %.17g want %.17g",
	      what, wd_dtype_name(ta), wd_dtype_name(tb), nx, ny, sorted, want);
	free(a); free(b); free(ha); free(hb);
}

static void test_definitions(void)
{
	double x[1000], y[1000];
	for (int i = 0; i < 1000; i++)
		x[i] = rng_normal(0.1);
	for (int t = 0; t < WD_DTYPE_COUNT; t++) {
		void *a = to_dtype(x, 1000, t);
		double w = engine_w1(a, 1000, t, 0, a, 1000, t, 0);
		CHECK(w == 0, "identical %s tensors: w1 %g, want 0", wd_dtype_name(t), w);
		free(a);
	}
	/* A shift by c moves every value by c: W1 = |c| (exact in f64). */
	for (int i = 0; i < 1000; i++)
		y[i] = x[i] + 0.25;
	double w = engine_w1(x, 1000, WD_F64, 0, y, 1000, WD_F64, 0);
	CHECK(close_to(w, 0.25, 1e-12, 0), "shift by 0.25: w1 %.17g", w);
	for (int i = 0; i < 1000; i++)
		y[i] = x[i] - 3.0;
	w = engine_w1(y, 1000, WD_F64, 0, x, 1000, WD_F64, 0);
	CHECK(close_to(w, 3.0, 1e-12, 0), "shift by -3: w1 %.17g", w);
	/* bf16 codes shifted by a power of two stay exact. */
	float fx[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, fy[8];
	for (int i = 0; i < 8; i++)
		fy[i] = fx[i] + 16;
	w = engine_w1(fx, 8, WD_F32, 0, fy, 8, WD_F32, 0);
	CHECK(w == 16, "upcast-bf16 shift by 16: w1 %g", w);

	/* 1-element inputs: |a - b|. */
	double one = 1.5, two = -2.25;
	w = engine_w1(&one, 1, WD_F64, 0, &two, 1, WD_F64, 0);
	CHECK(w == 3.75, "1-element: w1 %g, want 3.75", w);
	/* 1 against many: mean |x_i - a|. */
	double many[4] = { 0, 1, 2, 3 }, zero = 0;
	w = engine_w1(&zero, 1, WD_F64, 0, many, 4, WD_F64, 0);
	CHECK(w == 1.5, "1 against 4: w1 %g, want 1.5", w);
	/* Unequal sizes, by hand: u={0,1}, v={0,0,1}: integral of |F-G| = 1/6. */
	double u2[2] = { 0, 1 }, v3[3] = { 0, 0, 1 };
	w = engine_w1(u2, 2, WD_F64, 0, v3, 3, WD_F64, 0);
	CHECK(close_to(w, 1.0 / 6, 1e-15, 0), "unequal by hand: w1 %.17g, want 1/6", w);
}

static void test_zeros_and_nonfinite(void)
{
	/* -0 and +0 are the same value. */
	float nz[4] = { -0.0f, -0.0f, 1, 2 }, pz[4] = { 0.0f, 0.0f, 1, 2 };
	double w = engine_w1(nz, 4, WD_F32, WD_PREP_FORCE_SORT, pz, 4, WD_F32, WD_PREP_FORCE_SORT);
	CHECK(w == 0, "-0 against +0 (sort): w1 %g", w);
	w = engine_w1(nz, 4, WD_F32, 0, pz, 4, WD_F32, 0);
	CHECK(w == 0, "-0 against +0 (hist): w1 %g", w);
	float mixed[5] = { 0.0f, -0.0f, -1, 0.0f, -0.0f }, plain[5] = { -1, 0, 0, 0, 0 };
	w = engine_w1(mixed, 5, WD_F32, WD_PREP_FORCE_SORT, plain, 5, WD_F32, WD_PREP_FORCE_SORT);
	CHECK(w == 0, "interleaved signed zeros sort as equal: w1 %g", w);

	/* Non-finite values are counted per kind and left out of W1. */
	float a[8] = { 1, NAN, 2, INFINITY, 3, -INFINITY, NAN, 4.5f };
	float b[5] = { 1, 2, 3, 4.5f, -INFINITY };
	for (unsigned flags = 0; flags <= WD_PREP_FORCE_SORT; flags++) {
		struct wd_view va = { WD_F32, a, 8 }, vb = { WD_F32, b, 5 };
		struct wd_prepared *pa, *pb;
		struct wd_nonfinite nf;
		wd_prepare(eng, &va, flags, &pa);
		wd_prepare(eng, &vb, flags, &pb);
		wd_prepared_nonfinite(pa, &nf);
		CHECK(nf.nan == 2 && nf.posinf == 1 && nf.neginf == 1,
		      "f32 nonfinite counts (flags %u): nan %llu +inf %llu -inf %llu", flags,
		      (unsigned long long)nf.nan, (unsigned long long)nf.posinf,
		      (unsigned long long)nf.neginf);
		CHECK(wd_prepared_finite(pa) == 4 && wd_prepared_numel(pa) == 8,
		      "finite 4 of 8: %llu", (unsigned long long)wd_prepared_finite(pa));
		wd_w1(eng, pa, pb, &w);
		CHECK(w == 0, "non-finite left out of W1: %g", w);
		wd_prepared_free(&pa);
		wd_prepared_free(&pb);
	}
	/* All non-finite: W1 is undefined (NaN), not 0. */
	double nans[3] = { NAN, INFINITY, NAN }, fin[2] = { 1, 2 };
	w = engine_w1(nans, 3, WD_F64, 0, fin, 2, WD_F64, 0);
	CHECK(isnan(w), "no finite value on one side: w1 is NaN (%g)", w);
	w = engine_w1(fin, 0, WD_F64, 0, fin, 2, WD_F64, 0);
	CHECK(isnan(w), "empty tensor: w1 is NaN (%g)", w);

	/* 16-bit non-finite codes: fp16 0x7e00 NaN, 0x7c00 +Inf, 0xfc00 -Inf. */
	uint16_t h[6] = { 0x3c00, 0x7e00, 0x7c00, 0xfc00, 0xfe01, 0x0000 };
	struct wd_view vh = { WD_F16, h, 6 };
	struct wd_prepared *ph;
	struct wd_nonfinite nf;
	struct wd_summary s;
	wd_prepare(eng, &vh, 0, &ph);
	wd_prepared_nonfinite(ph, &nf);
	wd_summarize(ph, &s);
	CHECK(nf.nan == 2 && nf.posinf == 1 && nf.neginf == 1 && s.n_finite == 2,
	      "fp16 nonfinite: nan %llu +inf %llu -inf %llu finite %llu",
	      (unsigned long long)nf.nan, (unsigned long long)nf.posinf,
	      (unsigned long long)nf.neginf, (unsigned long long)s.n_finite);
	CHECK(s.min == 0 && s.max == 1 && s.mean == 0.5 && s.std == 0.5,
	      "fp16 summary of {1, 0}: min %g max %g mean %g std %g", s.min, s.max, s.mean, s.std);
	wd_prepared_free(&ph);
}

/* The 65536 codes of each format: decoded against ldexp, in value order. */
static void test_codes16(void)
{
	for (enum wd_dtype t = WD_F16; t <= WD_BF16; t++) {
		int mbits = t == WD_F16 ? 10 : 7, ebits = t == WD_F16 ? 5 : 8;
		int bias = (1 << (ebits - 1)) - 1, bad = 0, finite = 0;
		for (uint32_t c = 0; c < 65536; c++) {
			uint32_t e = (c >> mbits) & ((1u << ebits) - 1), m = c & ((1u << mbits) - 1);
			double want, got = wd_decode16(t, (uint16_t)c);
			if (e == (1u << ebits) - 1)
				want = m ? NAN : ((c & 0x8000) ? -INFINITY : INFINITY);
			else
				want = ldexp(e ? (double)(m + (1u << mbits)) : (double)m,
					     (e ? (int)e : 1) - bias - mbits) * ((c & 0x8000) ? -1 : 1);
			if (!(got == want || (isnan(got) && isnan(want))) ||
			    signbit(got) != signbit(want))
				bad++;
			finite += isfinite(want);
		}
		CHECK(!bad, "%s: all 65536 codes decode as their fields say (%d bad)",
		      wd_dtype_name(t), bad);
		/* Every finite code, once, in value order: one sample per code. */
		uint16_t *codes = malloc(65536 * 2);
		for (uint32_t c = 0; c < 65536; c++)
			codes[c] = (uint16_t)c;
		struct wd_view v = { t, codes, 65536 };
		struct wd_prepared *hist, *sorted;
		struct wd_summary s;
		wd_prepare(eng, &v, 0, &hist);
		wd_prepare(eng, &v, WD_PREP_FORCE_SORT, &sorted);
		wd_summarize(hist, &s);
		CHECK(wd_prepared_method(hist) == WD_METHOD_HIST16 &&
		      wd_prepared_method(sorted) == WD_METHOD_SORT, "%s: methods", wd_dtype_name(t));
		CHECK(s.n_finite == (uint64_t)finite, "%s: %llu finite codes, want %d",
		      wd_dtype_name(t), (unsigned long long)s.n_finite, finite);
		double w;
		wd_w1(eng, hist, sorted, &w);
		CHECK(w == 0, "%s: all codes, hist against sort: w1 %g", wd_dtype_name(t), w);
		/* Order: a tensor of every code against itself shifted by one code
		 * must give the mean gap, which is only right if the order is. */
		double *vals = malloc(65536 * 8);
		size_t n = 0;
		for (uint32_t c = 0; c < 65536; c++)
			if (isfinite(wd_decode16(t, (uint16_t)c)))
				vals[n++] = wd_decode16(t, (uint16_t)c);
		double want = ref_w1(vals, n, vals, n - 1 > 0 ? n - 1 : 1);
		struct wd_view vt = { WD_F64, vals, n - 1 };
		struct wd_prepared *pt;
		wd_prepare(eng, &vt, 0, &pt);
		wd_w1(eng, hist, pt, &w);
		CHECK(close_to(w, want, REL, ABS), "%s: all codes against all but one: %.17g want %.17g",
		      wd_dtype_name(t), w, want);
		wd_prepared_free(&pt);
		wd_prepared_free(&hist);
		wd_prepared_free(&sorted);
		free(vals);
		free(codes);
	}
}

/*
 * W1 of two 16-bit counts, step by step over every finite code in value
 * order, as lib/w1.c defined it before it skipped steps: the bits its
 * shortcuts (the codes below and above both tensors, |F - G| kept between
 * the codes either holds, a 64-bit conversion) must keep. Written here
 * again, 128-bit conversion and all, so that it shares no code with w1.c.
 */
static int cmp_code_value(const void *x, const void *y, void *t)
{
	double a = wd_decode16(*(enum wd_dtype *)t, *(const uint16_t *)x);
	double b = wd_decode16(*(enum wd_dtype *)t, *(const uint16_t *)y);
	return (a > b) - (a < b);
}

static double ref_hist_w1(enum wd_dtype t, const uint16_t *a, size_t na_all, const uint16_t *b,
			  size_t nb_all)
{
	static uint64_t ha[65536], hb[65536];
	static uint16_t order[65536];
	uint32_t n_order = 0;
	uint64_t na = 0, nb = 0, ca = 0, cb = 0;
	double w = 0;

	memset(ha, 0, sizeof(ha));
	memset(hb, 0, sizeof(hb));
	for (size_t i = 0; i < na_all; i++)
		ha[a[i]]++;
	for (size_t i = 0; i < nb_all; i++)
		hb[b[i]]++;
	for (uint32_t c = 0; c < 65536; c++)
		if (isfinite(wd_decode16(t, (uint16_t)c))) {
			order[n_order++] = (uint16_t)c;
			na += ha[c];
			nb += hb[c];
		}
	qsort_r(order, n_order, sizeof(order[0]), cmp_code_value, &t);
	for (uint32_t j = 0; j + 1 < n_order; j++) {
		ca += ha[order[j]];
		cb += hb[order[j]];
		unsigned __int128 x = (unsigned __int128)ca * nb, y = (unsigned __int128)cb * na;
		double step = (double)(x > y ? x - y : y - x) / ((double)na * (double)nb);
		w += step * (wd_decode16(t, order[j + 1]) - wd_decode16(t, order[j]));
	}
	return w;
}

/* The codes of one shape's tensors (test_hist_scan_bits); b may be set to a. */
static void hist_shape(enum wd_dtype t, int shape, uint16_t *a, size_t na, uint16_t *b, size_t nb,
		       uint64_t *r)
{
	const uint16_t nan = t == WD_BF16 ? 0x7FC0 : 0x7E00;
	const uint16_t lowest = t == WD_BF16 ? 0xFF7F : 0xFBFF, highest = t == WD_BF16 ? 0x7F7F : 0x7BFF;

	for (size_t i = 0; i < na + nb; i++) {
		uint64_t x = (*r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17);
		size_t at = i < na ? i : i - na;
		double v = shape == 0 ? ((double)(x % 20001) - 10000) * 1e-6	/* narrow: few codes */
			 : shape == 2 ? (double)(x % 7)	/* a handful of values, many steps empty */
			 : shape == 3 ? 1.0		/* constant, and the extremes below */
			 : ldexp((double)(x % 2001) / 1000 - 1, (int)(x >> 40) % 30 - 20);
		uint16_t code;
		wd_round16(&(struct wd_view){ WD_F64, &v, 1 }, t, &code);
		if (shape == 3 && i == 0)
			code = lowest;
		if (shape == 3 && i == na + nb - 1)
			code = highest;
		if (shape == 4)		/* -0 and +0 only, but for one 1.0 in b */
			code = i == na ? (uint16_t)(t == WD_BF16 ? 0x3F80 : 0x3C00) : (uint16_t)((x & 1) << 15);
		if (shape == 5 && at != 0)	/* NaN but for each tensor's first value */
			code = nan;
		if (shape == 6 && i >= na)	/* one value each, at opposite ends */
			code = highest;
		if (shape == 6 && i < na)
			code = lowest;
		if (shape < 4 && i % 97 == 5)
			code = nan;	/* a NaN now and then */
		(i < na ? a : b)[at] = code;
	}
}

static void test_hist_scan_bits(void)
{
	static const size_t sizes[][2] = { { 1, 1 }, { 7, 1000 }, { 1000, 1000 }, { 100000, 99999 } };
	uint64_t r = 0x9E3779B97F4A7C15ull;
	struct wd_engine *cpu = NULL;

	/* the CPU's scan: a device's sums another way (docs/gpu.md) */
	if (wd_engine_open(WD_BACKEND_CPU, &cpu)) {
		CHECK(0, "a CPU engine for the scan's bits");
		return;
	}
	for (enum wd_dtype t = WD_F16; t <= WD_BF16; t++)
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
	for (int shape = 0; shape < 8; shape++) {
		size_t na = sizes[k][0], nb = shape == 7 ? na : sizes[k][1];	/* 7: one buffer, both sides */
		uint16_t *a = malloc(na * 2), *b = malloc(nb * 2);
		hist_shape(t, shape == 7 ? 1 : shape, a, na, b, nb, &r);
		const uint16_t *bb = shape == 7 ? a : b;
		struct wd_prepared *pa, *pb;
		double got = NAN, want = ref_hist_w1(t, a, na, bb, nb);
		int ok = wd_prepare(cpu, &(struct wd_view){ t, a, na }, 0, &pa) == 0 &&
			 wd_prepare(cpu, &(struct wd_view){ t, bb, nb }, 0, &pb) == 0 &&
			 wd_w1(cpu, pa, pb, &got) == 0;
		CHECK(ok && (!memcmp(&got, &want, sizeof(got)) || (isnan(got) && isnan(want))),
		      "%s, %zu against %zu values, shape %d: the W1 scan's bits are a step-by-step "
		      "scan's (%.17g, want %.17g)", wd_dtype_name(t), na, nb, shape, got, want);
		wd_prepared_free(&pa);
		wd_prepared_free(&pb);
		free(a);
		free(b);
	}
	wd_engine_close(&cpu);

	/*
	 * |F - G| converts a difference below 2^64 in 64 bits, and at or
	 * above it in 128 (cdf.h): both round as the 128-bit conversion does,
	 * around 2^53 (ties) and 2^64, where no tensor's counts reach.
	 */
	static const unsigned long long q[][4] = {	/* ca, na, cb, nb */
		{ (1ull << 53) + 1, 2, 0, 1 }, { (1ull << 53) + 3, 2, 0, 1 },
		{ UINT64_MAX, UINT64_MAX, 0, 1 }, { 1ull << 32, 1ull << 33, 0, 1ull << 32 },
		{ 1ull << 32, 1ull << 33, 0, (1ull << 32) + 1 }, { 1ull << 32, 1ull << 33, 0, (1ull << 32) - 1 },
		{ 0xFFFFFFFFFFFull, 0xFFFFFFFFFFFFFull, 3, 0x100000000001ull },
	};
	for (size_t k = 0; k < sizeof(q) / sizeof(q[0]); k++) {
		unsigned __int128 x = (unsigned __int128)q[k][0] * q[k][3], y = (unsigned __int128)q[k][2] * q[k][1];
		double want = (double)(x > y ? x - y : y - x) / ((double)q[k][1] * (double)q[k][3]);
		double got = wd_cdf_diff(q[k][0], q[k][1], q[k][2], q[k][3]);
		CHECK(!memcmp(&got, &want, sizeof(got)), "|F - G| of case %zu: the 128-bit conversion's bits "
		      "(%.17g, want %.17g)", k, got, want);
	}
}

/*
 * A freed count goes back to a spare list for the next prepare
 * (prepare_cpu.c: cpu_hist_get): a reused one must count from zero. Many
 * full tensors are prepared and freed, more than the list holds, then a
 * tensor of one code must have exactly its own count, and W1 against a
 * sorted copy must be 0.
 */
static void test_hist_reuse(void)
{
	enum { N = 4096, MANY = 80 };
	uint16_t *x = malloc(N * 2);
	struct wd_prepared *held[MANY] = { 0 }, *one, *sorted;
	struct wd_summary s;
	double w = -1;

	for (int i = 0; i < N; i++)
		x[i] = (uint16_t)(0x3c00 + (i & 1023));	/* f16 in [1, 2) */
	struct wd_view v = { WD_F16, x, N };
	for (int i = 0; i < MANY; i++)
		wd_prepare(eng, &v, 0, &held[i]);
	for (int i = 0; i < MANY; i++)
		wd_prepared_free(&held[i]);
	for (int i = 0; i < N; i++)
		x[i] = 0x4000;	/* f16 2.0 */
	wd_prepare(eng, &v, 0, &one);
	wd_prepare(eng, &v, WD_PREP_FORCE_SORT, &sorted);
	wd_summarize(one, &s);
	wd_w1(eng, one, sorted, &w);
	CHECK(wd_prepared_method(one) == WD_METHOD_HIST16 && s.n_finite == N && s.min == 2 &&
	      s.max == 2 && w == 0, "a reused count starts from zero (n_finite %llu, min %g, max %g, "
	      "w1 against the sort %g)", (unsigned long long)s.n_finite, s.min, s.max, w);
	wd_prepared_free(&one);
	wd_prepared_free(&sorted);
	free(x);
}

static void test_random_against_reference(void)
{
	static const size_t sizes[] = { 1, 2, 3, 31, 100, 4097, 65536, 300001 };
	const size_t ns = sizeof(sizes) / sizeof(sizes[0]);
	double *x = malloc(400000 * 8), *y = malloc(400000 * 8);

	for (size_t i = 0; i < ns; i++) {
		size_t n = sizes[i], m = sizes[(i + 3) % ns];
		for (size_t k = 0; k < n; k++)
			x[k] = rng_normal(0.05);
		for (size_t k = 0; k < (n > m ? n : m); k++)
			y[k] = rng_normal(0.05) + 0.001;
		/* sprinkle specials */
		if (n > 10) {
			x[3] = NAN; x[5] = INFINITY; x[7] = -0.0; x[9] = 0.0;
		}
		for (enum wd_dtype ta = 0; ta < WD_DTYPE_COUNT; ta++) {
			check_pair("equal", x, n, ta, y, n, ta);
			check_pair("unequal", x, n, ta, y, m, ta);
			check_pair("mixed", x, n, ta, y, n, (ta + 1) % WD_DTYPE_COUNT);
		}
	}
	free(x);
	free(y);
}

static void test_upcast_bf16(void)
{
	size_t n = 10000;
	float *a = malloc(n * 4), *b = malloc(n * 4);
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		float f = (float)rng_normal(0.02);
		memcpy(&u, &f, 4);
		u &= 0xffff0000u;
		memcpy(&a[i], &u, 4);
		b[i] = f;
	}
	struct wd_view va = { WD_F32, a, n }, vb = { WD_F32, b, n };
	struct wd_prepared *pa, *pb;
	wd_prepare(eng, &va, 0, &pa);
	wd_prepare(eng, &vb, 0, &pb);
	CHECK(wd_prepared_method(pa) == WD_METHOD_HIST16, "f32 with zero low halves takes the 16-bit path");
	CHECK(wd_prepared_method(pb) == WD_METHOD_SORT, "ordinary f32 is sorted");
	wd_prepared_free(&pa);
	wd_prepared_free(&pb);
	free(a);
	free(b);
}

/*
 * Unequal sizes whose CDFs differ by one part in na*nb: a holds m+1 values
 * lo and m values hi, b m+2 and m+1, so |F - G| = 1/(na*nb) exactly on
 * [lo, hi) and W1 = (hi - lo)/(na*nb). Two divisions and a subtraction
 * (scipy's form) cancel there to about 1e-4 relative (issue 14); the exact
 * integer difference, divided once, gives it to an ulp or two. fp32 0.1
 * and 0.7 go through the sorted merge; bf16 0.1 and 0.7 through the count,
 * whose sum over the codes between them rounds a little more.
 */
static void test_w1_nearly_equal_cdfs(void)
{
	uint64_t m = 500000, na = 2 * m + 1, nb = 2 * m + 3;
	float lo = 0.1f, hi = 0.7f;
	uint16_t lo16 = 0x3dcd, hi16 = 0x3f33;	/* bf16 0.10009765625 and 0.69921875 */
	double want = ((double)hi - (double)lo) / ((double)na * (double)nb);
	double want16 = (0.69921875 - 0.10009765625) / ((double)na * (double)nb);
	float *a = malloc(na * sizeof(*a)), *b = malloc(nb * sizeof(*b));
	uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2);
	for (uint64_t i = 0; i < na; i++)
		a[i] = i < m + 1 ? lo : hi, a16[i] = i < m + 1 ? lo16 : hi16;
	for (uint64_t i = 0; i < nb; i++)
		b[i] = i < m + 2 ? lo : hi, b16[i] = i < m + 2 ? lo16 : hi16;
	double got = engine_w1(a, na, WD_F32, 0, b, nb, WD_F32, 0);
	double got16 = engine_w1(a16, na, WD_BF16, 0, b16, nb, WD_BF16, 0);
	CHECK(close_to(got, want, 1e-15, 0), "nearly equal CDFs, f32 merge: W1 %.17g, want %.17g",
	      got, want);
	CHECK(close_to(got16, want16, 1e-13, 0), "nearly equal CDFs, bf16 count: W1 %.17g, want %.17g",
	      got16, want16);
	free(a);
	free(b);
	free(a16);
	free(b16);
}

static void test_pair_stats(void)
{
	float a[6] = { 1, -2, 3, NAN, INFINITY, 0.0f };
	float b[6] = { 1, -2.5f, 3, NAN, -INFINITY, -0.0f };
	struct wd_view va = { WD_F32, a, 6 }, vb = { WD_F32, b, 6 }, vc = { WD_F32, b, 5 };
	struct wd_pair_stats ps;

	CHECK(wd_pair_stats(eng, &va, &vb, &ps) == 0, "pair stats on equal counts");
	CHECK(ps.max_abs_diff == 0.5, "max|d| %g, want 0.5", ps.max_abs_diff);
	CHECK(close_to(ps.rel_l2, 0.5 / sqrt(14), 1e-15, 0), "rel L2 %.17g", ps.rel_l2);
	CHECK(ps.n_diff == 2 && ps.n_compared == 4,
	      "n_diff %llu (want 2: -2/-2.5 and +Inf/-Inf), compared %llu (want 4)",
	      (unsigned long long)ps.n_diff, (unsigned long long)ps.n_compared);
	CHECK(wd_pair_stats(eng, &va, &vc, &ps) == -EINVAL, "unequal counts are refused");
	double z[2] = { 0, 0 }, o[2] = { 0, 1 };
	struct wd_view vz = { WD_F64, z, 2 }, vo = { WD_F64, o, 2 };
	wd_pair_stats(eng, &vz, &vz, &ps);
	CHECK(ps.rel_l2 == 0 && ps.n_diff == 0, "zero against zero: rel L2 0");
	wd_pair_stats(eng, &vz, &vo, &ps);
	CHECK(isnan(ps.rel_l2), "||a|| = 0, a != b: rel L2 undefined (NaN)");
	/*
	 * rel_l2 wherever it is representable (issue 14: d*d underflowed to 0
	 * for every |d| below ~1e-162, and x*x overflowed above ~1e154). The
	 * references scale by a power of two, exactly, before squaring.
	 */
	double ta[3] = { 1e-170, -2e-170, 3e-170 }, tb[3], ha[2] = { 1e200, -2e200 }, hb[2];
	double ma[2] = { 1.0, 2.0 }, mb[2] = { 1.0 + 0x1p-52, 2.0 }, md[2] = { 1.0, 2.0 };
	for (int i = 0; i < 3; i++)
		tb[i] = ta[i] * (1 + 1e-6 * (i + 1));
	for (int i = 0; i < 2; i++)
		hb[i] = ha[i] * (1 - 1e-9 * (i + 1));
	md[0] += 1e-160;	/* rounds to 1.0: d is 0 */
	struct wd_view vta = { WD_F64, ta, 3 }, vtb = { WD_F64, tb, 3 };
	struct wd_view vha = { WD_F64, ha, 2 }, vhb = { WD_F64, hb, 2 };
	struct wd_view vma = { WD_F64, ma, 2 }, vmb = { WD_F64, mb, 2 }, vmd = { WD_F64, md, 2 };
	double nd = 0, na = 0;
	for (int i = 0; i < 3; i++) {
		double d = ldexp(fabs(ta[i] - tb[i]), 600), x = ldexp(ta[i], 600);
		nd += d * d;
		na += x * x;
	}
	wd_pair_stats(eng, &vta, &vtb, &ps);
	CHECK(close_to(ps.rel_l2, sqrt(nd) / sqrt(na), 1e-14, 0),
	      "tiny fp64 values (1e-170) that differ: rel L2 %.17g, want %.17g", ps.rel_l2,
	      sqrt(nd) / sqrt(na));
	nd = na = 0;
	for (int i = 0; i < 2; i++) {
		double d = ldexp(fabs(ha[i] - hb[i]), -600), x = ldexp(ha[i], -600);
		nd += d * d;
		na += x * x;
	}
	wd_pair_stats(eng, &vha, &vhb, &ps);
	CHECK(close_to(ps.rel_l2, sqrt(nd) / sqrt(na), 1e-14, 0),
	      "huge fp64 values (1e200): rel L2 %.17g, want %.17g", ps.rel_l2, sqrt(nd) / sqrt(na));
	double sa[2] = { 1e-150, 2e-150 }, sb[2] = { 1e-150 * (1 + 1e-10), 2e-150 };
	struct wd_view vsa = { WD_F64, sa, 2 }, vsb = { WD_F64, sb, 2 };
	double want = ldexp(fabs(sa[0] - sb[0]), 600) / sqrt(5) / ldexp(1e-150, 600);
	wd_pair_stats(eng, &vsa, &vsb, &ps);
	CHECK(close_to(ps.rel_l2, want, 1e-14, 0),
	      "a near 1e-150 differing by 1e-160: rel L2 %.17g, want %.17g", ps.rel_l2, want);
	wd_pair_stats(eng, &vma, &vmb, &ps);
	CHECK(close_to(ps.rel_l2, 0x1p-52 / sqrt(5), 1e-15, 0),
	      "one ulp of 1 against norm sqrt(5): rel L2 %.17g", ps.rel_l2);
	wd_pair_stats(eng, &vma, &vmd, &ps);
	CHECK(ps.rel_l2 == 0 && ps.n_diff == 0, "equal after rounding: rel L2 0");
	/* Mixed dtypes compare values: bf16 1.0 (0x3f80) against f32 1.0. */
	uint16_t one16 = 0x3f80;
	float one = 1;
	struct wd_view v16 = { WD_BF16, &one16, 1 }, v32 = { WD_F32, &one, 1 };
	wd_pair_stats(eng, &v16, &v32, &ps);
	CHECK(ps.n_diff == 0 && ps.max_abs_diff == 0, "bf16 1.0 equals f32 1.0");
}

/*
 * The pair statistics of fp32, bf16 and fp16 tensors take loops of their
 * own (lib/stats.c: pair_block_narrow, and for fp32 and bf16 pairs the
 * plain C lanes, two SSE2 vectors or one AVX2 vector of lanes, as
 * cpu_pair_code picks), which must give the bits of the general one: the
 * same values held as fp64 go through that. Values from the extremes of
 * each type: zeros of both signs, subnormals, the largest finite, NaN and
 * +-Inf, and differences between them, at the start, in the vectors, and
 * in a block's tail beyond the last whole vector (the odd sizes). Here in
 * the pair code given, on the engine given; test_pair_stats_narrow_as_f64
 * runs each. Sparse (mode 1), the extremes are only in the first block and
 * the tail, so that the blocks between are finite (the AVX2 code's guess,
 * PAIR_TWO_AVX2), but for one NaN in the fourth; the largest difference is
 * in the third, and -0 against +0 in the second. Equal (mode 2), the same
 * buffer on both sides.
 */
static void pair_stats_narrow_as_f64(struct wd_engine *e, int code, int mode)
{
	int sparse = mode >= 1;
	enum { N = 20000 };
	static const enum wd_dtype types[][2] = {
		{ WD_F32, WD_F32 }, { WD_BF16, WD_BF16 }, { WD_F16, WD_F16 }, { WD_F32, WD_BF16 },
	};
	static const char *const code_name[] = { "plain C", "SSE2", "AVX2" };
	static const size_t sizes[] = { N, N - 1, N - 3, 4096 + 2, 7 };
	static double x[N], y[N];
	uint64_t r = 88172645463325252ull;

	cpu_pair_code = code;
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		if (mode == 2 && types[k][0] != types[k][1])
			continue;	/* one buffer is one type */
		for (size_t i = 0; i < n; i++) {
			r ^= r << 13; r ^= r >> 7; r ^= r << 17;
			double m = (double)(r % 2001) / 1000 - 1;
			/* sparse: no overflow to Inf in fp32 or bf16, subnormals still */
			int ex = sparse ? (int)((r >> 20) % 200) - 130 : (int)((r >> 20) % 300) - 150;
			x[i] = ldexp(m, ex);
			y[i] = (r >> 40) % 3 ? ldexp(m + (double)((r >> 50) % 7 - 3) * 1e-3, ex) : x[i];
			if ((r >> 58) == 0 && !sparse)	/* 1 in 64: not finite, on either side or both */
				((r >> 30) & 1 ? x : y)[i] = (r >> 31) % 3 == 0 ? NAN
							   : (r >> 31) % 3 == 1 ? INFINITY : -INFINITY;
		}
		x[0] = 0; y[0] = -0.0;
		x[1] = 1e-45; y[1] = 0;		/* an fp32 subnormal; 0 in bf16 and fp16 */
		x[2] = 3.4e38; y[2] = -3.4e38;	/* fp32's largest; Inf in fp16 */
		x[3] = NAN; y[3] = NAN;
		x[4] = INFINITY; y[4] = 1;
		x[5] = -INFINITY; y[5] = -INFINITY;
		x[n - 1] = NAN; y[n - 1] = 2;		/* in the tail of the odd sizes */
		x[n - 2] = INFINITY; y[n - 2] = INFINITY;
		if (sparse) {	/* the largest difference not in the first block */
			x[2] = 1e38;
			y[2] = -1e38;
		}
		if (sparse && n > 4 * 4096) {
			x[2 * 4096 + 5] = 3.38e38; y[2 * 4096 + 5] = -3.38e38;
			x[2 * 4096 + 6] = -3.38e38; y[2 * 4096 + 6] = 3.38e38;
			x[4096 + 7] = -0.0; y[4096 + 7] = 0.0;
			y[3 * 4096 + 9] = NAN;
		}
		void *a = to_dtype(x, n, types[k][0]), *b = to_dtype(y, n, types[k][1]);
		double *ha = as_held(a, n, types[k][0]), *hb = as_held(b, n, types[k][1]);
		struct wd_view na = { types[k][0], a, n }, nb = { types[k][1], mode == 2 ? a : b, n };
		struct wd_view wa = { WD_F64, ha, n }, wb = { WD_F64, mode == 2 ? ha : hb, n };
		struct wd_pair_stats narrow, wide;
		int ok = wd_pair_stats(e, &na, &nb, &narrow) == 0 && wd_pair_stats(e, &wa, &wb, &wide) == 0;
		CHECK(ok && !memcmp(&narrow.rel_l2, &wide.rel_l2, sizeof(double)) &&
		      !memcmp(&narrow.max_abs_diff, &wide.max_abs_diff, sizeof(double)) &&
		      narrow.n_diff == wide.n_diff && narrow.n_compared == wide.n_compared,
		      "pair stats of %zu %s against %s (%s%s, %d threads): the bits of the same values as fp64 (rel_l2 "
		      "%.17g / %.17g, max %.17g / %.17g, %llu / %llu differ, %llu / %llu compared)", n,
		      wd_dtype_name(types[k][0]), wd_dtype_name(types[k][1]), code_name[code],
		      mode == 2 ? ", equal" : sparse ? ", sparse" : "", wd_engine_threads(e), narrow.rel_l2,
		      wide.rel_l2,
		      narrow.max_abs_diff, wide.max_abs_diff, (unsigned long long)narrow.n_diff,
		      (unsigned long long)wide.n_diff, (unsigned long long)narrow.n_compared,
		      (unsigned long long)wide.n_compared);
		free(a); free(b); free(ha); free(hb);
	}
	cpu_pair_code = -1;
}

/* In every code this CPU runs for fp32 and bf16 pairs (cpu_pair_code), values dense and sparse. */
static void test_pair_stats_narrow_as_f64(void)
{
	struct wd_engine *split = NULL;

	/* and split: every 4096-pair block its own part where it can be, on 3 threads */
	if (wd_engine_open(WD_BACKEND_CPU, &split) == 0) {
		wd_engine_set_threads(split, 3);
		wd_engine_set_grain(split, 1);
	}
	for (int code = CPU_PAIR_C; code <= cpu_pair_code_best(); code++)
		for (int mode = 0; mode < 3; mode++) {
			pair_stats_narrow_as_f64(eng, code, mode);
			if (split)
				pair_stats_narrow_as_f64(split, code, mode);
		}
	wd_engine_close(&split);
}

static void test_summary(void)
{
	double x[5] = { 1e6 + 1, 1e6 + 2, 1e6 + 3, NAN, 1e6 + 4 };
	struct wd_view v = { WD_F64, x, 5 };
	struct wd_prepared *p;
	struct wd_summary s;
	wd_prepare(eng, &v, 0, &p);
	wd_summarize(p, &s);
	CHECK(s.numel == 5 && s.n_finite == 4 && s.nonfinite.nan == 1, "summary counts");
	CHECK(s.mean == 1e6 + 2.5 && s.min == 1e6 + 1 && s.max == 1e6 + 4, "mean/min/max");
	CHECK(close_to(s.std, sqrt(1.25), 1e-12, 0), "std about a large mean: %.17g", s.std);
	double l2 = sqrt(pow(1e6 + 1, 2) + pow(1e6 + 2, 2) + pow(1e6 + 3, 2) + pow(1e6 + 4, 2));
	CHECK(close_to(s.l2, l2, 1e-14, 0), "l2 %.17g want %.17g", s.l2, l2);
	wd_prepared_free(&p);
}

/*
 * A summary of fp32 values sums them in float loops compiled twice, for
 * the baseline and for AVX2 (lib/stats.c: SUM_BLOCK_F32, DEV_BLOCK), which
 * cpu_pair_code picks between: every code gives the bits of the first, at
 * sizes with and without a tail past the last whole vector and block.
 */
static void test_summary_codes(void)
{
	static const size_t sizes[] = { 3, 4096, 4096 * 3 + 13, 100003 };
	float *x = malloc(100003 * sizeof(float));
	uint64_t r = 0x2545F4914F6CDD1Dull;

	struct wd_engine *cpu = NULL;

	/* the CPU's loops: a device's summaries are its own */
	if (wd_engine_open(WD_BACKEND_CPU, &cpu)) {
		CHECK(0, "a CPU engine for the summaries' codes");
		free(x);
		return;
	}
	if (cpu_pair_code_best() < CPU_PAIR_AVX2)
		printf("# no AVX2 on this CPU: the baseline loops against themselves\n");
	for (size_t i = 0; i < 100003; i++) {
		r ^= r << 13; r ^= r >> 7; r ^= r << 17;
		x[i] = (float)ldexp((double)(r % 200001) - 100000, (int)(r >> 58) - 40);
	}
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct wd_summary first = { 0 };
		for (int code = CPU_PAIR_C; code <= cpu_pair_code_best(); code++) {
			struct wd_prepared *p = NULL;
			struct wd_summary sm = { 0 };
			cpu_pair_code = code;
			if (wd_prepare(cpu, &(struct wd_view){ WD_F32, x, sizes[k] }, 0, &p)) {
				CHECK(0, "prepare %zu fp32 values", sizes[k]);
				continue;
			}
			wd_engine_summarize(cpu, p, &sm);
			wd_prepared_free(&p);
			if (code == CPU_PAIR_C)
				first = sm;
			CHECK(!memcmp(&sm.mean, &first.mean, sizeof(double)) &&
			      !memcmp(&sm.std, &first.std, sizeof(double)) &&
			      !memcmp(&sm.l2, &first.l2, sizeof(double)),
			      "summary of %zu fp32 values in code %d: the bits of code 0 (mean %.17g / %.17g, "
			      "std %.17g / %.17g, l2 %.17g / %.17g)", sizes[k], code, sm.mean, first.mean,
			      sm.std, first.std, sm.l2, first.l2);
		}
		cpu_pair_code = -1;
	}
	wd_engine_close(&cpu);
	free(x);
}

/*
 * Issue 14: a summary's l2 was a plain sum of squares, which underflows to
 * 0 below about 1e-154 and overflows above 1e154; it is scaled by
 * magnitude (lib/sumsq.h) as rel_l2's is. n values of magnitude v, signs
 * alternating, over more than one 4096-value block: l2 = sqrt(n) * v. Each
 * v has a short mantissa, so that its scaled squares add exactly and l2 is
 * off by the square root's rounding only.
 */
static void test_summary_l2_range(void)
{
	/* about 1.3e-170, 7.9e-201 and 2.7e200 */
	const double mags[] = { ldexp(1.5, -565), ldexp(1.25, -665), ldexp(1.75, 665) };
	enum { N = 5000 };
	static double x[N];

	for (size_t k = 0; k < sizeof(mags) / sizeof(mags[0]); k++) {
		double v = mags[k], want = sqrt((double)N) * v;
		struct wd_view view = { WD_F64, x, N };
		struct wd_prepared *p;
		struct wd_summary s;
		for (int i = 0; i < N; i++)
			x[i] = i % 2 ? -v : v;
		CHECK(wd_prepare(eng, &view, 0, &p) == 0, "prepare fp64 of magnitude %g", v);
		wd_summarize(p, &s);
		CHECK(s.l2 > 0 && isfinite(s.l2) && close_to(s.l2, want, 4 * 0x1p-52, 0),
		      "fp64 of magnitude %g: l2 %.17g, want sqrt(n) * v = %.17g", v, s.l2, want);
		wd_prepared_free(&p);
	}
}

/*
 * Regression: CDF fractions were c * (1/n), and n * (1/n) is not exactly 1.
 * Past both maxima |F - G| stayed ~1e-16, times the 1e38-wide gaps at the top
 * of the bf16 range: W1 ~ 1e22 for unequal finite counts.
 */
static void test_regression_cdf_fraction(void)
{
	uint16_t a[3] = { 0x3f80, 0x7f80, 0x4000 };	/* 1, +Inf, 2 */
	uint16_t b[7] = { 0x3f80, 0x4000, 0x4000, 0x4040, 0x3f80, 0x3f80, 0x4040 };
	double ha[2] = { 1, 2 }, hb[7] = { 1, 2, 2, 3, 1, 1, 3 };
	double want = ref_w1(ha, 2, hb, 7);
	double got = engine_w1(a, 3, WD_BF16, 0, b, 7, WD_BF16, 0);
	CHECK(close_to(got, want, REL, ABS), "bf16 2 vs 7 finite values: %.17g want %.17g", got, want);
}

/* Constant tensors: every radix digit is skipped, the keys decode in place. */
static void test_constant_tensors(void)
{
	float c1[5000], c2[5000];
	for (int i = 0; i < 5000; i++) {
		c1[i] = 0.123f;
		c2[i] = -0.5f;
	}
	double w = engine_w1(c1, 5000, WD_F32, 0, c2, 5000, WD_F32, 0);
	CHECK(close_to(w, 0.123f + 0.5, 1e-15, 0), "constant f32 tensors: %.17g", w);
	w = engine_w1(c1, 5000, WD_F32, 0, c2, 3000, WD_F32, 0);
	CHECK(close_to(w, 0.123f + 0.5, 1e-15, 0), "constant f32, unequal sizes: %.17g", w);
}

static void test_api_errors(void)
{
	struct wd_engine *e2;
	struct wd_prepared *p;
	struct wd_view bad = { (enum wd_dtype)9, "x", 1 }, null = { WD_F32, NULL, 3 };
	int r = wd_engine_open(WD_BACKEND_CUDA, &e2);
	if (r == 0) {
		CHECK(wd_engine_backend(e2) == WD_BACKEND_CUDA, "cuda engine opened on a device");
		wd_engine_close(&e2);
	} else {
		CHECK(r == -ENODEV && !e2, "asking for CUDA without a device: -ENODEV");
	}
	CHECK(wd_prepare(eng, &bad, 0, &p) == -EINVAL && !p, "bad dtype: -EINVAL");
	CHECK(wd_prepare(eng, &null, 0, &p) == -EINVAL && !p, "NULL data: -EINVAL");
	float one = 1;
	struct wd_view fine = { WD_F32, &one, 1 };
	struct wd_prepared *many[1];
	CHECK(wd_prepare(eng, &fine, 0xff, &p) == -EINVAL && !p &&
	      wd_prepare_many(eng, &fine, 1, 0x100, many) == -EINVAL,
	      "flags wd_prepare does not know: -EINVAL, not ignored (a trial's 0xff was taken)");
	wd_prepared_free(&p);
	CHECK(!p, "freeing NULL is safe");
}

static int notices;
static char last_notice[256];

static void capture(int level, const char *msg)
{
	if (level == WD_LOG_NOTICE) {
		notices++;
		snprintf(last_notice, sizeof(last_notice), "%s", msg);
	}
}

static void test_backend_api(void)
{
	enum wd_backend b;
	struct wd_engine *e;

	CHECK(wd_backend_parse("auto", &b) == 0 && b == WD_BACKEND_AUTO, "parse auto");
	CHECK(wd_backend_parse("cpu", &b) == 0 && b == WD_BACKEND_CPU, "parse cpu");
	CHECK(wd_backend_parse("cuda", &b) == 0 && b == WD_BACKEND_CUDA, "parse cuda");
	CHECK(wd_backend_parse("gpu", &b) == -EINVAL, "parse rejects 'gpu'");
	/*
	 * auto logs a device it opens; the cpu it logs not, as its caller sets
	 * the threads next and says it then (a trial's daemon logged the default
	 * thread count, not compute.threads)
	 */
	wd_log_set(WD_LOG_NOTICE, capture);
	notices = 0;
	CHECK(wd_engine_open(WD_BACKEND_AUTO, &e) == 0, "open auto");
	if (wd_engine_backend(e) == WD_BACKEND_CUDA)
		CHECK(notices == 1 && strstr(last_notice, "engine: ") && strstr(last_notice, wd_engine_describe(e)),
		      "auto on a device logs one line: '%s'", last_notice);
	else
		CHECK(notices == 0, "auto on the cpu logs nothing at open (%d lines)", notices);
	CHECK(wd_engine_backend(e) == (strncmp(wd_engine_describe(e), "cuda", 4) ? WD_BACKEND_CPU
										   : WD_BACKEND_CUDA),
	      "backend in use matches its description");
	wd_engine_close(&e);
	wd_log_set(WD_LOG_WARNING, NULL);
	/* a device that does not exist: cuda refuses, auto runs on the cpu */
	CHECK(wd_engine_open_device(WD_BACKEND_CPU, -1, &e) == -EINVAL && !e,
	      "a negative device: -EINVAL");
	wd_log_set(WD_LOG_NOTICE, capture);
	notices = 0;
	CHECK(wd_engine_open_device(WD_BACKEND_CUDA, 1023, &e) == -ENODEV && !e,
	      "cuda on device 1023: -ENODEV");
	CHECK(wd_engine_open_device(WD_BACKEND_AUTO, 1023, &e) == 0 &&
	      wd_engine_backend(e) == WD_BACKEND_CPU && strstr(wd_engine_describe(e), "no cuda: ") &&
	      notices == 0, "auto on device 1023: the cpu, saying why: '%s'", wd_engine_describe(e));
	if (wd_have_cuda() && strstr(wd_engine_describe(e), "no device"))
		CHECK(strstr(wd_engine_describe(e), "no device 1023 (this machine has "),
		      "the index and the count are named: '%s'", wd_engine_describe(e));
	wd_engine_close(&e);
	wd_log_set(WD_LOG_WARNING, NULL);
	CHECK(wd_engine_open_device(WD_BACKEND_CPU, 3, &e) == 0 &&
	      wd_engine_backend(e) == WD_BACKEND_CPU, "the cpu ignores the device");
	wd_engine_close(&e);
	CHECK(wd_engine_open(WD_BACKEND_CPU, &e) == 0 && wd_engine_backend(e) == WD_BACKEND_CPU,
	      "cpu asked, cpu given");
	wd_engine_set_budget(e, 1);	/* the CPU ignores it */

	/* queued W1: written by the sync, not before */
	double x[3] = { 0, 1, 2 }, y[3] = { 1, 2, 3 }, w[4];
	struct wd_view vx = { WD_F64, x, 3 }, vy = { WD_F64, y, 3 };
	struct wd_prepared *px, *py;
	wd_prepare(e, &vx, WD_PREP_KEEP_RAW, &px);
	wd_prepare(e, &vy, WD_PREP_KEEP_RAW, &py);
	for (int i = 0; i < 4; i++) {
		w[i] = -1;
		wd_w1_async(e, i % 2 ? px : py, px, &w[i]);
	}
	CHECK(w[0] == -1 && w[3] == -1, "async results wait for the sync");
	CHECK(wd_engine_sync(e) == 0 && w[0] == 1 && w[1] == 0 && w[2] == 1 && w[3] == 0,
	      "sync writes them: %g %g %g %g", w[0], w[1], w[2], w[3]);
	/* element-wise statistics from prepared tensors that kept their raw values */
	struct wd_pair_stats ps;
	CHECK(wd_pair_stats_prepared(e, px, py, &ps) == 0 && ps.max_abs_diff == 1 && ps.n_diff == 3,
	      "pair stats from kept raw values");
	struct wd_prepared *pz;
	wd_prepare(e, &vx, 0, &pz);
	CHECK(wd_pair_stats_prepared(e, px, pz, &ps) == -EINVAL, "no kept raw values: -EINVAL");
	wd_prepared_free(&pz);
	wd_prepared_free(&px);
	wd_prepared_free(&py);
	wd_engine_close(&e);
}

/*
 * Which sort takes a mid-size fp32 tensor on AUTO: the radix sort only
 * where vqsort runs its AVX2 code. On vqsort's AVX-512 code (Zen 5) vqsort
 * was 1.2-2.4x faster from 16 Ki to 128 Ki elements too (performance.md,
 * 2026-11-30), and the window measured on AVX2 had sent them to the radix.
 */
static void test_sort_choice(void)
{
	struct cpu_engine c = { .sort = WD_SORT_AUTO };
	struct wd_view v = { WD_F32, NULL, 1u << 15 };
	struct wd_engine *cpu;
	char said[256];

	if (wd_engine_open(WD_BACKEND_CPU, &cpu)) {
		CHECK(0, "cannot open the CPU engine");
		return;
	}
	snprintf(said, sizeof(said), "%s", wd_engine_describe(cpu));
	wd_engine_close(&cpu);
	const char *code = strstr(said, "vqsort ");	/* "vqsort avx2", "vqsort avx3_dl" */
	if (!code) {
		CHECK(!cpu_prepare_in_result(&c, &v, 0), "no vqsort here: the radix sort, with its scratch");
		return;
	}
	int avx2 = !strncmp(code, "vqsort avx2", 11);
	for (uint64_t n = 1u << 14; n <= 1u << 17; n <<= 1) {
		v.numel = n;
		CHECK(cpu_prepare_in_result(&c, &v, 0) == (!avx2 || n == 1u << 14 || n == 1u << 17),
		      "fp32 of %llu elements on AUTO, %.14s: %s", (unsigned long long)n, code,
		      !avx2 || n == 1u << 14 || n == 1u << 17 ? "vqsort" : "the radix sort");
	}
	v.dtype = WD_F64;
	v.numel = 1u << 15;
	CHECK(cpu_prepare_in_result(&c, &v, 0), "fp64 of 2^15: vqsort on every code");
	c.sort = WD_SORT_RADIX;
	v.dtype = WD_F32;
	CHECK(!cpu_prepare_in_result(&c, &v, 0), "the radix sort when asked for");
}

int main(void)
{
	if (wd_engine_open(WD_BACKEND_AUTO, &eng)) {
		printf("not ok 1 - cannot open the engine\n");
		return 1;
	}
	test_definitions();
	test_zeros_and_nonfinite();
	test_codes16();
	test_random_against_reference();
	test_upcast_bf16();
	test_pair_stats();
	test_pair_stats_narrow_as_f64();
	test_w1_nearly_equal_cdfs();
	test_summary();
	test_summary_codes();
	test_summary_l2_range();
	test_regression_cdf_fraction();
	test_constant_tensors();
	test_hist_reuse();
	test_hist_scan_bits();
	test_api_errors();
	test_backend_api();
	test_sort_choice();
	wd_engine_close(&eng);
	return tap_done();
}
