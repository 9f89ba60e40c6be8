/*
 * test_drift.c: drift as lib/drift.h defines it once for `wdrift compare`,
 * the daemon's drift log and the alert rules. Per tensor: W1, the pair
 * statistics (only for equal sizes; from the views where the engine kept
 * no raw values), the run's NaN/Inf counts, the synthetic proxy's W1, and a
 * candidate's ratios to the proxies, against numbers worked out by hand.
 * The summary rows: the element-weighted mean, the median over tensors
 * (odd and even counts), the max, NaN values left out, and nothing at all.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "drift.h"
#include "harness.h"

static struct wd_prepared *prep(struct wd_engine *e, const struct wd_view *v, unsigned flags)
{
	struct wd_prepared *p = NULL;
	return wd_prepare(e, v, flags, &p) == 0 ? p : NULL;
}

static void test_measure(struct wd_engine *e)
{
	/* equal sizes: every value moves up by 1 */
	float a[4] = { 0, 1, 2, 3 }, b[4] = { 1, 2, 3, 4 };
	struct wd_view av = { WD_F32, a, 4 }, bv = { WD_F32, b, 4 };
	struct wd_prepared *ap = prep(e, &av, WD_PREP_KEEP_RAW), *bp = prep(e, &bv, WD_PREP_KEEP_RAW);
	struct wd_drift_tensor d;
	struct wd_summary sum[2];

	CHECK(wd_drift_measure(e, ap, &av, bp, &bv, sum, &d) == 0, "measure: 0 on the CPU");
	CHECK(d.numel == 4 && d.w1 == 1, "shifted by 1: W1 %.17g, numel %llu", d.w1,
	      (unsigned long long)d.numel);
	CHECK(d.have_pair && d.pair.max_abs_diff == 1 && d.pair.n_diff == 4 &&
	      close_to(d.pair.rel_l2, 2 / sqrt(14), 1e-15, 0),
	      "pair: max|d| 1, rel L2 |(1,1,1,1)|/|(0,1,2,3)| = 2/sqrt(14): %.17g", d.pair.rel_l2);
	CHECK(d.nonfinite.nan + d.nonfinite.posinf + d.nonfinite.neginf == 0, "no non-finite value");
	CHECK(sum[0].numel == 4 && sum[0].mean == 1.5 && sum[1].mean == 2.5 && sum[1].max == 4,
	      "summaries asked for: [0] the baseline's, [1] the run's");

	/* the same run prepared without its raw values: pair statistics from the views */
	struct wd_prepared *bare = prep(e, &bv, 0);
	struct wd_drift_tensor f;
	CHECK(wd_drift_measure(e, ap, &av, bare, &bv, NULL, &f) == 0 && f.have_pair &&
	      f.pair.max_abs_diff == d.pair.max_abs_diff && f.pair.rel_l2 == d.pair.rel_l2 &&
	      f.pair.n_diff == d.pair.n_diff && f.w1 == d.w1,
	      "no raw values kept: the same pair statistics, from the views");
	wd_prepared_free(&bare);

	/* unequal sizes: {0,1,2,3} against {0,2}; |F - G| is 1/4 on [0,1), 0 on [1,2), 1/4 on [2,3) */
	float c[2] = { 0, 2 };
	struct wd_view cv = { WD_F32, c, 2 };
	struct wd_prepared *cp = prep(e, &cv, WD_PREP_KEEP_RAW);
	CHECK(wd_drift_measure(e, ap, &av, cp, &cv, NULL, &d) == 0 && d.w1 == 0.5 && d.numel == 2,
	      "unequal sizes: W1 0.5: %.17g", d.w1);
	CHECK(!d.have_pair && isnan(d.pair.max_abs_diff) && isnan(d.pair.rel_l2),
	      "unequal sizes: no pair statistics, max|d| and rel L2 NaN");
	wd_prepared_free(&cp);

	/* non-finite values in the run: counted, and left out of W1 and the pair statistics */
	float g[6] = { 1, 2, 1, 2, 1, 2 }, h[6] = { NAN, INFINITY, -INFINITY, -INFINITY, 1, 2 };
	struct wd_view gv = { WD_F32, g, 6 }, hv = { WD_F32, h, 6 };
	struct wd_prepared *gp = prep(e, &gv, WD_PREP_KEEP_RAW), *hp = prep(e, &hv, WD_PREP_KEEP_RAW);
	CHECK(wd_drift_measure(e, gp, &gv, hp, &hv, NULL, &d) == 0 && d.nonfinite.nan == 1 &&
	      d.nonfinite.posinf == 1 && d.nonfinite.neginf == 2,
	      "the run's counts: NaN %llu, +Inf %llu, -Inf %llu", (unsigned long long)d.nonfinite.nan,
	      (unsigned long long)d.nonfinite.posinf, (unsigned long long)d.nonfinite.neginf);
	CHECK(d.w1 == 0 && d.have_pair && d.pair.max_abs_diff == 0 && d.pair.rel_l2 == 0 &&
	      d.pair.n_compared == 2 && d.pair.n_diff == 4,
	      "finite {1,2} against {1,2,1,2,1,2}: W1 0; two positions compared, four differ");

	/* a run with no finite value: W1 undefined */
	float z[2] = { NAN, NAN };
	struct wd_view zv = { WD_F32, z, 2 };
	struct wd_prepared *zp = prep(e, &zv, WD_PREP_KEEP_RAW);
	CHECK(wd_drift_measure(e, ap, &av, zp, &zv, NULL, &d) == 0 && isnan(d.w1) && d.nonfinite.nan == 2,
	      "no finite value in the run: W1 NaN, 2 NaN counted");
	wd_prepared_free(&zp);
	wd_prepared_free(&gp);
	wd_prepared_free(&hp);
	wd_prepared_free(&ap);
	wd_prepared_free(&bp);
}

