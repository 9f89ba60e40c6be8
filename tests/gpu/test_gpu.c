/*
 * test_gpu.c: the CUDA engine against the CPU engine, on fresh random data:
 * every dtype, sizes 1, 31, 4097, 2^20 and 2^28, equal and unequal, mixed
 * dtypes, NaN and +-Inf sprinkled in; views in pageable, pinned and device
 * memory; results queued past the arena and tensors freed before the sync.
 * Then the cases a review found missing, one function each:
 *   - test_upcast_bf16: fp32 that is upcast bf16, counted from its upper
 *     halves, against itself, real fp32, bf16, fp16 and fp64; one stray low
 *     half (element 70, the last one, a NaN's payload) makes it sorted;
 *   - test_constant: constant tensors, where whole warps hold one code;
 *   - test_w1_enomem: W1 whose device temporaries do not fit the budget
 *     falls back to the host without giving the device up;
 *   - test_odd_views: device views at misaligned addresses and on another
 *     device; the caller's current device is kept by every engine call.
 * Every output is poisoned before each call, and the first mismatches are
 * printed. A fall back to the CPU fails the test: it would compare the CPU
 * with itself. Exits 77 (skip) when there is no CUDA device. Depends on the
 * engine and CUDA only (no HDF5, ZeroMQ or YAML), so that it builds on a
 * bare GPU machine.
 *
 *   test_gpu [MAX_LOG2]     largest size 2^MAX_LOG2 (default 28)
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wdrift.h"
#include "../unit/rng.h"
/*
 * Internal: wdrift.h cannot say where a prepared tensor lives, and a tensor
 * that goes to the CPU (over the budget) does so silently. The checks below
 * use prepared_on_device(), and test_w1_enomem reads dev_bytes to set a
 * budget between two allocations; nothing else of it.
 */
#include "prepared.h"

#include <cuda_runtime_api.h>	/* the C runtime API: no nvcc needed */

#define REL 1e-9
#define ABS 1e-15
#define POISON 0xa5

static int n_ok, n_fail, n_shown;
static struct wd_engine *cpu, *gpu;
static int max_log2 = 28;

/*
 * The library's log: the reason a device could not be opened, and the ERR
 * lines a device error writes (a failed CUDA call, "falling back to the
 * cpu"). Cases that must stay on the device check that none was logged.
 */
static char last_log[256] = "no reason logged";
static int n_errors_logged;

static void remember_log(int level, const char *msg)
{
	if (level <= WD_LOG_ERR)
		n_errors_logged++;
	snprintf(last_log, sizeof(last_log), "%s", msg);
	fprintf(stderr, "wdrift: %s\n", msg);
}

static int same(double got, double want)
{
	if (isnan(want))
		return isnan(got);
	if (want == 0)
		return fabs(got) <= ABS;
	return fabs(got - want) <= REL * fabs(want);
}

/* One assertion; prints the first 20 failures in full. */
static void check(int ok, const char *what, const char *ctx, double got, double want)
{
	if (ok) {
		n_ok++;
		return;
	}
	n_fail++;
	if (n_shown++ < 20)
		printf("not ok - %s %s: gpu %.17g cpu %.17g\n", ctx, what, got, want);
}

/* A tensor of n values of type t, with non-finite values sprinkled in. */
static void *make(enum wd_dtype t, size_t n)
{
	double *x = malloc(n * 8 + 8);
	void *out = malloc(n * wd_dtype_size(t) + 8);
	struct wd_view v = { WD_F64, x, n };

	for (size_t i = 0; i < n; i++)
		x[i] = rng_normal(0.035);
	if (n >= 31) {
		size_t k = n / 997 + 1;
		for (size_t j = 0; j < k; j++) {
			size_t at = rng_next() % n;
			x[at] = (j % 3 == 0) ? NAN : (j % 3 == 1) ? INFINITY : -INFINITY;
		}
		x[rng_next() % n] = -0.0;
		x[rng_next() % n] = 0.0;
	}
	switch (t) {
	case WD_F32:
		for (size_t i = 0; i < n; i++)
			((float *)out)[i] = (float)x[i];
		break;
	case WD_F64:
		memcpy(out, x, n * 8);
		break;
	default:
		wd_round16(&v, t, out);
		break;
	}
	free(x);
	return out;
}

static void compare_summaries(const char *ctx, const char *side, struct wd_prepared *g,
			      struct wd_prepared *c)
{
	struct wd_summary sg, sc;
	char what[64];

	memset(&sg, POISON, sizeof(sg));
	wd_summarize(g, &sg);
	wd_summarize(c, &sc);
	snprintf(what, sizeof(what), "%s nonfinite/finite counts", side);
	check(sg.n_finite == sc.n_finite && sg.nonfinite.nan == sc.nonfinite.nan &&
	      sg.nonfinite.posinf == sc.nonfinite.posinf &&
	      sg.nonfinite.neginf == sc.nonfinite.neginf && sg.numel == sc.numel,
	      what, ctx, (double)sg.n_finite, (double)sc.n_finite);
	double gv[5] = { sg.mean, sg.std, sg.min, sg.max, sg.l2 };
	double cv[5] = { sc.mean, sc.std, sc.min, sc.max, sc.l2 };
	static const char *names[5] = { "mean", "std", "min", "max", "l2" };
	for (int k = 0; k < 5; k++) {
		/* the mean of centred data can be ~0: judge it against the spread */
		int ok = k == 0 ? (isnan(cv[0]) ? isnan(gv[0])
					       : fabs(gv[0] - cv[0]) <= 1e-9 * (fabs(cv[0]) + cv[1]) + ABS)
				: same(gv[k], cv[k]);
		snprintf(what, sizeof(what), "%s summary %s", side, names[k]);
		check(ok, what, ctx, gv[k], cv[k]);
	}
}

