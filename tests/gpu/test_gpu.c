/*
 * test_gpu.c: the CUDA engine against the CPU engine, on fresh random data:
 * every dtype, sizes 1, 31, 4097, 2^20 and 2^28, equal and unequal, mixed
 * dtypes, NaN and +-Inf sprinkled in; views in pageable, pinned and device
 * memory; results queued past the arena and tensors freed before the sync.
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

#include <cuda_runtime_api.h>	/* the C runtime API: no nvcc needed */

#define REL 1e-9
#define ABS 1e-15
#define POISON 0xa5

static int n_ok, n_fail, n_shown;
static struct wd_engine *cpu, *gpu;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double normal(void)
{
	double s = 0;
	for (int i = 0; i < 4; i++)
		s += (double)(next() >> 11) / 9007199254740992.0 - 0.5;
	return s * 0.035;
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
		x[i] = normal();
	if (n >= 31) {
		size_t k = n / 997 + 1;
		for (size_t j = 0; j < k; j++) {
			size_t at = next() % n;
			x[at] = (j % 3 == 0) ? NAN : (j % 3 == 1) ? INFINITY : -INFINITY;
		}
		x[next() % n] = -0.0;
		x[next() % n] = 0.0;
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

static char last_log[256] = "no reason logged";

static void remember_log(int level, const char *msg)
{
	(void)level;
	snprintf(last_log, sizeof(last_log), "%s", msg);
	fprintf(stderr, "wdrift: %s\n", msg);
}

int main(int argc, char **argv)
{
	int max_log2 = argc > 1 ? atoi(argv[1]) : 28;
	size_t sizes[] = { 1, 31, 4097, (size_t)1 << 20, (size_t)1 << 28 };
	int n_sizes = 0;

	while (n_sizes < 5 && max_log2 >= 0 && max_log2 < 63 &&
	       sizes[n_sizes] <= (size_t)1 << max_log2)
		n_sizes++;	/* those up to 2^MAX_LOG2 */

	wd_log_set(WD_LOG_WARNING, remember_log);
	if (wd_engine_open(WD_BACKEND_CUDA, &gpu) == -ENODEV) {
		/* say why: on a GPU machine an old driver also lands here */
		printf("1..0 # SKIP no usable CUDA device: %s\n", last_log);
		return 77;
	}
	wd_log_set(WD_LOG_WARNING, NULL);
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
	check(wd_engine_backend(gpu) == WD_BACKEND_CUDA, "engine still on the device", "end", 0, 0);
	wd_engine_close(&gpu);
	wd_engine_close(&cpu);
	printf("%s 1 - gpu engine matches the cpu engine (%d checks, %d failed)\n",
	       n_fail ? "not ok" : "ok", n_ok + n_fail, n_fail);
	printf("# %d passed, %d failed\n", n_ok, n_fail);
	return n_fail ? 1 : 0;
}