static void test_rounded(struct wd_engine *e)
{
	/* one value: W1 is its distance to the value rounded */
	float one[1] = { 1.0f + 0x1p-10f };
	struct wd_view ov = { WD_F32, one, 1 };
	struct wd_prepared *op = prep(e, &ov, 0);
	double w1;
	CHECK(wd_drift_rounded_w1(e, op, &ov, WD_BF16, &w1, NULL) == 0 && w1 == 0x1p-10,
	      "1 + 2^-10 to bf16 (7 fraction bits) is 1: W1 2^-10: %.17g", w1);
	CHECK(wd_drift_rounded_w1(e, op, &ov, WD_F16, &w1, NULL) == 0 && w1 == 0,
	      "1 + 2^-10 to fp16 (10 fraction bits) is exact: W1 0: %.17g", w1);
	CHECK(wd_drift_rounded_w1(e, op, &ov, WD_F32, &w1, NULL) == -EINVAL && isnan(w1),
	      "rounding to a format not 16-bit: -EINVAL, W1 NaN");
	wd_prepared_free(&op);

	/* many values: the same as W1 against a copy rounded here */
	enum { N = 1000 };
	static float v[N];
	uint16_t codes[N];
	for (int i = 0; i < N; i++)
		v[i] = (float)sin(i * 0.37) * (float)(1 + i % 7) + (i % 11 == 0 ? NAN : 0);
	struct wd_view vv = { WD_F32, v, N };
	struct wd_prepared *vp = prep(e, &vv, 0);
	static const enum wd_dtype to[2] = { WD_BF16, WD_F16 };
	for (int k = 0; k < 2; k++) {
		struct wd_view rv = { to[k], codes, N };
		struct wd_prepared *rp;
		double want = NAN;
		wd_round16(&vv, to[k], codes);
		rp = prep(e, &rv, 0);
		wd_w1(e, vp, rp, &want);
		wd_prepared_free(&rp);
		struct wd_nonfinite over;
		CHECK(wd_drift_rounded_w1(e, vp, &vv, to[k], &w1, &over) == 0 && w1 == want && w1 > 0 &&
		      !over.nan && !over.posinf && !over.neginf,
		      "%s proxy: W1 %.17g, against a copy rounded explicitly %.17g; no value out of range",
		      wd_dtype_name(to[k]), w1, want);
	}
	wd_prepared_free(&vp);

	/*
	 * Values out of fp16's range round to +-Inf, which W1 leaves out: said
	 * as overflow, the baseline's own infinities apart (a trial's round:fp16
	 * ratios were 1e-5, and nothing said why)
	 */
	float big[6] = { 70000.0f, -1e6f, 1.0f, INFINITY, 2.0f, 65504.0f };
	struct wd_view bv = { WD_F32, big, 6 };
	struct wd_prepared *bp = prep(e, &bv, 0);
	struct wd_nonfinite over;
	CHECK(wd_drift_rounded_w1(e, bp, &bv, WD_F16, &w1, &over) == 0 && over.posinf == 1 && over.neginf == 1 &&
	      over.nan == 0, "fp16: 70000 and -1e6 overflow (+1, -1); the baseline's own +Inf and 65504 do not "
	      "(%llu, %llu)", (unsigned long long)over.posinf, (unsigned long long)over.neginf);
	CHECK(wd_drift_rounded_w1(e, bp, &bv, WD_BF16, &w1, &over) == 0 && !over.posinf && !over.neginf,
	      "bf16 has fp32's range: none (%llu, %llu)", (unsigned long long)over.posinf,
	      (unsigned long long)over.neginf);
	wd_prepared_free(&bp);
}

