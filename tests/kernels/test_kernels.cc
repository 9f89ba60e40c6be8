/*
 * test_kernels.cc: the CUDA engine's kernel bodies (cuda/kernel_bodies.h),
 * run on the CPU through the SIMT emulator (simt_host.h) over the grids
 * the engine launches, against the CPU engine (lib/). The GPU runs these
 * same bodies; what this cannot see is CUB (the sort, the block reductions'
 * order, the scan of the expansion's offsets), the memory system and the
 * launch code. Those are tests/gpu's, on a device.
 *
 * Under valgrind (WDRIFT_VALGRIND set) the sizes are smaller.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernel_bodies.h"
#include "simt_host.h"

extern "C" {
#include "dtype.h"
#include "prepared.h"
#include "wdrift.h"
}
#include "../unit/harness.h"
#include "../unit/rng.h"

#define SMS_BIG 132	/* an H100's SMs: the grids the engine launches there */
#define SMS_SMALL 1	/* few blocks: every thread strides over the data */

static struct wd_engine *cpu;
static int small;	/* under valgrind */
/* An aligned buffer of n T's plus slack, freed at scope end. */
template <typename T>
struct buf {
	T *p;
	explicit buf(size_t n) { p = (T *)aligned_alloc(64, ((n + 16) * sizeof(T) + 63) & ~(size_t)63); memset(p, 0, (n + 16) * sizeof(T)); }
	~buf() { free(p); }
	buf(const buf &) = delete;
	buf &operator=(const buf &) = delete;
};

static struct wd_prepared *prep(enum wd_dtype t, const void *data, size_t n, unsigned flags)
{
	struct wd_view v = { t, data, n };
	struct wd_prepared *p = NULL;
	int r = wd_prepare(cpu, &v, flags, &p);
	if (r) {
		fprintf(stderr, "test_kernels: cpu prepare: %d\n", r);
		exit(1);
	}
	return p;
}

/* --- data --- */

enum kind { WEIGHTS, CONSTANT, ONE_OFF, CODES, ZEROS, NEG_ZEROS };
static const char *kind_name[] = { "weights", "constant", "constant but one", "every code",
				   "zeros", "-0" };

/* n 16-bit codes of format t, of a kind; weights get NaN and +-Inf sprinkled in. */
static void make16(enum wd_dtype t, enum kind k, size_t n, uint16_t *out)
{
	std::vector<double> x(n);
	for (size_t i = 0; i < n; i++)
		x[i] = k == WEIGHTS ? rng_normal(0.035) : k == ZEROS ? 0.0 : k == NEG_ZEROS ? -0.0 : 0.25;
	if (k == WEIGHTS && n >= 31)
		for (size_t j = 0; j < n / 997 + 3; j++)
			x[rng_next() % n] = (j % 3 == 0) ? NAN : (j % 3 == 1) ? INFINITY : -INFINITY;
	if (k == ONE_OFF)
		x[rng_next() % n] = -3.5;
	struct wd_view v = { WD_F64, x.data(), n };
	wd_round16(&v, t, out);
	if (k == CODES)
		for (size_t i = 0; i < n; i++)
			out[i] = (uint16_t)rng_next();
}

/* --- the 16-bit count --- */

/*
 * Counts n codes with the engine's launch: a cluster of 2 blocks of
 * HIST_THREADS per HIST_CHUNK, HIST_HALF bins of shared memory each.
 */
template <class F, typename W, int V>
static const char *count16(const W *in, size_t n, unsigned long long *hist, unsigned long long *cnt)
{
	unsigned grid = (unsigned)(2 * ((n + HIST_CHUNK - 1) / HIST_CHUNK));
	memset(hist, 0, 65536 * sizeof(*hist));
	memset(cnt, 0, 3 * sizeof(*cnt));
	return simt::run(grid, HIST_THREADS, 2, HIST_HALF * 4,
			 [&](simt::host_thread &x, void *shared) {
				 hist16_body<simt::host_thread, F, W, V>(x, in, n, (unsigned *)shared,
									 hist, cnt);
			 });
}

