/*
 * test_threads.c: the engine split between threads gives the bits of one
 * thread (docs/engine.md, "Threads"): W1, summaries, pair statistics and
 * non-finite counts, compared as bytes, for 1 to 8 threads, every dtype,
 * sizes around every split point (0, 1, 2, a block of 4096 +-1, threads x
 * block +-1, the radix sort's line-buffer threshold +-1), with NaN, +-Inf
 * and +-0 among the values, and unequal sizes. The grain is 1, so that
 * even a 2-element tensor is split. Batches (wd_prepare_many,
 * wd_w1_many) against the same calls one at a time. All of it for both
 * sorts of fp32 and fp64 (wd_engine_set_sort: radix, and vqsort where the
 * build and the CPU have it), and the two sorts against each other.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <unistd.h>

#include <pthread.h>

#include "harness.h"
#include "prepared.h"
#include "rng.h"
#include "spares.h"
#include "sanitizer.h"	/* ASan's shadow memory is resident too */
#include "wdrift.h"

/* 1 when the library was built with vqsort (make VQSORT=1, the Makefile says). */
#ifndef WD_VQSORT
#define WD_VQSORT 0
#endif

#define BLOCK 4096
#define MAX_THREADS 8

/*
 * Under valgrind (WDRIFT_VALGRIND set, make check-valgrind) every path
 * still runs, on fewer threads (1 to 3), the 2^20 sizes left out and
 * fewer rounds of the changing input: the whole matrix there took 35
 * minutes of CI. Natively and under ASan it runs whole.
 */
static int small;
static int max_threads = MAX_THREADS;

/* n values of dtype t: normal, with NaN, +-Inf and +-0 sprinkled in when special. */
static void *make(enum wd_dtype t, size_t n, int special, double scale)
{
	double *x = malloc(n * sizeof(double) + 8);
	void *out = malloc(n * 8 + 8);

	for (size_t i = 0; i < n; i++) {
		x[i] = rng_normal(scale);
		if (special) {
			switch (rng_next() % 29) {
			case 0: x[i] = NAN; break;
			case 1: x[i] = INFINITY; break;
			case 2: x[i] = -INFINITY; break;
			case 3: x[i] = 0.0; break;
			case 4: x[i] = -0.0; break;
			default: break;
			}
		}
	}
	if (t == WD_F32)
		for (size_t i = 0; i < n; i++)
			((float *)out)[i] = (float)x[i];
	else if (t == WD_F64)
		memcpy(out, x, n * sizeof(double));
	else
		wd_round16(&(struct wd_view){ WD_F64, x, n }, t, out);
	free(x);
	return out;
}

/* Everything the engine says about a pair, as bytes. */
struct result {
	double w1, w1_unequal;
	struct wd_summary sa, sb;
	struct wd_pair_stats ps, ps_prepared;
};

static struct wd_engine *open_sorted(int threads, enum wd_sort sort)
{
	struct wd_engine *e;
	if (wd_engine_open(WD_BACKEND_CPU, &e))
		return NULL;
	wd_engine_set_threads(e, threads);
	wd_engine_set_grain(e, 1);
	if (wd_engine_set_sort(e, sort))
		wd_engine_close(&e);
	return e;
}

static struct wd_engine *open_threads(int threads)
{
	return open_sorted(threads, WD_SORT_AUTO);
}

static const char *sort_name(enum wd_sort sort)
{
	return sort == WD_SORT_RADIX ? "radix" : sort == WD_SORT_VQSORT ? "vqsort" : "auto";
}

static int measure(struct wd_engine *e, enum wd_dtype t, unsigned flags, const void *a,
		   const void *b, size_t n, const void *c, size_t m, struct result *r)
{
	struct wd_view va = { t, a, n }, vb = { t, b, n }, vc = { t, c, m };
	struct wd_prepared *pa = NULL, *pb = NULL, *pc = NULL;
	int err;

	memset(r, 0, sizeof(*r));
	err = wd_prepare(e, &va, flags | WD_PREP_KEEP_RAW, &pa) ||
	      wd_prepare(e, &vb, flags | WD_PREP_KEEP_RAW, &pb) || wd_prepare(e, &vc, flags, &pc) ||
	      wd_w1(e, pa, pb, &r->w1) || wd_w1(e, pa, pc, &r->w1_unequal) ||
	      wd_pair_stats(e, &va, &vb, &r->ps) || wd_pair_stats_prepared(e, pa, pb, &r->ps_prepared);
	if (!err) {
		wd_engine_summarize(e, pa, &r->sa);
		wd_engine_summarize(e, pc, &r->sb);
	}
	wd_prepared_free(&pa);
	wd_prepared_free(&pb);
	wd_prepared_free(&pc);
	return err;
}