/* Pair statistics of two device tensors kept with WD_PREP_KEEP_RAW. */
static void compare_pairs(const char *ctx, struct wd_prepared *ga, struct wd_prepared *gb,
			  const struct wd_view *va, const struct wd_view *vb)
{
	struct wd_pair_stats pg, pc;

	memset(&pg, POISON, sizeof(pg));
	int r = wd_pair_stats_prepared(gpu, ga, gb, &pg);
	wd_pair_stats(cpu, va, vb, &pc);
	check(r == 0 && pg.n_diff == pc.n_diff && pg.n_compared == pc.n_compared,
	      "n_diff", ctx, (double)pg.n_diff, (double)pc.n_diff);
	check(same(pg.max_abs_diff, pc.max_abs_diff), "max_abs_diff", ctx,
	      pg.max_abs_diff, pc.max_abs_diff);
	check(same(pg.rel_l2, pc.rel_l2), "rel_l2", ctx, pg.rel_l2, pc.rel_l2);
}

static void run_case(enum wd_dtype ta, size_t na, enum wd_dtype tb, size_t nb, unsigned flags)
{
	char ctx[128];
	void *a = make(ta, na), *b = make(tb, nb);
	struct wd_view va = { ta, a, na }, vb = { tb, b, nb };
	struct wd_prepared *ga = NULL, *gb = NULL, *ca = NULL, *cb = NULL;
	double wg, wc;

	snprintf(ctx, sizeof(ctx), "%s[%zu] vs %s[%zu]%s", wd_dtype_name(ta), na,
		 wd_dtype_name(tb), nb, flags & WD_PREP_FORCE_SORT ? " sorted" : "");
	if (wd_prepare(gpu, &va, flags | WD_PREP_KEEP_RAW, &ga) ||
	    wd_prepare(gpu, &vb, flags | WD_PREP_KEEP_RAW, &gb) ||
	    wd_prepare(cpu, &va, flags, &ca) || wd_prepare(cpu, &vb, flags, &cb)) {
		check(0, "prepare", ctx, 0, 0);
		goto out;
	}
	check(wd_prepared_method(ga) == wd_prepared_method(ca), "method", ctx,
	      wd_prepared_method(ga), wd_prepared_method(ca));
	memset(&wg, POISON, sizeof(wg));
	int r = wd_w1(gpu, ga, gb, &wg);
	wd_w1(cpu, ca, cb, &wc);
	check(r == 0 && same(wg, wc), "w1", ctx, wg, wc);
	compare_summaries(ctx, "a", ga, ca);
	compare_summaries(ctx, "b", gb, cb);
	if (na == nb)
		compare_pairs(ctx, ga, gb, &va, &vb);
out:
	wd_prepared_free(&ga);
	wd_prepared_free(&gb);
	wd_prepared_free(&ca);
	wd_prepared_free(&cb);
	free(a);
	free(b);
	check(wd_engine_backend(gpu) == WD_BACKEND_CUDA, "engine still on the device", ctx, 0, 0);
}

/*
 * One tensor from pinned host memory and from device memory, prepared in
 * place (and kept by reference), against the CPU's results from the host.
 */
static void view_case(enum wd_dtype t, size_t n, unsigned flags)
{
	size_t bytes = n * wd_dtype_size(t);
	void *a = make(t, n), *b = make(t, n), *pin = NULL, *dev = NULL;
	struct wd_view va = { t, a, n }, vb = { t, b, n };
	struct wd_prepared *ca = NULL, *cb = NULL, *gb = NULL;
	double wc;
	char ctx[128];

	snprintf(ctx, sizeof(ctx), "%s[%zu]%s views", wd_dtype_name(t), n,
		 flags & WD_PREP_FORCE_SORT ? " sorted" : "");
	if (wd_prepare(cpu, &va, flags, &ca) || wd_prepare(cpu, &vb, flags, &cb) ||
	    wd_prepare(gpu, &vb, flags | WD_PREP_KEEP_RAW, &gb) ||
	    cudaMallocHost(&pin, bytes) || cudaMalloc(&dev, bytes) ||
	    cudaMemcpy(dev, a, bytes, cudaMemcpyHostToDevice)) {
		check(0, "set-up", ctx, 0, 0);
		goto out;
	}
	memcpy(pin, a, bytes);
	wd_w1(cpu, ca, cb, &wc);
	for (int k = 0; k < 2; k++) {
		struct wd_view vg = { t, k ? dev : pin, n };
		struct wd_prepared *ga = NULL;
		double wg;
		char kctx[160];

		snprintf(kctx, sizeof(kctx), "%s, %s memory", ctx, k ? "device" : "pinned");
		if (wd_prepare(gpu, &vg, flags | WD_PREP_KEEP_RAW, &ga)) {
			check(0, "prepare", kctx, 0, 0);
			continue;
		}
		check(wd_prepared_method(ga) == wd_prepared_method(ca), "method", kctx,
		      wd_prepared_method(ga), wd_prepared_method(ca));
		memset(&wg, POISON, sizeof(wg));
		int r = wd_w1(gpu, ga, gb, &wg);
		check(r == 0 && same(wg, wc), "w1", kctx, wg, wc);
		compare_summaries(kctx, "a", ga, ca);
		compare_pairs(kctx, ga, gb, &va, &vb);
		wd_prepared_free(&ga);	/* before its memory: the engine borrows it */
	}
	check(wd_engine_backend(gpu) == WD_BACKEND_CUDA, "engine still on the device", ctx, 0, 0);
out:
	wd_prepared_free(&ca);
	wd_prepared_free(&cb);
	wd_prepared_free(&gb);
	if (pin)
		cudaFreeHost(pin);
	if (dev)
		cudaFree(dev);
	free(a);
	free(b);
}

static void test_views(void)
{
	for (enum wd_dtype t = 0; t < WD_DTYPE_COUNT; t++) {
		view_case(t, 100003, 0);
		if (t == WD_BF16 || t == WD_F16)
			view_case(t, 100003, WD_PREP_FORCE_SORT);
	}
}

/*
 * Many W1 queued before one sync give the same numbers as one at a time;
 * so do W1 whose tensors are freed right after they are queued (device
 * memory goes back in stream order, and the next upload may reuse it), and
 * more queued results than the arena has slots.
 */