/* The device count of words against the CPU engine's of the same tensor. */
template <class F, typename W, int V>
static void check_count(enum wd_dtype t, const W *words, size_t n, const char *what)
{
	std::vector<unsigned long long> hist(65536);
	unsigned long long cnt[3];
	const char *err = count16<F, W, V>(words, n, hist.data(), cnt);
	CHECK(!err, "count %s n=%zu V=%d: ran (%s)", what, n, V, err ? err : "ok");
	struct wd_prepared *p = prep(sizeof(W) == 4 ? WD_F32 : t, words, n, 0);
	CHECK(p->method == WD_METHOD_HIST16, "count %s n=%zu: the CPU counted it too", what, n);
	size_t bad = 0, first = 0;
	for (size_t c = 0; c < 65536; c++)
		if (hist[c] != p->hist[c] && !bad++)
			first = c;
	CHECK(bad == 0, "count %s n=%zu V=%d: 65536 bins equal (%zu differ, first 0x%04zx: %llu, cpu %llu)",
	      what, n, V, bad, first, hist[first], (unsigned long long)p->hist[first]);
	CHECK(cnt[0] == p->nonfinite.nan && cnt[1] == p->nonfinite.posinf &&
	      cnt[2] == p->nonfinite.neginf && n - cnt[0] - cnt[1] - cnt[2] == p->n_finite,
	      "count %s n=%zu V=%d: NaN %llu +Inf %llu -Inf %llu (cpu %llu %llu %llu)", what, n, V,
	      cnt[0], cnt[1], cnt[2], (unsigned long long)p->nonfinite.nan,
	      (unsigned long long)p->nonfinite.posinf, (unsigned long long)p->nonfinite.neginf);
	wd_prepared_free(&p);
}

static void test_count16(void)
{
	/* around a cluster's round (2048 threads x 8 codes) and a chunk */
	const size_t sizes[] = { 1, 7, 31, 32, 33, 2047, 2048, 16383, 16384, 16385, 65537 };
	for (size_t n : sizes) {
		if (small && n > 20000)
			continue;
		for (int k = WEIGHTS; k <= NEG_ZEROS; k++) {
			buf<uint16_t> b(n);
			char what[64];
			make16(WD_BF16, (enum kind)k, n, b.p);
			snprintf(what, sizeof(what), "bf16 %s", kind_name[k]);
			check_count<fmt_bf16, uint16_t, 8>(WD_BF16, b.p, n, what);
			if (k == WEIGHTS || k == CONSTANT) {
				check_count<fmt_bf16, uint16_t, 1>(WD_BF16, b.p, n, what);
				make16(WD_F16, (enum kind)k, n, b.p);
				snprintf(what, sizeof(what), "f16 %s", kind_name[k]);
				check_count<fmt_f16, uint16_t, 8>(WD_F16, b.p, n, what);
			}
			/* upcast bf16: the same codes in the upper halves of fp32 words */
			make16(WD_BF16, (enum kind)k, n, b.p);
			buf<uint32_t> w(n);
			for (size_t i = 0; i < n; i++)
				w.p[i] = (uint32_t)b.p[i] << 16;
			snprintf(what, sizeof(what), "upcast bf16 %s", kind_name[k]);
			if (k != CODES)	/* the CPU sorts NaN payloads it cannot round-trip */
				check_count<fmt_bf16, uint32_t, 4>(WD_F32, w.p, n, what);
		}
	}
	/* two chunks: two clusters, the second one short */
	size_t n = small ? 0 : HIST_CHUNK + 3;
	if (n) {
		buf<uint16_t> b(n);
		make16(WD_BF16, WEIGHTS, n, b.p);
		check_count<fmt_bf16, uint16_t, 8>(WD_BF16, b.p, n, "bf16 weights, 2 chunks");
	}
	/* a body that diverges around a warp vote is caught, not run */
	unsigned long long hist[4], cnt[3] = { 0, 0, 0 };
	const char *err = simt::run(2, 64, 1, 0, [&](simt::host_thread &x, void *) {
		if (x.lane() < 16)
			x.all(1);
		else
			x.sync();
	});
	CHECK(err != NULL, "the emulator reports lanes that miss a warp vote (%s)", err ? err : "none");
	(void)hist;
	(void)cnt;
}