static const char *diff_field(const struct result *x, const struct result *y)
{
	if (memcmp(&x->w1, &y->w1, sizeof(double)))
		return "w1";
	if (memcmp(&x->w1_unequal, &y->w1_unequal, sizeof(double)))
		return "w1 (unequal sizes)";
	if (memcmp(&x->sa, &y->sa, sizeof(x->sa)) || memcmp(&x->sb, &y->sb, sizeof(x->sb)))
		return "summary";
	if (memcmp(&x->ps, &y->ps, sizeof(x->ps)))
		return "pair stats";
	if (memcmp(&x->ps_prepared, &y->ps_prepared, sizeof(x->ps_prepared)))
		return "pair stats (prepared)";
	return NULL;
}

/* The sizes around every split point for up to max_threads threads. */
static size_t sizes(size_t *out)
{
	size_t k = 0;
	size_t fixed[] = { 0, 1, 2, 3, 7, BLOCK - 1, BLOCK, BLOCK + 1, 131071, 131072, 131073 };
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		out[k++] = fixed[i];
	for (size_t t = 2; t <= (size_t)max_threads; t++) {
		out[k++] = t * BLOCK - 1;
		out[k++] = t * BLOCK + 1;
	}
	return k;
}

static void test_bit_identical(enum wd_sort sort)
{
	size_t sz[64], n_sz = sizes(sz);
	struct wd_engine *e[MAX_THREADS + 1] = { 0 };
	struct { enum wd_dtype t; unsigned flags; const char *what; } kinds[] = {
		{ WD_F32, 0, "f32" }, { WD_F64, 0, "f64" }, { WD_F16, 0, "f16" },
		{ WD_BF16, 0, "bf16" }, { WD_F16, WD_PREP_FORCE_SORT, "f16 sorted" },
		{ WD_BF16, WD_PREP_FORCE_SORT, "bf16 sorted" },
	};

	for (int t = 1; t <= max_threads; t++)
		if (!(e[t] = open_sorted(t, sort))) {
			CHECK(0, "open an engine with %d threads, %s", t, sort_name(sort));
			return;
		}
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		int bad = 0, runs = 0;
		for (size_t s = 0; s < n_sz; s++) {
			for (int special = 0; special <= 1; special++) {
				size_t n = sz[s], m = n / 2 + 3;
				void *a = make(kinds[k].t, n, special, 1.0);
				void *b = make(kinds[k].t, n, special, 1.5);
				void *c = make(kinds[k].t, m, special, 0.5);
				struct result one, many;
				if (measure(e[1], kinds[k].t, kinds[k].flags, a, b, n, c, m, &one)) {
					CHECK(0, "%s n=%zu: one thread failed", kinds[k].what, n);
					bad++;
				}
				for (int t = 2; t <= max_threads && !bad; t++) {
					const char *d = NULL;
					runs++;
					if (measure(e[t], kinds[k].t, kinds[k].flags, a, b, n, c, m, &many))
						d = "an error";
					else
						d = diff_field(&one, &many);
					if (d) {
						CHECK(0, "%s n=%zu special=%d threads=%d: %s differs from one thread "
						      "(w1 %.17g vs %.17g)", kinds[k].what, n, special, t, d,
						      many.w1, one.w1);
						bad++;
					}
				}
				free(a);
				free(b);
				free(c);
			}
		}
		CHECK(!bad, "%s, %s: %d runs of 2..%d threads over %zu sizes, NaN/Inf/+-0 and unequal "
		      "sizes: bit-identical to one thread", kinds[k].what, sort_name(sort), runs,
		      max_threads, n_sz);
	}
	/* f32 made of bf16 values is counted, not sorted: split, too */
	{
		size_t n = 3 * BLOCK + 1;
		uint16_t *h = make(WD_BF16, n, 1, 1.0), *h2 = make(WD_BF16, n, 1, 2.0);
		uint32_t *u = malloc(n * 4), *u2 = malloc(n * 4);
		struct result one, many;
		int bad = 0;
		for (size_t i = 0; i < n; i++) {
			u[i] = (uint32_t)h[i] << 16;
			u2[i] = (uint32_t)h2[i] << 16;
		}
		measure(e[1], WD_F32, 0, u, u2, n, u2, n / 2, &one);
		for (int t = 2; t <= max_threads; t++)
			if (measure(e[t], WD_F32, 0, u, u2, n, u2, n / 2, &many) || diff_field(&one, &many))
				bad++;
		CHECK(!bad && !isnan(one.w1), "upcast-bf16 f32, %s: 2..%d threads bit-identical (w1 %.17g)",
		      sort_name(sort), max_threads, one.w1);
		free(h); free(h2); free(u); free(u2);
	}
	for (int t = 1; t <= max_threads; t++)
		wd_engine_close(&e[t]);
}