static void test_async_batch(void)
{
	enum { N = 40, MANY = 2100 };	/* MANY > ARENA_SLOTS (2048) */
	struct wd_prepared *base, *p[N];
	double w[N], w2[N], one;
	double *many = malloc(MANY * sizeof(double));
	size_t n = 10007;
	void *x = make(WD_F32, n), *y[N];
	struct wd_view v = { WD_F32, x, n };
	int bad = 0;

	if (!many || wd_prepare(gpu, &v, 0, &base)) {
		check(0, "set-up", "async batch", 0, 0);
		free(many);
		free(x);
		return;
	}
	for (int i = 0; i < N; i++) {
		enum wd_dtype t = i % 2 ? WD_F32 : WD_BF16;
		size_t bytes = (n + (size_t)i) * wd_dtype_size(t);
		void *tmp = malloc(bytes);
		y[i] = make(t, n + (size_t)i);
		memcpy(tmp, y[i], bytes);
		struct wd_view vy = { t, tmp, n + (size_t)i };
		p[i] = NULL;
		if (wd_prepare(gpu, &vy, 0, &p[i]))
			check(0, "prepare", "async batch", i, 0);
		memset(tmp, POISON, bytes);	/* the engine must not need it any more */
		free(tmp);
		memset(&w[i], POISON, sizeof(w[i]));
		wd_w1_async(gpu, base, p[i], &w[i]);
	}
	check(wd_engine_sync(gpu) == 0, "sync", "async batch", 0, 0);
	for (int i = 0; i < N; i++) {
		enum wd_dtype t = i % 2 ? WD_F32 : WD_BF16;
		struct wd_view vy = { t, y[i], n + (size_t)i };
		struct wd_prepared *q = NULL;
		memset(&w2[i], POISON, sizeof(w2[i]));
		if (wd_prepare(gpu, &vy, 0, &q) || wd_w1_async(gpu, base, q, &w2[i]))
			check(0, "prepare and queue", "freed before the sync", i, 0);
		wd_prepared_free(&q);
	}
	check(wd_engine_sync(gpu) == 0, "sync", "freed before the sync", 0, 0);
	for (int k = 0; k < MANY; k++) {
		memset(&many[k], POISON, sizeof(many[k]));
		wd_w1_async(gpu, base, p[k % N], &many[k]);
	}
	check(wd_engine_sync(gpu) == 0, "sync", "more results than arena slots", 0, 0);
	for (int i = 0; i < N; i++) {
		wd_w1(gpu, base, p[i], &one);
		check(w[i] == one, "w1 queued = w1 alone", "async batch", w[i], one);
		check(w2[i] == one, "w1 of a tensor freed before the sync = w1 alone",
		      "async batch", w2[i], one);
	}
	for (int k = 0; k < MANY; k++)
		bad += many[k] != w[k % N];
	check(!bad, "w1 past the arena's slots", "async batch", bad, 0);
	for (int i = 0; i < N; i++) {
		wd_prepared_free(&p[i]);
		free(y[i]);
	}
	wd_prepared_free(&base);
	free(many);
	free(x);
}

/* Over the budget, tensors are prepared on the host; W1 still agrees. */
static void test_budget(void)
{
	size_t n = 1 << 20;
	void *x = make(WD_F32, n), *y = make(WD_F32, n + 5);
	struct wd_view vx = { WD_F32, x, n }, vy = { WD_F32, y, n + 5 };
	struct wd_prepared *gx, *gy, *cx, *cy;
	double wg, wc;

	wd_prepare(gpu, &vx, 0, &gx);	/* on the device */
	wd_engine_set_budget(gpu, 1 << 20);	/* 1 MiB: the next one cannot fit */
	wd_prepare(gpu, &vy, 0, &gy);
	wd_engine_set_budget(gpu, 0);
	wd_prepare(cpu, &vx, 0, &cx);
	wd_prepare(cpu, &vy, 0, &cy);
	memset(&wg, POISON, sizeof(wg));
	int r = wd_w1(gpu, gx, gy, &wg);
	wd_w1(cpu, cx, cy, &wc);
	check(r == 0 && same(wg, wc), "w1 device vs host-prepared", "budget", wg, wc);
	wd_prepared_free(&gx);
	wd_prepared_free(&gy);
	wd_prepared_free(&cx);
	wd_prepared_free(&cy);
	free(x);
	free(y);
}

/* --- the cases a review found missing --- */

/* Sizes up to about 2^MAX_LOG2: 2^20 + 3 still runs under test_gpu 20. */
static int fits(size_t n)
{
	return max_log2 >= 62 || (max_log2 >= 0 && n >> max_log2 <= 1);
}

/* The caller's current device (-1 when it cannot be read). */
static int current_device(void)
{
	int d = -1;
	if (cudaGetDevice(&d) != cudaSuccess) {
		cudaGetLastError();
		d = -1;
	}
	return d;
}

/* The engine must leave the caller's current device as it found it. */
static void device_kept(int before, const char *call, const char *ctx)
{
	char what[96];
	int now = current_device();

	snprintf(what, sizeof(what), "current device kept by %s", call);
	check(now == before, what, ctx, now, before);
}

/* No device error since mark, and the engine still on the device. */
static void still_on_device(int mark, const char *ctx)
{
	int quiet = n_errors_logged == mark;

	check(quiet, "no device error logged", ctx, n_errors_logged - mark, 0);
	if (!quiet)
		printf("#   last logged: %s\n", last_log);
	check(wd_engine_backend(gpu) == WD_BACKEND_CUDA, "engine still on the device", ctx, 0, 0);
}

/*
 * Prepares vg on the GPU and vc (the same values on the host) on the CPU,
 * and checks what preparing alone gives: the method (want_method, or -1 for
 * the CPU's), the counts and the summary, where the GPU's tensor is (want_dev
 * 1: on the device, 0: on the host, -1: either), and the current device.
 * 0, or -1 with the failure counted and nothing held.
 */
static int prep_both(const char *ctx, const struct wd_view *vg, const struct wd_view *vc,
		     unsigned flags, int want_method, int want_dev, struct wd_prepared **g,
		     struct wd_prepared **c)
{
	struct wd_nonfinite ng, nc;
	int d = current_device();