/* --- W1 of sorted values --- */

/* n sorted values with ties and both zeros. */
template <typename T>
static void make_sorted(size_t n, T *out, int ties)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next() % 8;
		out[i] = !ties || r > 3 ? (T)rng_normal(0.035) : r == 0 ? (T)0.0 : r == 1 ? (T)-0.0
		       : (T)((double)(rng_next() % 9) / 64.0 - 0.0625);
	}
	std::sort(out, out + n, [](T a, T b) { return a < b; });
}

/* Queues W1 as the engine does: equal sizes and widths, or the merge. */
template <typename TA, typename TB>
static double w1_device(const TA *a, size_t na, const TB *b, size_t nb, int sms, int vec,
			const char **err)
{
	std::vector<double> partial(1024);
	unsigned g;
	if (sizeof(TA) == sizeof(TB) && na == nb) {
		const int V = 16 / sizeof(TA);
		g = grid_for_items(vec ? (na + V - 1) / V : na, RED_THREADS, sms, RED_BLOCKS_PER_SM, 1024);
		*err = simt::run(g, RED_THREADS, 1, 0, [&](simt::host_thread &x, void *) {
			if (vec)
				w1_equal_body<simt::host_thread, TA, TB, 16 / sizeof(TA)>(x, a, b, na, partial.data());
			else
				w1_equal_body<simt::host_thread, TA, TB, 1>(x, a, b, na, partial.data());
		});
		return partials_sum(partial.data(), g) / (double)na;
	}
	g = grid_for_items((na + nb + MERGE_ITEMS - 1) / MERGE_ITEMS, RED_THREADS, sms,
			   RED_BLOCKS_PER_SM, 1024);
	*err = simt::run(g, RED_THREADS, 1, 0, [&](simt::host_thread &x, void *) {
		w1_merge_body<simt::host_thread, TA, TB>(x, a, na, b, nb, partial.data());
	});
	return partials_sum(partial.data(), g);
}

template <typename TA, typename TB>
static void check_w1(size_t na, size_t nb, int ties, int sms, int vec)
{
	buf<TA> a(na);
	buf<TB> b(nb);
	make_sorted(na, a.p, ties);
	make_sorted(nb, b.p, ties);
	const char *err;
	double got = w1_device(a.p, na, b.p, nb, sms, vec, &err);
	struct wd_prepared *pa = prep(sizeof(TA) == 4 ? WD_F32 : WD_F64, a.p, na, WD_PREP_FORCE_SORT);
	struct wd_prepared *pb = prep(sizeof(TB) == 4 ? WD_F32 : WD_F64, b.p, nb, WD_PREP_FORCE_SORT);
	double want = NAN;
	int r = wd_w1(cpu, pa, pb, &want);
	CHECK(!err && !r && close_to(got, want, 1e-9, 1e-15),
	      "w1 %s %zu vs %s %zu%s sms=%d%s: %.17g, cpu %.17g%s%s",
	      sizeof(TA) == 4 ? "f32" : "f64", na, sizeof(TB) == 4 ? "f32" : "f64", nb,
	      ties ? " (ties, +-0)" : "", sms, vec ? " 16-byte loads" : "", got, want,
	      err ? ": " : "", err ? err : "");
	wd_prepared_free(&pa);
	wd_prepared_free(&pb);
}