/*
 * Fills x with n values of a shape that stresses the vqsort split: every
 * value equal (one bucket takes all), every value non-finite (no splitter
 * from the sample), only -0, +0 and 1 (the minimum's sign must be kept),
 * two values, or ascending and descending runs.
 */
static void *shaped(int shape, enum wd_dtype t, size_t n)
{
	void *out = malloc(n * 8 + 8);

	for (size_t i = 0; i < n; i++) {
		double x;
		switch (shape) {
		case 0: x = 0.25; break;
		case 1: x = i % 3 ? NAN : (i % 2 ? INFINITY : -INFINITY); break;
		case 2: x = i % 3 == 0 ? -0.0 : i % 3 == 1 ? 0.0 : 1.0; break;
		case 3: x = i % 2 ? -1.0 : 1.0; break;
		case 4: x = (double)i - (double)n / 2; break;
		default: x = (double)n - (double)i; break;
		}
		if (t == WD_F64)
			((double *)out)[i] = x;
		else
			((float *)out)[i] = (float)x;
	}
	return out;
}

/* The sorted values of two prepared tensors, as bytes (the sign of every zero too). */
static int same_values(const struct wd_prepared *x, const struct wd_prepared *y)
{
	size_t size = x->store == WD_F64 ? 8 : 4;

	return x->method == WD_METHOD_SORT && y->method == WD_METHOD_SORT &&
	       x->store == y->store && x->n_finite == y->n_finite &&
	       !memcmp(&x->nonfinite, &y->nonfinite, sizeof(x->nonfinite)) &&
	       (!x->n_finite || !memcmp(x->values, y->values, x->n_finite * size));
}

/*
 * vqsort gives the radix sort's bits: the same sorted values (W1 between a
 * tensor prepared by each is 0), summaries, pair statistics and W1, on one
 * thread and split, on random data, the shapes above, and sizes past the
 * 2^20 where a real split (grain 65536) deals keys into buckets.
 */
static void test_sorts_agree(void)
{
	struct wd_engine *radix = open_sorted(1, WD_SORT_RADIX), *vq[3] = { 0 };
	int threads[3] = { 1, 2, 7 }, bad = 0, runs = 0;
	size_t sizes_big[] = { 1, 2, 4095, 131073, (1u << 20) + 3 };
	size_t n_big = sizeof(sizes_big) / sizeof(sizes_big[0]) - (small ? 1 : 0);

	for (int t = 0; t < 3; t++)
		vq[t] = open_sorted(threads[t], WD_SORT_VQSORT);
	if (!vq[0]) {
		CHECK(radix != NULL, "no vqsort in this build or on this CPU: the radix sort alone");
		wd_engine_close(&radix);
		return;
	}
	wd_engine_set_grain(vq[2], 0);	/* the default grain: only the 2^20 tensor splits */
	for (size_t k = 0; k < n_big; k++)
	for (int f64 = 0; f64 <= 1; f64++) {
		size_t n = sizes_big[k];
		for (int shape = -1; shape < 6; shape++) {
			enum wd_dtype t = f64 ? WD_F64 : WD_F32;
			void *a = shape < 0 ? make(t, n, 1, 1.0) : shaped(shape, t, n);
			void *b = make(t, n, 1, 2.0), *c = make(t, n / 3 + 1, 1, 0.5);
			struct result want, got;
			if (measure(radix, t, WD_PREP_FORCE_SORT, a, b, n, c, n / 3 + 1, &want)) {
				bad++;
				continue;
			}
			for (int e = 0; e < 3; e++) {
				struct wd_prepared *pr = NULL, *pv = NULL;
				struct wd_view v = { t, a, n };
				const char *d = measure(vq[e], t, WD_PREP_FORCE_SORT, a, b, n, c, n / 3 + 1, &got)
					? "an error" : diff_field(&want, &got);
				if (!d && (wd_prepare(radix, &v, WD_PREP_FORCE_SORT, &pr) ||
					   wd_prepare(vq[e], &v, WD_PREP_FORCE_SORT, &pv) || !same_values(pr, pv)))
					d = "the sorted values";
				wd_prepared_free(&pr);
				wd_prepared_free(&pv);
				runs++;
				if (d) {
					CHECK(0, "vqsort on %d threads, %s n=%zu shape %d: %s differs from the "
					      "radix sort's (w1 %.17g vs %.17g)", threads[e], f64 ? "f64" : "f32",
					      n, shape, d, got.w1, want.w1);
					bad++;
				}
			}
			free(a);
			free(b);
			free(c);
		}
	}
	CHECK(!bad, "vqsort on 1, 2 and 7 threads gives the radix sort's bits (the sorted values "
	      "as bytes, W1, summaries, pair statistics): %d runs, fp32 and fp64, sizes to %zu, "
	      "equal, non-finite, +-0 and ordered inputs", runs, sizes_big[n_big - 1]);
	wd_engine_close(&radix);
	for (int t = 0; t < 3; t++)
		wd_engine_close(&vq[t]);
}