	*g = *c = NULL;
	int r = wd_prepare(gpu, vg, flags, g);
	device_kept(d, "wd_prepare", ctx);
	if (r || wd_prepare(cpu, vc, flags, c)) {
		check(0, "prepare", ctx, r, 0);
		wd_prepared_free(g);
		return -1;
	}
	check(wd_prepared_method(*g) == wd_prepared_method(*c), "method", ctx,
	      wd_prepared_method(*g), wd_prepared_method(*c));
	if (want_method >= 0)
		check((int)wd_prepared_method(*g) == want_method, "method as the data asks", ctx,
		      wd_prepared_method(*g), want_method);
	if (want_dev >= 0)
		check(prepared_on_device(*g) == want_dev,
		      want_dev ? "prepared on the device" : "prepared on the host", ctx,
		      prepared_on_device(*g), want_dev);
	wd_prepared_nonfinite(*g, &ng);
	wd_prepared_nonfinite(*c, &nc);
	check(wd_prepared_finite(*g) == wd_prepared_finite(*c) && ng.nan == nc.nan &&
	      ng.posinf == nc.posinf && ng.neginf == nc.neginf &&
	      wd_prepared_numel(*g) == wd_prepared_numel(*c),
	      "prepared counts", ctx, (double)wd_prepared_finite(*g), (double)wd_prepared_finite(*c));
	compare_summaries(ctx, "tensor", *g, *c);
	device_kept(d, "wd_summarize", ctx);
	return 0;
}

/* W1 on both engines; the GPU's result, which must equal the CPU's. */
static double w1_both(const char *ctx, const struct wd_prepared *ga, const struct wd_prepared *gb,
		      const struct wd_prepared *ca, const struct wd_prepared *cb)
{
	double wg, wc;
	int d = current_device();

	memset(&wg, POISON, sizeof(wg));
	int r = wd_w1(gpu, ga, gb, &wg);
	device_kept(d, "wd_w1", ctx);
	wd_w1(cpu, ca, cb, &wc);
	check(r == 0 && same(wg, wc), "w1", ctx, wg, wc);
	return wg;
}

static void free_both(struct wd_prepared **g, struct wd_prepared **c)
{
	int d = current_device();

	wd_prepared_free(g);
	device_kept(d, "wd_prepared_free", "free");
	wd_prepared_free(c);
}

/* bf16 codes as the fp32 words they are the upper halves of. */
static uint32_t *widen(const uint16_t *h, size_t n)
{
	uint32_t *u = malloc(n * 4 + 8);
	for (size_t i = 0; i < n; i++)
		u[i] = (uint32_t)h[i] << 16;
	return u;
}

/*
 * Random fp32 values that are all bf16 values (low halves zero), with NaN
 * (quiet, signalling-looking and negative), +-Inf and +-0 among them.
 */
static uint32_t *make_upcast(size_t n)
{
	static const uint32_t special[] = { 0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u,
					    0x00000000u, 0x7f810000u, 0xffc10000u };
	uint16_t *h = make(WD_BF16, n);
	uint32_t *u = widen(h, n);

	free(h);
	if (n >= 31)	/* at 8, 11, ... 26: clear of element 70 and the end */
		for (size_t k = 0; k < sizeof(special) / sizeof(special[0]); k++)
			u[8 + 3 * k] = special[k];
	return u;
}

/*
 * fp32 that is upcast bf16 (every low half zero) must be counted with
 * hist16_kernel<uint32_t, 16>, not sorted, and give the CPU's numbers
 * against every other kind of tensor; a single non-zero low half anywhere,
 * past the CPU's 64-element prefix check, at the very end, or in a NaN's
 * payload, must make it sorted instead. Guards the classify pass's low-half
 * OR and the counting of upper halves, which no other case reaches.
 */