static void test_w1_sorted(void)
{
	/* around a block's merged items (RED_THREADS x MERGE_ITEMS = 4096) */
	const size_t sizes[] = { 1, 2, 15, 16, 17, 4095, 4096, 4097, 8193, 65535, 65536, 65537 };
	const size_t n_sizes = sizeof(sizes) / sizeof(sizes[0]);
	for (size_t i = 0; i < n_sizes; i++) {
		size_t na = sizes[i], nb = sizes[(i + 1) % n_sizes];
		if (small && (na > 5000 || nb > 5000))
			continue;
		check_w1<float, float>(na, nb, 1, SMS_BIG, 0);
		check_w1<float, double>(na, nb, 0, SMS_SMALL, 0);
		check_w1<double, float>(nb, na, 1, SMS_BIG, 0);
		check_w1<float, float>(na, na, 1, SMS_BIG, 1);		/* equal sizes */
		check_w1<float, float>(na, na, 0, SMS_SMALL, 0);
		check_w1<double, double>(na, na, 1, SMS_SMALL, 1);
	}
}

/* --- two counts: the scan, and the expansion to sorted values --- */

static void check_hist_scan(enum wd_dtype t, enum kind ka, size_t na, enum kind kb, size_t nb)
{
	buf<uint16_t> a(na), b(nb);
	make16(t, ka, na, a.p);
	make16(t, kb, nb, b.p);
	struct wd_prepared *pa = prep(t, a.p, na, 0), *pb = prep(t, b.p, nb, 0);
	const struct half_table *h = half_table_get(t);
	std::vector<unsigned long long> ha(pa->hist, pa->hist + 65536), hb(pb->hist, pb->hist + 65536);
	double out = NAN, want = NAN;
	const char *err = simt::run(1, SCAN_THREADS, 1, 0, [&](simt::host_thread &x, void *) {
		w1_hist_scan_body(x, ha.data(), pa->n_finite, hb.data(), pb->n_finite, h->order,
				  h->gap, h->n_order, &out);
	});
	int r = wd_w1(cpu, pa, pb, &want);
	CHECK(!err && !r && close_to(out, want, 1e-9, 1e-15),
	      "w1 of two %s counts, %s %zu vs %s %zu: %.17g, cpu %.17g", t == WD_BF16 ? "bf16" : "f16",
	      kind_name[ka], na, kind_name[kb], nb, out, want);
	wd_prepared_free(&pa);
	wd_prepared_free(&pb);
}

template <class F>
static void check_expand(enum wd_dtype t, enum kind k, size_t n, int sms)
{
	buf<uint16_t> a(n);
	make16(t, k, n, a.p);
	struct wd_prepared *p = prep(t, a.p, n, 0), *s = prep(t, a.p, n, WD_PREP_FORCE_SORT);
	const struct half_table *h = half_table_get(t);
	std::vector<unsigned long long> hist(p->hist, p->hist + 65536), off(h->n_order + 1);
	std::vector<float> out(p->n_finite + 1);
	unsigned g = grid_for_items(h->n_order + 1, 256, sms, 8, 1u << 16);
	const char *err = simt::run(g, 256, 1, 0, [&](simt::host_thread &x, void *) {
		gather_counts_body(x, hist.data(), h->order, h->n_order, off.data());
	});
	/* cub::DeviceScan::ExclusiveSum on the device */
	unsigned long long sum = 0;
	for (auto &o : off) {
		unsigned long long c = o;
		o = sum;
		sum += c;
	}
	g = grid_for_items((p->n_finite + EXPAND_ITEMS - 1) / EXPAND_ITEMS, 256, sms, 8, 1u << 16);
	if (!err)
		err = simt::run(g, 256, 1, 0, [&](simt::host_thread &x, void *) {
			expand_body<simt::host_thread, F>(x, off.data(), h->order, h->n_order, out.data());
		});
	CHECK(!err && off[h->n_order] == p->n_finite && s->n_finite == p->n_finite &&
	      !memcmp(out.data(), s->values, p->n_finite * 4),
	      "%s %s n=%zu sms=%d: the count expands to the sorted values%s%s",
	      t == WD_BF16 ? "bf16" : "f16", kind_name[k], n, sms, err ? ": " : "", err ? err : "");
	wd_prepared_free(&p);
	wd_prepared_free(&s);
}

