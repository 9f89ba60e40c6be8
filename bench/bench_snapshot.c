/*
 * bench_snapshot.c: `make bench-snapshot` (issue 16). A Llama-shaped
 * snapshot, 291 tensors, Llama-2 7B's shapes divided by 16 in every
 * dimension (32 layers of q, k, v, o 256x256, gate and up 688x256, down
 * 256x688, two norms of 256; the embedding and the output 2000x256; the
 * final norm), so that three of them fit in this machine's memory.
 *
 * The daemon's work on a step: the baseline prepared once, then a
 * candidate and a proxy each prepared and compared against it
 * (wd_prepare_many + wd_w1_many, the engine's batch path: small tensors
 * many at once, large ones split). Timed: the candidate's and the proxy's
 * prepare + W1 (median of REPEATS). Its peer in the same run: memcpy of
 * the same bytes (the candidate's and the proxy's data) into buffers
 * already touched, the machine's copy bandwidth for this size. Prints one
 * JSON line: tensors/s, GB/s of input, and the memcpy GB/s beside it.
 * Not a test.
 *
 *   wdrift-bench-snapshot bf16|f32 [THREADS [REPEATS]]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wdrift.h"
#include "bench_time.h"

#define N_TENSORS 291
#define MAX_REPEATS 64

/* The element counts of the 291 tensors, in a checkpoint's order. */
static size_t shapes(uint64_t *numel)
{
	const uint64_t d = 4096 / 16, ff = 11008 / 16, vocab = 32000 / 16;
	size_t n = 0;

	numel[n++] = vocab * d;			/* tok_embeddings */
	for (int l = 0; l < 32; l++) {
		for (int k = 0; k < 4; k++)
			numel[n++] = d * d;	/* wq, wk, wv, wo */
		numel[n++] = ff * d;		/* w1 (gate) */
		numel[n++] = d * ff;		/* w2 (down) */
		numel[n++] = ff * d;		/* w3 (up) */
		numel[n++] = d;			/* attention_norm */
		numel[n++] = d;			/* ffn_norm */
	}
	numel[n++] = d;				/* norm */
	numel[n++] = vocab * d;			/* output */
	return n;
}