static void test_upcast_bf16(void)
{
	static const size_t sizes[] = { 1, 31, 4097, ((size_t)1 << 20) + 3 };
	enum { U, U2, U3, F, B, B2, H, D, US, N_T };
	static const char *names[N_T] = { "upcast", "upcast'", "upcast (longer)", "f32",
					   "bf16 (same values)", "bf16", "f16", "f64",
					   "upcast sorted" };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s], len[N_T];
		void *x[N_T];
		struct wd_view v[N_T];
		struct wd_prepared *g[N_T] = { 0 }, *c[N_T] = { 0 };
		char ctx[160];
		int mark = n_errors_logged, ok = 1;

		if (!fits(n))
			continue;
		x[U] = make_upcast(n);
		x[U2] = make_upcast(n);
		x[U3] = make_upcast(len[U3] = n + n / 3 + 1);
		x[F] = make(WD_F32, n);
		x[B] = malloc(n * 2 + 8);
		for (size_t i = 0; i < n; i++)
			((uint16_t *)x[B])[i] = (uint16_t)(((uint32_t *)x[U])[i] >> 16);
		x[B2] = make(WD_BF16, len[B2] = n + 5);
		x[H] = make(WD_F16, n);
		x[D] = make(WD_F64, n);
		x[US] = x[U];
		for (int k = 0; k < N_T; k++) {
			static const enum wd_dtype type[N_T] = { WD_F32, WD_F32, WD_F32, WD_F32,
								 WD_BF16, WD_BF16, WD_F16, WD_F64, WD_F32 };
			int counted = k != F && k != D && k != US;
			if (k != U3 && k != B2)
				len[k] = n;
			v[k] = (struct wd_view){ type[k], x[k], len[k] };
			snprintf(ctx, sizeof(ctx), "%s[%zu]", names[k], len[k]);
			if (prep_both(ctx, &v[k], &v[k],
				      WD_PREP_KEEP_RAW | (k == US ? WD_PREP_FORCE_SORT : 0),
				      k == US ? WD_METHOD_SORT : counted ? WD_METHOD_HIST16 : -1, 1,
				      &g[k], &c[k]))
				ok = 0;
		}
		if (ok) {
			static const int pair[][2] = { { U, U2 }, { U, U3 }, { U3, U }, { U, F },
						       { F, U }, { U, B }, { B, U }, { U, B2 },
						       { U, H }, { H, U }, { U, D }, { D, U },
						       { U, US }, { US, U2 } };
			for (size_t k = 0; k < sizeof(pair) / sizeof(pair[0]); k++) {
				int a = pair[k][0], b = pair[k][1];
				snprintf(ctx, sizeof(ctx), "%s[%zu] vs %s[%zu]", names[a], len[a],
					 names[b], len[b]);
				double w = w1_both(ctx, g[a], g[b], c[a], c[b]);
				if ((a == U && b == B) || (a == U && b == US))
					check(w == 0, "w1 of equal values is 0", ctx, w, 0);
			}
			static const int eq[][2] = { { U, U2 }, { U, F }, { U, B }, { U, H }, { U, D } };
			for (size_t k = 0; k < sizeof(eq) / sizeof(eq[0]); k++) {
				int a = eq[k][0], b = eq[k][1];
				snprintf(ctx, sizeof(ctx), "%s[%zu] vs %s[%zu]", names[a], n, names[b], n);
				compare_pairs(ctx, g[a], g[b], &v[a], &v[b]);
			}
		}
		/* one stray low half: sorted, as on the CPU */
		static const struct { const char *where; uint32_t bits; } stray[] = {
			{ "element 70", 0x3e800001u }, { "the last element", 0xbf800001u },
			{ "a NaN's payload at 70", 0x7fc00001u } };
		for (size_t k = 0; n > 70 && k < sizeof(stray) / sizeof(stray[0]); k++) {
			uint32_t *y = malloc(n * 4 + 8);
			struct wd_view vy = { WD_F32, y, n };
			struct wd_prepared *gy, *cy;

			memcpy(y, x[U], n * 4);
			y[k == 1 ? n - 1 : 70] = stray[k].bits;
			snprintf(ctx, sizeof(ctx), "upcast[%zu] but for %s", n, stray[k].where);
			if (!prep_both(ctx, &vy, &vy, 0, WD_METHOD_SORT, 1, &gy, &cy)) {
				if (ok) {
					w1_both(ctx, gy, g[U], cy, c[U]);
					w1_both(ctx, g[F], gy, c[F], cy);
				}
				free_both(&gy, &cy);
			}
			free(y);
		}
		for (int k = 0; k < N_T; k++) {
			free_both(&g[k], &c[k]);
			if (k != US)
				free(x[k]);
		}
		snprintf(ctx, sizeof(ctx), "upcast bf16, size %zu", n);
		still_on_device(mark, ctx);
	}

	/* one element each: +-0 are equal, and W1 with nothing finite is NaN */
	static const uint32_t one[][2] = { { 0x80000000u, 0 }, { 0x7fc00000u, 0x3f800000u },
					   { 0x7f800000u, 0xff800000u }, { 0xbf800000u, 0x3f800000u } };
	int mark = n_errors_logged;
	for (size_t k = 0; k < sizeof(one) / sizeof(one[0]); k++) {
		struct wd_view va = { WD_F32, &one[k][0], 1 }, vb = { WD_F32, &one[k][1], 1 };
		struct wd_prepared *ga, *gb, *ca, *cb;
		char ctx[96];

		snprintf(ctx, sizeof(ctx), "upcast[1] 0x%08x vs 0x%08x", (unsigned)one[k][0],
			 (unsigned)one[k][1]);
		if (prep_both(ctx, &va, &va, 0, WD_METHOD_HIST16, 1, &ga, &ca))
			continue;
		if (!prep_both(ctx, &vb, &vb, 0, WD_METHOD_HIST16, 1, &gb, &cb)) {
			w1_both(ctx, ga, gb, ca, cb);
			free_both(&gb, &cb);
		}
		free_both(&ga, &ca);
	}
	still_on_device(mark, "upcast bf16, one element");
}

/*
 * n values of bf16 or fp16 (upcast: fp32 words of bf16 values), all equal
 * to value but the one at index at, which is other.
 */
static void *make_const(enum wd_dtype t, int upcast, size_t n, double value, size_t at,
			double other)
{
	double *x = malloc(n * 8 + 8);
	uint16_t *h = malloc(n * 2 + 8);
	struct wd_view v = { WD_F64, x, n };

	for (size_t i = 0; i < n; i++)
		x[i] = value;
	x[at] = other;
	wd_round16(&v, upcast ? WD_BF16 : t, h);
	free(x);
	if (!upcast)
		return h;
	uint32_t *u = widen(h, n);
	free(h);
	return u;
}

/*
 * Constant tensors: every lane of a warp holds one code, which the count
 * adds 32 at a time (hist16_kernel's whole-warp path), down to a last,
 * partial chunk of one element (2^20 + 1) and warps cut short by the end.
 * Zeros of either sign, ones, a constant with one other value at a random
 * position (the warp that holds it takes the per-lane path), -0 with one
 * +0 (the two sign halves of the count), and all NaN (nothing finite).
 * W1 between every two, and against random data; counts, summaries and
 * element-wise statistics against the CPU's.
 */
static void test_constant(void)
{
	static const size_t sizes[] = { 32, 1024, (size_t)1 << 20, ((size_t)1 << 20) + 1 };
	static const struct { const char *name; double value, other; } pat[] = {
		{ "all 0", 0.0, 0.0 }, { "all -0", -0.0, -0.0 }, { "all 1", 1.0, 1.0 },
		{ "1 but one -3", 1.0, -3.0 }, { "-0 but one +0", -0.0, 0.0 },
		{ "all NaN", NAN, NAN } };
	enum { NP = sizeof(pat) / sizeof(pat[0]) };
	static const struct { enum wd_dtype t; int upcast; const char *name; } kind[] = {
		{ WD_BF16, 0, "bf16" }, { WD_F16, 0, "f16" }, { WD_F32, 1, "upcast f32" } };

	for (size_t k = 0; k < sizeof(kind) / sizeof(kind[0]); k++)
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			size_t n = sizes[s];
			void *x[NP + 1];
			struct wd_view v[NP + 1];
			struct wd_prepared *g[NP + 1] = { 0 }, *c[NP + 1] = { 0 };
			char ctx[160];
			int mark = n_errors_logged, ok = 1;

			if (!fits(n))
				continue;
			for (int p = 0; p <= NP; p++) {	/* the last: random data */
				if (p < NP)
					x[p] = make_const(kind[k].t, kind[k].upcast, n, pat[p].value,
							  rng_next() % n, pat[p].other);
				else
					x[p] = kind[k].upcast ? (void *)make_upcast(n) : make(kind[k].t, n);
				v[p] = (struct wd_view){ kind[k].t, x[p], n };
				snprintf(ctx, sizeof(ctx), "%s[%zu] %s", kind[k].name, n,
					 p < NP ? pat[p].name : "random");
				if (prep_both(ctx, &v[p], &v[p], WD_PREP_KEEP_RAW, WD_METHOD_HIST16, 1,
					      &g[p], &c[p]))
					ok = 0;
			}
			for (int a = 0; ok && a < NP; a++)
				for (int b = a; b <= NP; b++) {
					snprintf(ctx, sizeof(ctx), "%s[%zu] %s vs %s", kind[k].name, n,
						 pat[a].name, b < NP ? pat[b].name : "random");
					w1_both(ctx, g[a], g[b], c[a], c[b]);
					if (b < NP && b != a)
						w1_both(ctx, g[b], g[a], c[b], c[a]);
					compare_pairs(ctx, g[a], g[b], &v[a], &v[b]);
				}
			for (int p = 0; p <= NP; p++) {
				free_both(&g[p], &c[p]);
				free(x[p]);
			}
			snprintf(ctx, sizeof(ctx), "constant %s, size %zu", kind[k].name, n);
			still_on_device(mark, ctx);
		}
}