static void test_counts(void)
{
	size_t big = small ? 5000 : 100003;
	check_hist_scan(WD_BF16, WEIGHTS, big, WEIGHTS, 777);
	check_hist_scan(WD_BF16, ZEROS, 1000, WEIGHTS, big);
	check_hist_scan(WD_BF16, CODES, 4096, ONE_OFF, 33);
	check_hist_scan(WD_F16, WEIGHTS, 1, WEIGHTS, big);
	check_hist_scan(WD_F16, CODES, big, NEG_ZEROS, 5);
	check_expand<fmt_bf16>(WD_BF16, WEIGHTS, big, SMS_BIG);
	check_expand<fmt_bf16>(WD_BF16, ZEROS, big, SMS_SMALL);	/* one code, every thread */
	check_expand<fmt_f16>(WD_F16, CODES, big, SMS_BIG);
	check_expand<fmt_f16>(WD_F16, ONE_OFF, 17, SMS_SMALL);
}

/* --- sorted tensors: the non-finite ends, the summary --- */

/* Sorts as CUB's radix sort of float bits does: by the radix key. */
template <typename T, typename U>
static void sort_like_cub(T *v, size_t n)
{
	std::stable_sort(v, v + n, [](T a, T b) {
		U ua, ub;
		memcpy(&ua, &a, sizeof(U));
		memcpy(&ub, &b, sizeof(U));
		const U top = (U)1 << (8 * sizeof(U) - 1);
		ua ^= (ua & top) ? (U)~(U)0 : top;
		ub ^= (ub & top) ? (U)~(U)0 : top;
		/* -0 and +0 are one key to CUB: their order is the input's */
		if ((a == 0 && b == 0))
			return false;
		return ua < ub;
	});
}

template <typename T, typename U>
static void check_sorted(size_t n, int nonfinite, int sms)
{
	buf<T> v(n);
	for (size_t i = 0; i < n; i++)
		v.p[i] = (T)(rng_normal(0.035) + (i % 5 == 0 ? 1e4 : 0));
	if (nonfinite)
		for (size_t j = 0; j < n / 50 + 4 && n > 8; j++) {
			T x = j % 4 == 0 ? (T)NAN : j % 4 == 1 ? (T)-NAN : j % 4 == 2 ? (T)INFINITY : (T)-INFINITY;
			v.p[rng_next() % n] = x;
		}
	struct wd_prepared *p = prep(sizeof(T) == 4 ? WD_F32 : WD_F64, v.p, n, WD_PREP_FORCE_SORT);
	struct wd_summary want;
	wd_summarize(p, &want);
	sort_like_cub<T, U>(v.p, n);
	unsigned long long ends[2], cnt[3];
	nonfinite_ends<T>(v.p, n, ends, cnt);
	CHECK(cnt[0] == p->nonfinite.nan && cnt[1] == p->nonfinite.posinf &&
	      cnt[2] == p->nonfinite.neginf && ends[1] == p->n_finite &&
	      !memcmp(v.p + ends[0], p->values, p->n_finite * sizeof(T)),
	      "%s n=%zu: NaN %llu +Inf %llu -Inf %llu at the ends, %llu finite from %llu (cpu %llu %llu %llu, %llu)",
	      sizeof(T) == 4 ? "f32" : "f64", n, cnt[0], cnt[1], cnt[2], ends[1], ends[0],
	      (unsigned long long)p->nonfinite.nan, (unsigned long long)p->nonfinite.posinf,
	      (unsigned long long)p->nonfinite.neginf, (unsigned long long)p->n_finite);
	if (ends[1]) {
		const T *f = v.p + ends[0];
		size_t nf = ends[1];
		const int V = 16 / sizeof(T);
		unsigned g = grid_for_items((nf + V - 1) / V, RED_THREADS, sms, RED_BLOCKS_PER_SM, 1024);
		std::vector<double> partial(SUMMARY_PARTIALS * g);
		const char *err = simt::run(g, RED_THREADS, 1, 0, [&](simt::host_thread &x, void *) {
			summary_body<simt::host_thread, T, 16 / sizeof(T)>(x, f, nf, partial.data());
		});
		double mean, sd, l2;
		summary_finish(partial.data(), g, f[nf / 2], (double)nf, &mean, &sd, &l2);
		CHECK(!err && close_to(mean, want.mean, 1e-9, 1e-15) && close_to(sd, want.std, 1e-9, 1e-15) &&
		      close_to(l2, want.l2, 1e-9, 1e-15) && f[0] == want.min && f[nf - 1] == want.max,
		      "%s n=%zu summary: mean %.17g std %.17g l2 %.17g (cpu %.17g %.17g %.17g)",
		      sizeof(T) == 4 ? "f32" : "f64", n, mean, sd, l2, want.mean, want.std, want.l2);
	}
	wd_prepared_free(&p);
}