static int have_vqsort(void)
{
	struct wd_engine *e = open_sorted(1, WD_SORT_VQSORT);
	int ok = e != NULL;
	wd_engine_close(&e);
	return ok;
}

/*
 * A buffer that changes while it is prepared (a mapping another process
 * writes to): the vqsort split reads the input twice, to count and to
 * deal, and must not write past a part's share when the two disagree.
 * One thread flips half the values between -1 and +1 throughout, and the
 * other half is 0, so the splitter falls between them whenever the sample
 * is drawn and a flip moves a value to the other bucket; every
 * prepare must succeed and stay in bounds (make check-asan and
 * check-valgrind watch the writes), with n_finite the size.
 */
struct flipper {
	uint32_t *u;
	size_t n;
	int stop;
};

static void *flip(void *arg)
{
	struct flipper *f = arg;
	uint32_t sign = 0;

	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		sign ^= 0x80000000u;
		for (size_t i = f->n / 2; i < f->n; i++)
			__atomic_store_n(&f->u[i], 0x3f800000u | sign, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void test_input_changing(void)
{
	struct flipper f = { NULL, 1u << 18, 0 };
	struct wd_engine *e = open_sorted(2, WD_SORT_AUTO);
	pthread_t th;
	int bad = 0, rounds = 0;

	f.u = malloc(f.n * sizeof(*f.u));
	for (size_t i = 0; i < f.n; i++)
		f.u[i] = i < f.n / 2 ? 0 : 0x3f800000u;	/* 0.0, then 1.0 */
	wd_engine_set_grain(e, 1024);
	if (pthread_create(&th, NULL, flip, &f)) {
		CHECK(0, "start the flipping thread");
		return;
	}
	for (; rounds < (small ? 10 : 100); rounds++) {
		struct wd_prepared *p = NULL;
		struct wd_view v = { WD_F32, f.u, f.n };
		if (wd_prepare(e, &v, WD_PREP_FORCE_SORT, &p) || p->n_finite != f.n)
			bad++;
		wd_prepared_free(&p);
	}
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	CHECK(!bad, "%d prepares on 2 threads (%s) of a tensor that changes meanwhile: each "
	      "succeeds with every value counted, nothing written out of bounds", rounds,
	      wd_engine_describe(e));
	free(f.u);
	wd_engine_close(&e);
}

/* wd_engine_set_sort: what it takes, what it refuses, and what describe says. */
static void test_sort_choice(void)
{
	struct wd_engine *e;

	if (wd_engine_open(WD_BACKEND_CPU, &e)) {
		CHECK(0, "open an engine");
		return;
	}
	int vq = wd_engine_set_sort(e, WD_SORT_VQSORT);
	CHECK(vq == 0 || vq == -ENOTSUP, "vqsort asked for: 0 or -ENOTSUP (%d)", vq);
#if WD_VQSORT && defined(__x86_64__)
	CHECK(vq == 0 || !__builtin_cpu_supports("avx2"),
	      "built with vqsort, on a CPU with AVX2: vqsort is there (%d)", vq);
	/*
	 * sort_vq.cc reads CPUID and XCR0 itself (no libhwy): the code it
	 * names agrees with libgcc's own reading of the same CPU. AMD family
	 * 19h (Zen 4) stays on AVX2 by choice. VAES is not asked here: clang 14's
	 * builtin does not know it, and each CPU with VBMI2 and VPCLMULQDQ has it.
	 */
	if (vq == 0) {
		int avx3 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
			   __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
			   __builtin_cpu_supports("avx512cd") && !__builtin_cpu_is("amdfam19h");
		int dl = avx3 && __builtin_cpu_supports("avx512vnni") &&
			 __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512vbmi") &&
			 __builtin_cpu_supports("avx512vbmi2") &&
			 __builtin_cpu_supports("avx512vpopcntdq") &&
			 __builtin_cpu_supports("avx512bitalg") && __builtin_cpu_supports("gfni");
		const char *want = dl ? "vqsort avx3_dl)" : avx3 ? "vqsort avx3)" : "vqsort avx2)";
		CHECK(strstr(wd_engine_describe(e), want) != NULL,
		      "the vqsort code chosen is the one this CPU announces: '%s' ends in '%s'",
		      wd_engine_describe(e), want);
	}
#endif
	CHECK(wd_engine_sort(e) == (vq ? WD_SORT_RADIX : WD_SORT_VQSORT) &&
	      strstr(wd_engine_describe(e), vq ? "radix sort" : "vqsort"),
	      "the sort in effect is said: '%s'", wd_engine_describe(e));
	CHECK(wd_engine_set_sort(e, WD_SORT_RADIX) == 0 && wd_engine_sort(e) == WD_SORT_RADIX &&
	      strstr(wd_engine_describe(e), "radix sort"), "radix asked for: '%s'",
	      wd_engine_describe(e));
	CHECK(wd_engine_set_sort(e, (enum wd_sort)7) == -EINVAL && wd_engine_sort(e) == WD_SORT_RADIX,
	      "an unknown sort: -EINVAL, and the sort is unchanged");
	CHECK(wd_engine_set_sort(e, WD_SORT_AUTO) == 0 &&
	      wd_engine_sort(e) == (vq ? WD_SORT_RADIX : WD_SORT_VQSORT),
	      "auto: vqsort where it is here, the radix sort elsewhere");
	wd_engine_close(&e);
}

/* The process's resident bytes (/proc/self/statm), -1 when unknown. */
static long resident_bytes(void)
{
	long pages = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f && fscanf(f, "%*d %ld", &pages) != 1)
		pages = -1;
	if (f)
		fclose(f);
	return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}


/*
 * wd_prepare_bytes: the radix sort holds its scratch beside the keys,
 * vqsort only the keys, a 16-bit count its 65536 counts, each with 1 MiB
 * for tables; and what a
 * prepare on one thread leaves resident (the tensor, the engine's scratch)
 * is within it: natively, where resident memory is the program's own
 * (under ASan or valgrind it is not).
 */
static void test_prepare_bytes(void)
{
	const uint64_t n = (uint64_t)1 << 20, tables = (uint64_t)1 << 20;
	struct wd_engine *e;

	if (wd_engine_open(WD_BACKEND_CPU, &e)) {
		CHECK(0, "open an engine");
		return;
	}
	wd_engine_set_threads(e, 1);

	CHECK(wd_prepare_bytes(e, WD_BF16, n, 0) == tables &&
	      wd_prepare_bytes(e, WD_F16, 7, WD_PREP_KEEP_RAW) == tables,
	      "16-bit data: 1 MiB of tables, where the counts are (%llu)",
	      (unsigned long long)wd_prepare_bytes(e, WD_BF16, n, 0));
	CHECK(wd_prepare_bytes(e, WD_BF16, n, WD_PREP_FORCE_SORT) >= 3 * n * 4,
	      "16-bit data forced to sort: decoded, keyed and scratch");
	CHECK(wd_prepare_bytes(e, (enum wd_dtype)99, n, 0) == 0, "a bad dtype: 0");
	for (int vq = 0; vq < 2; vq++) {
		if (wd_engine_set_sort(e, vq ? WD_SORT_VQSORT : WD_SORT_RADIX))
			continue;
		uint64_t f32 = wd_prepare_bytes(e, WD_F32, n, WD_PREP_KEEP_RAW);
		uint64_t f64 = wd_prepare_bytes(e, WD_F64, n, 0);
		CHECK(f32 == (vq ? 1 : 2) * (n + 1) * 4 + tables &&
		      f64 == (vq ? 1 : 2) * (n + 1) * 8 + tables,
		      "%s: fp32 %llu, fp64 %llu bytes for 2^20 elements", vq ? "vqsort" : "radix",
		      (unsigned long long)f32, (unsigned long long)f64);
		float *x = malloc(n * sizeof(*x));
		struct wd_prepared *p = NULL;
		if (!x) {
			CHECK(0, "out of memory");
			break;
		}
		for (uint64_t i = 0; i < n; i++)
			x[i] = (float)rng_normal(1.0);
		struct wd_view v = { WD_F32, x, n };
		wd_engine_release_scratch(e);	/* no spares left by the tests before */
		long before = resident_bytes();
		int r = wd_prepare(e, &v, WD_PREP_KEEP_RAW, &p);
		long grew = resident_bytes() - before;
		CHECK(r == 0, "%s: prepared", vq ? "vqsort" : "radix");
		if (!small && !WD_UNDER_ASAN)
			CHECK(grew > 0 && (uint64_t)grew <= f32,
			      "%s: a prepare of 2^20 fp32 left %ld bytes more resident, within %llu",
			      vq ? "vqsort" : "radix", grew, (unsigned long long)f32);
		wd_prepared_free(&p);
		/* the next tensor of the size before a trim: the freed keys again, no new pages */
		long again = resident_bytes();
		r = wd_prepare(e, &v, WD_PREP_KEEP_RAW, &p);
		long regrew = resident_bytes() - again;
		if (!small && !WD_UNDER_ASAN)
			CHECK(r == 0 && regrew < (long)(n * 4 / 8),
			      "%s: a second prepare before the trim reuses the freed keys: %ld bytes more "
			      "resident", vq ? "vqsort" : "radix", regrew);
		wd_prepared_free(&p);
		wd_engine_release_scratch(e);
		long kept = resident_bytes() - before;
		if (!small && !WD_UNDER_ASAN)
			CHECK(kept <= (long)tables, "%s: freed, and the scratch released: %ld bytes kept",
			      vq ? "vqsort" : "radix", kept);
		free(x);
	}
	wd_engine_close(&e);
}

/*
 * A spare list (lib/spares.h), as the CPU side keeps for sort keys and
 * counts: a batch freed, then the next one asked (a snapshot after
 * another, wd_prepare_many) gets its buffers back, more than the base
 * always kept, instead of fresh memory from glibc (on 2 threads glibc gave
 * it back to the kernel, and faulting it in again made a snapshot of small
 * tensors slower on 2 threads than on 1). What is kept stays within the
 * base plus what the peak out exceeds what is out now; a trim gives the
 * excess back.
 */
static void test_spares(void)
{
	enum { N = 192, SIZE = 256 << 10, BASE = 32 << 20 };	/* 48 MiB in the batch */
	static struct spares list = SPARES_INIT(64 << 10, 4 << 20, BASE);
	static void *first[N], *again[N];
	int reused = 0, ok = 1;

	for (int i = 0; i < N; i++)
		ok &= (first[i] = spares_get(&list, SIZE, 0)) != NULL;
	for (int i = 0; i < N; i++)
		spares_put(&list, first[i]);
	size_t kept = spares_kept(&list);
	if (WD_UNDER_ASAN) {	/* none kept there: ASan watches every freed buffer */
		CHECK(ok && kept == 0, "spares: none kept under ASan");
		return;
	}
	for (int i = 0; i < N; i++)
		ok &= (again[i] = spares_get(&list, SIZE, 0)) != NULL;
	size_t taken = 0;
	for (int i = 0; i < N; i++) {
		for (int k = 0; k < N; k++)
			reused += again[i] == first[k];
		taken += again[i] ? malloc_usable_size(again[i]) : 0;
	}
	CHECK(ok && kept >= (size_t)N * SIZE && reused == N && spares_kept(&list) == 0,
	      "spares: a batch of %d x 256 KiB freed is kept (%zu KiB), past the %d MiB base, and the "
	      "next batch gets all of it back (%d)", N, kept >> 10, BASE >> 20, reused);
	for (int i = 0; i < N; i++)
		spares_put(&list, again[i]);
	for (int i = 0; i < N; i++)	/* never handed out: beyond the bound, freed */
		spares_put(&list, malloc(SIZE));
	CHECK(spares_kept(&list) <= BASE + taken && spares_kept(&list) >= taken,
	      "spares: never more kept than the base beyond the peak (%zu KiB kept, peak %zu KiB)",
	      spares_kept(&list) >> 10, taken >> 10);
	spares_trim(&list);
	CHECK(spares_kept(&list) <= BASE && spares_kept(&list) > BASE - 2 * SIZE,
	      "spares: a trim gives back all but the base (%zu KiB kept)", spares_kept(&list) >> 10);
	/* every kept buffer dirtied and returned: one asked zeroed still comes zeroed */
	int nd = 0;
	while (nd < N && spares_kept(&list) && (again[nd] = spares_get(&list, SIZE, 0)))
		memset(again[nd++], 0xab, SIZE);
	for (int i = 0; i < nd; i++)
		spares_put(&list, again[i]);
	void *one = spares_get(&list, SIZE, 1), *tiny = spares_get(&list, 4096, 0);
	int zeroed = nd > 0 && one != NULL;
	for (size_t i = 0; one && i < SIZE; i++)
		zeroed &= ((unsigned char *)one)[i] == 0;
	CHECK(zeroed, "spares: a kept buffer asked zeroed is zeroed (%d dirtied)", nd);
	size_t before = spares_kept(&list);
	spares_put(&list, tiny);
	CHECK(spares_kept(&list) == before, "spares: a buffer under the list's sizes is freed, not kept");
	spares_put(&list, one);
	/* one of max bytes or more: kept under the same bound, and freed by any trim */
	void *big = spares_get(&list, 8 << 20, 0), *big2;
	size_t big_size = big ? malloc_usable_size(big) : 0, without = spares_kept(&list);
	spares_put(&list, big);
	size_t kept_big = spares_kept(&list) - without;
	big2 = spares_get(&list, 8 << 20, 0);
	CHECK(big && kept_big == big_size && big2 == big, "spares: a large buffer (8 MiB, past the "
	      "list's 4 MiB) freed is kept (%zu KiB) and comes back for the next of its size",
	      kept_big >> 10);
	spares_put(&list, big2);
	size_t with = spares_kept(&list);
	spares_trim(&list);
	CHECK(with >= big_size && spares_kept(&list) <= with - big_size,
	      "spares: a trim frees every large buffer, base or not (%zu KiB kept, then %zu KiB)",
	      with >> 10, spares_kept(&list) >> 10);
	while (spares_kept(&list) && (one = spares_get(&list, SIZE, 0)))
		free(one);	/* the list emptied, so that valgrind sees nothing left */
}

/* The default is the cores this process may use, not the host's count. */
static void test_default_threads(void)
{
	struct wd_engine *e;
	cpu_set_t set;

	if (wd_engine_open(WD_BACKEND_CPU, &e)) {
		CHECK(0, "open an engine");
		return;
	}
	sched_getaffinity(0, sizeof(set), &set);
	CHECK(wd_engine_threads(e) == CPU_COUNT(&set), "default threads %d = the affinity mask's %d",
	      wd_engine_threads(e), CPU_COUNT(&set));
	CHECK(strstr(wd_engine_describe(e), "thread") != NULL, "describe says the threads: '%s'",
	      wd_engine_describe(e));
	wd_engine_set_threads(e, 3);
	CHECK(wd_engine_threads(e) == 3 && strstr(wd_engine_describe(e), "3 threads"),
	      "set to 3: %d, '%s'", wd_engine_threads(e), wd_engine_describe(e));
	wd_engine_set_threads(e, 0);
	CHECK(wd_engine_threads(e) == CPU_COUNT(&set), "back to 0: the cores available");
	wd_engine_close(&e);
}

/* A batch gives what the same calls one at a time give. */
static void test_batches(void)
{
	enum { N = 40 };
	struct wd_view v[N];
	struct wd_prepared *one[N], *many[N];
	double w_one[N], w_many[N];
	const struct wd_prepared *pa[N], *pb[N];
	struct wd_engine *e1 = open_threads(1), *e4 = open_threads(4);
	int bad = 0;

	/* small, medium and one large tensor, of every dtype; some with nothing finite */
	for (int i = 0; i < N; i++) {
		size_t n = i % 7 == 0 ? 0 : i == 13 ? 300000 : (size_t)(i * 997 % 9000);
		enum wd_dtype t = (enum wd_dtype)(i % WD_DTYPE_COUNT);
		v[i] = (struct wd_view){ t, make(t, n, i % 3 == 0, 1.0 + i), n };
	}
	wd_engine_set_grain(e4, 1000);
	for (int i = 0; i < N; i++)
		if (wd_prepare(e1, &v[i], 0, &one[i]))
			bad++;
	int r = wd_prepare_many(e4, v, N, 0, many);
	CHECK(r == 0 && !bad, "wd_prepare_many of %d tensors: %d", N, r);
	if (r || bad)
		return;
	for (int i = 0; i < N; i++) {
		pa[i] = many[i];
		pb[i] = many[(i * 7 + 3) % N];
		if (wd_w1(e1, one[i], one[(i * 7 + 3) % N], &w_one[i]))
			bad++;
		struct wd_summary s1, s2;
		wd_summarize(one[i], &s1);
		wd_summarize(many[i], &s2);
		if (memcmp(&s1, &s2, sizeof(s1)))
			bad++;
	}
	r = wd_w1_many(e4, pa, pb, N, w_many);
	CHECK(r == 0 && !bad && !memcmp(w_one, w_many, sizeof(w_one)),
	      "wd_w1_many: the same bits as wd_w1 one at a time, summaries too (%d)", r);
	for (int i = 0; i < N; i++) {
		wd_prepared_free(&one[i]);
		wd_prepared_free(&many[i]);
		free((void *)v[i].data);
	}
	/* a bad view fails the batch and leaves nothing behind */
	v[0] = (struct wd_view){ WD_F32, NULL, 5 };
	v[1] = (struct wd_view){ WD_F32, &w_one[0], 1 };
	r = wd_prepare_many(e4, v, 2, 0, many);
	CHECK(r == -EINVAL && !many[0] && !many[1], "a NULL view in a batch: -EINVAL, nothing kept (%d)", r);
	wd_engine_close(&e1);
	wd_engine_close(&e4);
}

/*
 * Large tensors in a batch: those that vqsort or a 16-bit count prepares
 * in their own buffer, at most a thread's share of the batch, go whole one
 * per thread; a larger one, and every one the radix sort takes, is split.
 * Each way gives what wd_prepare on one thread gives: the sorted values as
 * bytes, the summaries, and W1.
 */
static void test_batches_large(void)
{
	enum { N = 4 };
	/* the work: about 4.06 Mi sorted elements (the bf16 one is counted, 1/16) */
	size_t sz[N] = { WD_BATCH_SPLIT_MIN + 5, WD_BATCH_SPLIT_MIN, 2 * WD_BATCH_SPLIT_MIN + 1,
			 WD_BATCH_SPLIT_MIN + 7 };
	enum wd_dtype dt[N] = { WD_F32, WD_F64, WD_F32, WD_BF16 };
	struct { int threads; enum wd_sort sort; const char *what; } how[] = {
		{ 2, WD_SORT_AUTO, "2 threads: every tensor whole on a thread (vqsort)" },
		{ 3, WD_SORT_AUTO, "3 threads: the 2 Mi-element one split, the others whole" },
		{ 2, WD_SORT_RADIX, "2 threads, radix sort: the sorted ones split" },
	};
	size_t n_how = small ? 1 : sizeof(how) / sizeof(how[0]);	/* valgrind: the new path */
	struct wd_engine *e1 = open_threads(1);
	struct wd_view v[N];
	struct wd_prepared *one[N] = { 0 };
	int bad = 0;

	for (int i = 0; i < N; i++) {
		v[i] = (struct wd_view){ dt[i], make(dt[i], sz[i], i % 2, 1.0 + i), sz[i] };
		if (wd_prepare(e1, &v[i], 0, &one[i]))
			bad++;
	}
	for (size_t h = 0; h < n_how; h++) {
		struct wd_engine *e = open_sorted(how[h].threads, how[h].sort);
		struct wd_prepared *many[N] = { 0 };
		int r, wrong = 0;

		if (!e || (how[h].sort == WD_SORT_AUTO && wd_engine_sort(e) != WD_SORT_VQSORT)) {
			CHECK(e != NULL, "%s: skipped, no vqsort here", how[h].what);
			wd_engine_close(&e);
			continue;
		}
		wd_engine_set_grain(e, 0);	/* the default: a split is a real one */
		r = wd_prepare_many(e, v, N, 0, many);
		for (int i = 0; !r && !bad && i < N; i++) {
			struct wd_summary s1, s2;
			double w_one, w_many;
			wd_summarize(one[i], &s1);
			wd_summarize(many[i], &s2);
			if (wd_w1(e1, one[i], one[(i + 1) % N], &w_one) ||
			    wd_w1(e1, many[i], many[(i + 1) % N], &w_many) ||
			    memcmp(&w_one, &w_many, sizeof(w_one)) || memcmp(&s1, &s2, sizeof(s1)) ||
			    (wd_prepared_method(one[i]) == WD_METHOD_SORT && !same_values(one[i], many[i])))
				wrong++;
		}
		CHECK(!bad && r == 0 && !wrong, "wd_prepare_many of 2^20 to 2 x 2^20 tensors, %s: the "
		      "bits of one thread (%d, %d differ)", how[h].what, r, wrong);
		for (int i = 0; i < N; i++)
			wd_prepared_free(&many[i]);
		wd_engine_close(&e);
	}
	/*
	 * A bad view is the batch's first error by index, though the tensors
	 * run out of order: the split ones first (index 2, too large to have
	 * room for), then the whole ones (index 0, with no data, and 1).
	 */
	{
		struct wd_engine *e = open_sorted(2, WD_SORT_AUTO);
		struct wd_view bad_first[3] = { { WD_F64, NULL, WD_BATCH_SPLIT_MIN },
						{ WD_F64, v[1].data, WD_BATCH_SPLIT_MIN },
						{ WD_F64, v[1].data, (uint64_t)1 << 50 } };
		struct wd_prepared *out[3] = { (void *)1, (void *)1, (void *)1 };
		int r = wd_prepare_many(e, bad_first, 3, 0, out);
		CHECK(r == -EINVAL && !out[0] && !out[1] && !out[2], "a batch whose first view is bad "
		      "and whose last cannot be had: -EINVAL, the first by index (%d), nothing kept", r);
		wd_engine_close(&e);
	}
	for (int i = 0; i < N; i++) {
		wd_prepared_free(&one[i]);
		free((void *)v[i].data);
	}
	wd_engine_close(&e1);
}

int main(void)
{
	small = getenv("WDRIFT_VALGRIND") != NULL;
	max_threads = small ? 3 : MAX_THREADS;
	test_default_threads();
	test_sort_choice();
	test_prepare_bytes();
	test_bit_identical(WD_SORT_RADIX);
	if (have_vqsort())
		test_bit_identical(WD_SORT_VQSORT);
	test_sorts_agree();
	test_input_changing();
	test_batches();
	test_batches_large();
	test_spares();
	return tap_done();
}