/*
 * W1 between two device tensors whose temporaries do not fit: a 16-bit
 * count meeting a sorted tensor, or a count of the other format, is
 * expanded into keys in new device memory (expand_to_keys), and over the
 * budget that returns -ENOMEM. wd_w1_async must then copy what it needs to
 * the host and compute there: the same numbers, with the device kept, the
 * tensors still on it, and nothing logged. Also one where the first
 * expansion fits and the second does not (the first must be given back).
 */
static void test_w1_enomem(void)
{
	size_t n = fits((size_t)1 << 20) ? (size_t)1 << 20 : 4097;
	enum { A, S, H, U, D, SMALL, N_T };
	static const char *names[N_T] = { "bf16 count", "f32 sorted", "f16 count",
					  "upcast count", "f64 sorted", "small bf16 count" };
	static const int pair[][2] = { { A, S }, { S, A }, { A, H }, { H, S }, { U, D },
				       { D, U }, { A, U }, { A, A }, { S, D } };
	enum { NPAIR = sizeof(pair) / sizeof(pair[0]) };
	size_t len[N_T] = { n, n + 7, n + 1, n, n, 31 };
	void *x[N_T];
	struct wd_view v[N_T];
	struct wd_prepared *g[N_T] = { 0 }, *c[N_T] = { 0 };
	double base[NPAIR], over[NPAIR], queued[NPAIR];
	char ctx[160];
	int mark = n_errors_logged, ok = 1;

	x[A] = make(WD_BF16, len[A]);
	x[S] = make(WD_F32, len[S]);
	x[H] = make(WD_F16, len[H]);
	x[U] = make_upcast(len[U]);
	x[D] = make(WD_F64, len[D]);
	x[SMALL] = make(WD_BF16, len[SMALL]);
	for (int k = 0; k < N_T; k++) {
		static const enum wd_dtype type[N_T] = { WD_BF16, WD_F32, WD_F16, WD_F32, WD_F64,
							 WD_BF16 };
		v[k] = (struct wd_view){ type[k], x[k], len[k] };
		snprintf(ctx, sizeof(ctx), "w1 over the budget: %s[%zu]", names[k], len[k]);
		if (prep_both(ctx, &v[k], &v[k], 0, k == S || k == D ? WD_METHOD_SORT : WD_METHOD_HIST16,
			      1, &g[k], &c[k]))
			ok = 0;
	}
	if (!ok)
		goto out;
	for (int k = 0; k < NPAIR; k++) {
		int a = pair[k][0], b = pair[k][1];
		snprintf(ctx, sizeof(ctx), "w1 within the budget: %s vs %s", names[a], names[b]);
		base[k] = w1_both(ctx, g[a], g[b], c[a], c[b]);
	}

	wd_engine_set_budget(gpu, 1);	/* not one more byte */
	for (int k = 0; k < NPAIR; k++) {
		int a = pair[k][0], b = pair[k][1];
		snprintf(ctx, sizeof(ctx), "w1 over the budget: %s vs %s", names[a], names[b]);
		over[k] = w1_both(ctx, g[a], g[b], c[a], c[b]);
	}
	/* queued: results from the host and from the device, written by one sync */
	for (int k = 0; k < NPAIR; k++) {
		memset(&queued[k], POISON, sizeof(queued[k]));
		int r = wd_w1_async(gpu, g[pair[k][0]], g[pair[k][1]], &queued[k]);
		check(r == 0, "queue w1", "w1 over the budget, queued", r, 0);
	}
	check(wd_engine_sync(gpu) == 0, "sync", "w1 over the budget, queued", 0, 0);
	for (int k = 0; k < NPAIR; k++)
		check(queued[k] == over[k], "queued w1 over the budget = w1 alone",
		      names[pair[k][0]], queued[k], over[k]);

	/*
	 * Room for the small count's expansion (its keys and the offsets of at
	 * most 65536 codes) but not for the f16 count's. The engine's holdings
	 * are read from the tensors; if that misjudges them, both expansions
	 * fail, which is still a fall back to check, only not this one.
	 */
	uint64_t held = 0;
	for (int k = 0; k < N_T; k++)
		held += g[k]->dev_bytes;
	wd_engine_set_budget(gpu, held + len[SMALL] * 4 + 65536 * 8 + 4096);
	snprintf(ctx, sizeof(ctx), "w1 over the budget at the second expansion: %s vs %s",
		 names[SMALL], names[H]);
	w1_both(ctx, g[SMALL], g[H], c[SMALL], c[H]);
	w1_both(ctx, g[SMALL], g[H], c[SMALL], c[H]);	/* nothing leaked from the first */

	wd_engine_set_budget(gpu, 0);
	for (int k = 0; k < N_T; k++) {
		snprintf(ctx, sizeof(ctx), "w1 over the budget: %s kept", names[k]);
		check(prepared_on_device(g[k]), "still on the device", ctx, 0, 1);
	}
	for (int k = 0; k < NPAIR; k++) {
		int a = pair[k][0], b = pair[k][1];
		snprintf(ctx, sizeof(ctx), "w1 within the budget again: %s vs %s", names[a], names[b]);
		double w = w1_both(ctx, g[a], g[b], c[a], c[b]);
		check(w == base[k], "w1 on the device again = w1 before, to the bit", ctx, w,
		      base[k]);
	}
out:
	wd_engine_set_budget(gpu, 0);
	for (int k = 0; k < N_T; k++) {
		free_both(&g[k], &c[k]);
		free(x[k]);
	}
	still_on_device(mark, "w1 over the budget");
}