static void test_sorted(void)
{
	const size_t sizes[] = { 1, 9, 1023, 4097, 65537, 300001 };
	for (size_t n : sizes) {
		if (small && n > 5000)
			continue;
		check_sorted<float, uint32_t>(n, 1, SMS_BIG);
		check_sorted<double, uint64_t>(n, 1, SMS_SMALL);
		check_sorted<float, uint32_t>(n, 0, SMS_SMALL);
	}
	/* all non-finite: an empty finite range */
	float nf[6] = { NAN, -NAN, INFINITY, -INFINITY, NAN, INFINITY };
	sort_like_cub<float, uint32_t>(nf, 6);
	unsigned long long ends[2], cnt[3];
	nonfinite_ends<float>(nf, 6, ends, cnt);
	CHECK(ends[1] == 0 && cnt[0] == 3 && cnt[1] == 2 && cnt[2] == 1,
	      "no finite values: 0 finite, NaN %llu +Inf %llu -Inf %llu", cnt[0], cnt[1], cnt[2]);
}

/*
 * A summary's l2 of fp64 values whose squares underflow (1e-170) or
 * overflow (1e200) in double: the body keeps its sums of squares by
 * magnitude (lib/sumsq.h), as the CPU engine does (issue 14).
 */
static void test_summary_l2_range(void)
{
	const double mags[] = { ldexp(1.5, -565), ldexp(1.75, 665) };
	const size_t n = 5000;
	buf<double> v(n);
	for (double m : mags) {
		for (size_t i = 0; i < n; i++)
			v.p[i] = i < n / 2 ? -m : m;	/* sorted */
		struct wd_prepared *p = prep(WD_F64, v.p, n, WD_PREP_FORCE_SORT);
		struct wd_summary want;
		wd_summarize(p, &want);
		unsigned g = grid_for_items((n + 1) / 2, RED_THREADS, SMS_BIG, RED_BLOCKS_PER_SM, 1024);
		std::vector<double> partial(SUMMARY_PARTIALS * g);
		const char *err = simt::run(g, RED_THREADS, 1, 0, [&](simt::host_thread &x, void *) {
			summary_body<simt::host_thread, double, 2>(x, v.p, n, partial.data());
		});
		double mean, sd, l2;
		summary_finish(partial.data(), g, v.p[n / 2], (double)n, &mean, &sd, &l2);
		CHECK(!err && l2 > 0 && isfinite(l2) && close_to(l2, want.l2, 1e-14, 0),
		      "f64 of magnitude %g: summary l2 %.17g (cpu %.17g)", m, l2, want.l2);
		wd_prepared_free(&p);
	}
}

/* --- the upcast check, widening, element-wise statistics --- */