/* xorshift64*: the same data on every run. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

/* About N(0, 0.02) (a sum of four uniforms), plus a run's own drift of size eps. */
static float weight(uint64_t *s, uint64_t *run, float eps)
{
	double u = 0;
	for (int k = 0; k < 4; k++)
		u += (double)(rng_next(s) >> 11) * 0x1p-53;
	double base = (u - 2) * 0.0346;
	double own = ((double)(rng_next(run) >> 11) * 0x1p-53 - 0.5) * eps;
	return (float)(base + own);
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* One run's snapshot: the baseline's weights plus its own drift eps (0: the baseline). */
static void make_run(enum wd_dtype dt, const uint64_t *numel, size_t n, float eps, uint64_t seed,
		     void **data, struct wd_view *views)
{
	uint64_t s = 42, run = seed;
	for (size_t t = 0; t < n; t++) {
		size_t es = wd_dtype_size(dt);
		data[t] = malloc(numel[t] * es);
		for (uint64_t i = 0; i < numel[t]; i++) {
			float w = weight(&s, &run, eps);
			if (dt == WD_BF16)
				((uint16_t *)data[t])[i] = to_bf16(w);
			else
				((float *)data[t])[i] = w;
		}
		views[t] = (struct wd_view){ dt, data[t], numel[t] };
	}
}

int main(int argc, char **argv)
{
	enum wd_dtype dt;
	int threads = argc > 2 ? atoi(argv[2]) : 0, repeats = argc > 3 ? atoi(argv[3]) : 5;
	uint64_t numel[N_TENSORS];
	void *data[3][N_TENSORS];
	struct wd_view views[3][N_TENSORS];
	struct wd_prepared *base[N_TENSORS], *run[N_TENSORS];
	static double w1[2][N_TENSORS];
	double t_job[MAX_REPEATS], t_copy[MAX_REPEATS];
	struct wd_engine *e = NULL;

	const char *sort = argc > 4 ? argv[4] : "auto";
	enum wd_sort how = !strcmp(sort, "radix") ? WD_SORT_RADIX
			 : !strcmp(sort, "vqsort") ? WD_SORT_VQSORT : WD_SORT_AUTO;
	if (argc < 2 || wd_dtype_parse(argv[1], &dt) < 0 || (dt != WD_BF16 && dt != WD_F32) ||
	    repeats < 1 || repeats > MAX_REPEATS || threads < 0 ||
	    (how == WD_SORT_AUTO && strcmp(sort, "auto"))) {
		fprintf(stderr, "usage: wdrift-bench-snapshot bf16|f32 [THREADS [REPEATS<=%d "
			"[auto|radix|vqsort]]]\n", MAX_REPEATS);
		return 2;
	}
	size_t n = shapes(numel);
	uint64_t elements = 0;
	for (size_t t = 0; t < n; t++)
		elements += numel[t];
	make_run(dt, numel, n, 0, 1, data[0], views[0]);	/* baseline */
	make_run(dt, numel, n, 1e-3f, 2, data[1], views[1]);	/* candidate */
	make_run(dt, numel, n, 4e-3f, 3, data[2], views[2]);	/* proxy */
	if (wd_engine_open(WD_BACKEND_CPU, &e) < 0)
		return 1;
	wd_engine_set_threads(e, threads);
	if (wd_engine_set_sort(e, how) < 0) {
		fprintf(stderr, "wdrift-bench-snapshot: no %s sort in this build or on this CPU\n", sort);
		return 1;
	}
	if (wd_prepare_many(e, views[0], n, 0, base) < 0)
		return 1;

	size_t bytes = 2 * elements * wd_dtype_size(dt);	/* the candidate's and the proxy's */
	char *dst = malloc(bytes);
	memset(dst, 1, bytes);				/* touched: no page faults in the copy */
	for (int k = 0; k < repeats; k++) {
		double t0 = bench_now();
		for (int r = 0; r < 2; r++) {
			if (wd_prepare_many(e, views[1 + r], n, 0, run) < 0 ||
			    wd_w1_many(e, (const struct wd_prepared *const *)run,
				       (const struct wd_prepared *const *)base, n, w1[r]) < 0)
				return 1;
			for (size_t t = 0; t < n; t++)
				wd_prepared_free(&run[t]);
		}
		t_job[k] = bench_now() - t0;
		t0 = bench_now();
		size_t at = 0;
		for (int r = 0; r < 2; r++)
			for (size_t t = 0; t < n; t++) {
				size_t b = numel[t] * wd_dtype_size(dt);
				memcpy(dst + at, data[1 + r][t], b);
				at += b;
			}
		t_copy[k] = bench_now() - t0;
	}
	double job = bench_median(t_job, repeats), copy = bench_median(t_copy, repeats), sum = 0;
	for (size_t t = 0; t < n; t++)
		sum += w1[0][t] + w1[1][t] + dst[t % bytes];	/* keeps the copy */
	printf("{\"dtype\": \"%s\", \"tensors\": %zu, \"elements\": %llu, \"bytes\": %zu, "
	       "\"threads\": %d, \"seconds\": %.6f, \"tensors_per_s\": %.1f, \"gb_per_s\": %.3f, "
	       "\"memcpy_seconds\": %.6f, \"memcpy_gb_per_s\": %.3f, \"engine\": \"%s\", \"check\": %.6g}\n",
	       wd_dtype_name(dt), 2 * n, (unsigned long long)(2 * elements), bytes,
	       wd_engine_threads(e), job, (double)(2 * n) / job, (double)bytes / job / 1e9, copy,
	       (double)bytes / copy / 1e9, wd_engine_describe(e), sum);
	for (size_t t = 0; t < n; t++) {
		wd_prepared_free(&base[t]);
		for (int r = 0; r < 3; r++)
			free(data[r][t]);
	}
	free(dst);
	wd_engine_close(&e);
	return 0;
}