/*
 * A tensor prepared on the device and W1 against a host-prepared one: the
 * device is still usable after an odd view.
 */
static void device_usable(const char *after)
{
	size_t n = 100003;
	void *a = make(WD_F32, n), *b = make(WD_BF16, n + 3), *dev = NULL;
	struct wd_view va = { WD_F32, a, n }, vb = { WD_BF16, b, n + 3 }, vd = { WD_F32, NULL, n };
	struct wd_prepared *ga = NULL, *gb = NULL, *gd = NULL, *ca = NULL, *cb = NULL, *cd = NULL;
	char ctx[160];

	snprintf(ctx, sizeof(ctx), "the device after %s", after);
	if (cudaMalloc(&dev, n * 4) || cudaMemcpy(dev, a, n * 4, cudaMemcpyHostToDevice)) {
		cudaGetLastError();
		check(0, "set-up", ctx, 0, 0);
		goto out;
	}
	vd.data = dev;
	if (!prep_both(ctx, &va, &va, 0, -1, 1, &ga, &ca) &&
	    !prep_both(ctx, &vb, &vb, 0, WD_METHOD_HIST16, 1, &gb, &cb) &&
	    !prep_both(ctx, &vd, &va, 0, -1, 1, &gd, &cd)) {
		w1_both(ctx, ga, gb, ca, cb);
		w1_both(ctx, gd, gb, cd, cb);
		w1_both(ctx, ga, gd, ca, cd);
	}
out:
	free_both(&ga, &ca);
	free_both(&gb, &cb);
	free_both(&gd, &cd);	/* before its memory: the engine borrows it */
	if (dev)
		cudaFree(dev);
	free(a);
	free(b);
}

/*
 * A device view at an address misaligned for its element size: the
 * kernels' loads would fault there, and a fault ends the device (the
 * context is lost for good). The engine must notice and go another way
 * (its host-copy path), with the CPU's numbers and the device kept.
 */
static void misaligned_case(enum wd_dtype t, int upcast, size_t off)
{
	size_t n = 100003, bytes = n * wd_dtype_size(t);
	void *a = upcast ? (void *)make_upcast(n) : make(t, n), *o = make(WD_F32, n + 11);
	char *buf = NULL;
	struct wd_view vh = { t, a, n }, vo = { WD_F32, o, n + 11 };
	struct wd_prepared *gv = NULL, *cv = NULL, *go = NULL, *co = NULL;
	char ctx[160];
	int mark = n_errors_logged;

	snprintf(ctx, sizeof(ctx), "%s%s[%zu] device view at byte offset %zu", upcast ? "upcast " : "",
		 wd_dtype_name(t), n, off);
	if (cudaMalloc((void **)&buf, bytes + 16) ||
	    cudaMemcpy(buf + off, a, bytes, cudaMemcpyHostToDevice)) {
		cudaGetLastError();
		check(0, "set-up", ctx, 0, 0);
		goto out;
	}
	struct wd_view vd = { t, buf + off, n };
	for (int keep = 0; keep < 2; keep++) {
		if (prep_both(ctx, &vd, &vh, keep ? WD_PREP_KEEP_RAW : 0,
			      upcast || t == WD_BF16 || t == WD_F16 ? WD_METHOD_HIST16 : -1, -1,
			      &gv, &cv))
			continue;
		if (!go && prep_both(ctx, &vo, &vo, 0, -1, 1, &go, &co))
			break;
		w1_both(ctx, gv, go, cv, co);
		w1_both(ctx, go, gv, co, cv);
		free_both(&gv, &cv);
	}
	still_on_device(mark, ctx);
out:
	free_both(&gv, &cv);
	free_both(&go, &co);
	if (buf)
		cudaFree(buf);
	free(a);
	free(o);
}

/*
 * With two devices or more: data on device 1 while the engine works on
 * device 0, and a caller whose current device is 1. The engine must set
 * its own device for its work and put the caller's back (a kernel on
 * device 0's stream with device 1 current fails, and would end the device),
 * and must not read device 1's memory in place without peer access.
 */
static void other_device_case(void)
{
	size_t n = 100003, bytes = n * 4;
	void *a = make(WD_F32, n), *b = make(WD_BF16, n + 1), *e = make(WD_F32, n);
	void *buf = NULL;
	struct wd_view vh = { WD_F32, a, n }, vb = { WD_BF16, b, n + 1 }, ve = { WD_F32, e, n };
	struct wd_prepared *gv = NULL, *cv = NULL, *gb = NULL, *cb = NULL, *ge = NULL, *ce = NULL;
	struct wd_engine *other = NULL;
	int count = 0, mark = n_errors_logged;
	const char *ctx = "device view on device 1";

	if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
		cudaGetLastError();
		printf("# one device: views on another device and a caller on device 1 not tested\n");
		goto out;
	}
	if (cudaSetDevice(1) || cudaMalloc(&buf, bytes) ||
	    cudaMemcpy(buf, a, bytes, cudaMemcpyHostToDevice) || cudaSetDevice(0)) {
		cudaGetLastError();
		check(0, "set-up", ctx, 0, 0);
		goto out;
	}
	struct wd_view vd = { WD_F32, buf, n };

	/* the caller on device 0, the data on device 1 */
	if (!prep_both(ctx, &vd, &vh, WD_PREP_KEEP_RAW, -1, -1, &gv, &cv) &&
	    !prep_both(ctx, &vb, &vb, 0, WD_METHOD_HIST16, 1, &gb, &cb))
		w1_both(ctx, gv, gb, cv, cb);
	free_both(&gv, &cv);

	/* the caller on device 1: every call must keep it */
	ctx = "caller on device 1";
	if (cudaSetDevice(1)) {
		cudaGetLastError();
		check(0, "cudaSetDevice(1)", ctx, 0, 0);
		goto out;
	}
	if (!prep_both(ctx, &vd, &vh, WD_PREP_KEEP_RAW, -1, -1, &gv, &cv) &&
	    !prep_both(ctx, &ve, &ve, WD_PREP_KEEP_RAW, -1, 1, &ge, &ce) && gb) {
		double w;
		w1_both(ctx, gv, gb, cv, cb);
		w1_both(ctx, ge, gb, ce, cb);
		w1_both(ctx, gv, ge, cv, ce);
		memset(&w, POISON, sizeof(w));
		check(wd_w1_async(gpu, ge, gb, &w) == 0, "queue w1", ctx, 0, 0);
		device_kept(1, "wd_w1_async", ctx);
		check(wd_engine_sync(gpu) == 0, "sync", ctx, 0, 0);
		device_kept(1, "wd_engine_sync", ctx);
		compare_pairs(ctx, ge, ge, &ve, &ve);	/* a kernel on device 0's stream */
		device_kept(1, "wd_pair_stats_prepared", ctx);
	}
	free_both(&gv, &cv);
	free_both(&ge, &ce);
	check(wd_engine_open(WD_BACKEND_CUDA, &other) == 0, "open a second engine", ctx, 0, 0);
	device_kept(1, "wd_engine_open", ctx);
	wd_engine_close(&other);
	device_kept(1, "wd_engine_close", ctx);
	cudaSetDevice(0);
	still_on_device(mark, "views on another device");