static void test_raw(void)
{
	size_t n = small ? 3000 : 70001;
	buf<uint32_t> w(n);
	for (size_t i = 0; i < n; i++)
		w.p[i] = (uint32_t)(rng_next() & 0xffff0000u);
	for (int poke = 0; poke < 2; poke++) {
		if (poke)
			w.p[n - 2] |= 0x10;
		unsigned long long low = 0;
		unsigned g = grid_for_items(n, 256, SMS_BIG, 8, 1u << 16);
		const char *err = simt::run(g, 256, 1, 0, [&](simt::host_thread &x, void *) {
			low_halves_body(x, w.p, n, &low);
		});
		CHECK(!err && (low != 0) == poke, "upcast check: low halves %s (%#llx)",
		      poke ? "set near the end are seen" : "all zero", low);
	}
	buf<uint16_t> c(n);
	std::vector<float> f(n);
	make16(WD_F16, CODES, n, c.p);
	unsigned g = grid_for_items(n, 256, SMS_SMALL, 8, 1u << 16);
	const char *err = simt::run(g, 256, 1, 0, [&](simt::host_thread &x, void *) {
		widen16_body<simt::host_thread, fmt_f16>(x, c.p, n, f.data());
	});
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		double want = wd_decode16(WD_F16, c.p[i]);
		bad += !(f[i] == want || (isnan(f[i]) && isnan(want))) ||
		       (f[i] == 0 && signbit(f[i]) != signbit(want));
	}
	CHECK(!err && bad == 0, "f16 codes widen to their values (%zu wrong)", bad);

	const size_t sizes[] = { 1, 255, 1025, 65537 };
	for (size_t m : sizes) {
		if (small && m > 5000)
			continue;
		buf<float> a(m);
		buf<uint16_t> b(m);
		for (size_t i = 0; i < m; i++)
			a.p[i] = (float)rng_normal(0.035);
		struct wd_view va = { WD_F32, a.p, m };
		wd_round16(&va, WD_BF16, b.p);
		for (size_t i = 0; i < m; i += 7)
			a.p[i] = i % 3 ? (float)NAN : i % 2 ? INFINITY : a.p[i];
		unsigned g2 = grid_for_items((m + PAIR_UNROLL - 1) / PAIR_UNROLL, RED_THREADS, SMS_BIG,
					     RED_BLOCKS_PER_SM, 1024);
		std::vector<double> partial(PAIR_PARTIALS * g2);
		err = simt::run(g2, RED_THREADS, 1, 0, [&](simt::host_thread &x, void *) {
			pair_stats_body<simt::host_thread, load_f32, load_bf16>(x, a.p, b.p, m, partial.data());
		});
		struct wd_pair_stats got, want;
		pair_stats_finish(partial.data(), g2, &got.max_abs_diff, &got.rel_l2, &got.n_compared,
				  &got.n_diff);
		struct wd_view vb = { WD_BF16, b.p, m };
		int r = wd_pair_stats(cpu, &va, &vb, &want);
		CHECK(!err && !r && got.n_compared == want.n_compared && got.n_diff == want.n_diff &&
		      close_to(got.max_abs_diff, want.max_abs_diff, 1e-12, 0) &&
		      close_to(got.rel_l2, want.rel_l2, 1e-9, 1e-15),
		      "pair stats f32 vs bf16 n=%zu: compared %llu differ %llu max %.17g rel %.17g "
		      "(cpu %llu %llu %.17g %.17g)", m, (unsigned long long)got.n_compared,
		      (unsigned long long)got.n_diff, got.max_abs_diff, got.rel_l2,
		      (unsigned long long)want.n_compared, (unsigned long long)want.n_diff,
		      want.max_abs_diff, want.rel_l2);
	}
}

int main(void)
{
	small = getenv("WDRIFT_VALGRIND") != NULL;
	if (wd_engine_open(WD_BACKEND_CPU, &cpu)) {
		printf("not ok 1 - cannot open the cpu engine\n");
		return 1;
	}
	test_count16();
	test_w1_sorted();
	test_counts();
	test_sorted();
	test_summary_l2_range();
	test_raw();
	wd_engine_close(&cpu);
	return tap_done();
}