static void test_ratios(void)
{
	double proxy_w1[5] = { 2, 0, NAN, 0.5, 4 }, ratio[5];
	wd_drift_ratios(1, proxy_w1, 5, ratio);
	CHECK(ratio[0] == 0.5 && isnan(ratio[1]) && isnan(ratio[2]) && ratio[3] == 2 && ratio[4] == 0.25,
	      "ratios of W1 1 to proxies 2, 0, NaN, 0.5, 4: 0.5, NaN, NaN, 2, 0.25");
	wd_drift_ratios(NAN, proxy_w1, 1, ratio);
	CHECK(isnan(ratio[0]), "a candidate without the tensor: ratio NaN");
}

int main(void)
{
	struct wd_drift_summary d;
	struct wd_engine *engine = NULL;

	CHECK(wd_engine_open(WD_BACKEND_CPU, &engine) == 0, "a CPU engine");
	test_measure(engine);
	test_rounded(engine);
	wd_engine_close(&engine);
	test_ratios();

	CHECK(wd_drift_summarize(NULL, NULL, 0, &d) == 0 && d.n == 0 && isnan(d.weighted) &&
	      isnan(d.median) && isnan(d.max), "no tensors: n 0, every summary NaN");

	double nan3[3] = { NAN, NAN, NAN };
	uint64_t n3[3] = { 1, 2, 3 };
	wd_drift_summarize(nan3, n3, 3, &d);
	CHECK(d.n == 0 && isnan(d.weighted) && isnan(d.median) && isnan(d.max),
	      "only NaN values: as if none");

	/* odd count: 1 (x10), NaN (x1000), 4 (x30), -2 (x60) */
	double v[4] = { 1, NAN, 4, -2 };
	uint64_t w[4] = { 10, 1000, 30, 60 };
	wd_drift_summarize(v, w, 4, &d);
	CHECK(d.n == 3, "NaN left out: n %zu", d.n);
	CHECK(d.weighted == (1.0 * 10 + 4.0 * 30 + -2.0 * 60) / 100, "weighted by elements: %.17g",
	      d.weighted);
	CHECK(d.median == 1 && d.max == 4, "median of three %.17g, max %.17g", d.median, d.max);

	/* even count: the mean of the middle two; input order does not matter */
	double e[4] = { 8, 2, 6, 4 };
	uint64_t one[4] = { 1, 1, 1, 1 };
	wd_drift_summarize(e, one, 4, &d);
	CHECK(d.median == 5 && d.max == 8 && d.weighted == 5, "median of four %.17g, max %.17g",
	      d.median, d.max);

	/* empty tensors only: no elements to weight by */
	uint64_t zero[2] = { 0, 0 };
	wd_drift_summarize(e, zero, 2, &d);
	CHECK(isnan(d.weighted) && d.median == 5 && d.max == 8,
	      "tensors of 0 elements: weighted NaN, median and max defined");
	CHECK(wd_drift_ratio(2, 4) == 0.5 && isnan(wd_drift_ratio(2, 0)) && isnan(wd_drift_ratio(2, NAN)) &&
	      isnan(wd_drift_ratio(NAN, 4)) && wd_drift_ratio(0, 4) == 0,
	      "ratio: W1 over the proxy's; NaN where the proxy's is 0 or NaN, never infinite");
	return tap_done();
}