out:
	free_both(&gb, &cb);
	cudaSetDevice(0);
	if (buf)
		cudaFree(buf);
	free(a);
	free(b);
	free(e);
}

static void test_odd_views(void)
{
	misaligned_case(WD_F32, 0, 1);
	misaligned_case(WD_F32, 0, 2);
	misaligned_case(WD_F32, 1, 2);	/* upcast bf16: counted from misaligned words */
	misaligned_case(WD_BF16, 0, 1);
	misaligned_case(WD_F16, 0, 1);
	misaligned_case(WD_F64, 0, 4);
	device_usable("misaligned views");
	other_device_case();
	device_usable("views on another device");
}

/*
 * More tensors prepared than the engine has pinned slots for their counts
 * (4096): every one must get its own counts, whether they came through a
 * slot or were settled at once. A bug once wrote the overflow's counts
 * into a slot another tensor still held. fp32 with NaN and Inf, and bf16
 * counts, none settled until all are prepared.
 */
static void test_many_pending(void)
{
	enum { N = 4200, LEN = 97 };
	struct wd_prepared **g = calloc(N, sizeof(*g)), **c = calloc(N, sizeof(*c));
	int bad = 0;

	for (int k = 0; k < N && g && c; k++) {
		enum wd_dtype t = k % 3 ? WD_F32 : WD_BF16;
		void *x = make(t, LEN + k % 50);
		struct wd_view v = { t, x, LEN + (size_t)(k % 50) };
		if (wd_prepare(gpu, &v, 0, &g[k]) || wd_prepare(cpu, &v, 0, &c[k]))
			bad++;
		free(x);
	}
	for (int k = 0; k < N && g && c; k++) {
		struct wd_nonfinite a, b;
		if (!g[k] || !c[k])
			continue;
		wd_prepared_nonfinite(g[k], &a);
		wd_prepared_nonfinite(c[k], &b);
		bad += wd_prepared_finite(g[k]) != wd_prepared_finite(c[k]) || a.nan != b.nan ||
		       a.posinf != b.posinf || a.neginf != b.neginf;
		if (!prepared_on_device(g[k]))
			bad++;
	}
	check(bad == 0, "4200 tensors prepared before any is used: each its own counts, on the device",
	      "slots", bad, 0);
	for (int k = 0; k < N && g && c; k++) {
		wd_prepared_free(&g[k]);
		wd_prepared_free(&c[k]);
	}
	free(g);
	free(c);
}

int main(int argc, char **argv)
{
	size_t sizes[] = { 1, 31, 4097, (size_t)1 << 20, (size_t)1 << 28 };
	int n_sizes = 0;

	rng_state = 0x2545f4914f6cdd1dull;	/* the data this test has always had */
	max_log2 = argc > 1 ? atoi(argv[1]) : 28;
	while (n_sizes < 5 && max_log2 >= 0 && max_log2 < 63 &&
	       sizes[n_sizes] <= (size_t)1 << max_log2)
		n_sizes++;	/* those up to 2^MAX_LOG2 */

	wd_log_set(WD_LOG_WARNING, remember_log);
	if (wd_engine_open(WD_BACKEND_CUDA, &gpu) == -ENODEV) {
		/* say why: on a GPU machine an old driver also lands here */
		printf("1..0 # SKIP no usable CUDA device: %s\n", last_log);
		return 77;
	}
	/* remember_log stays: it prints as the default does, and counts errors */
	if (!gpu || wd_engine_open(WD_BACKEND_CPU, &cpu)) {
		printf("not ok 1 - cannot open the engines\n");
		return 1;
	}
	printf("# gpu engine: %s\n", wd_engine_describe(gpu));
	for (int i = 0; i < n_sizes; i++) {
		size_t n = sizes[i], m = sizes[(i + 1) % n_sizes];
		for (enum wd_dtype t = 0; t < WD_DTYPE_COUNT; t++) {
			run_case(t, n, t, n, 0);			/* equal */
			run_case(t, n, t, n + n / 3 + 1, 0);		/* unequal */
			if (n <= ((size_t)1 << 20)) {
				run_case(t, n, (t + 1) % WD_DTYPE_COUNT, n, 0);	/* mixed */
				run_case(t, n, t, m, 0);
				if (t == WD_BF16 || t == WD_F16)
					run_case(t, n, t, n, WD_PREP_FORCE_SORT);
			}
		}
		printf("# size %zu done: %d checks, %d failed\n", n, n_ok + n_fail, n_fail);
		fflush(stdout);
	}
	test_views();
	test_async_batch();
	test_budget();
	test_upcast_bf16();
	test_constant();
	test_w1_enomem();
	test_many_pending();
	test_odd_views();	/* last: a fault there would end the device for the rest */
	check(wd_engine_backend(gpu) == WD_BACKEND_CUDA, "engine still on the device", "end", 0, 0);
	wd_engine_close(&gpu);
	wd_engine_close(&cpu);
	printf("%s 1 - gpu engine matches the cpu engine (%d checks, %d failed)\n",
	       n_fail ? "not ok" : "ok", n_ok + n_fail, n_fail);
	printf("# %d passed, %d failed\n", n_ok, n_fail);
	return n_fail ? 1 : 0;
}
