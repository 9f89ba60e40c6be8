/*
 * bench_engine.c: times the CPU engine on one pair of tensors read from raw
 * files, on THREADS threads (0, the default: the cores available). Prints
 * one JSON line: the W1, and the median times of the full job (prepare
 * both as one batch, wd_prepare_many, as wdrift compare does each pair,
 * + W1), of the same with the two prepared one at a time (each split over
 * the threads), and of W1 against a prepared baseline (prepare the
 * candidate + W1).
 * bench/bench.py runs it beside scipy and numpy on the same arrays, and
 * for the scaling curve. Not a test: timings are noisy on shared hosts.
 *
 * Built with WD_VQSORT_PEER (wdrift-bench-vqsort, bench/vqsort_peer.cc),
 * --vqsort times the peer instead, on one thread: Highway's vqsort of
 * copies of both fp32 tensors, then the |a_i - b_i| pass; on two threads;
 * and beside it the host's copy rate of the same bytes on one thread and
 * on two, which bounds what two threads can give a sort.
 *
 * SORT picks the CPU's sort of fp32 and fp64 (wd_engine_set_sort): auto
 * (the default), radix or vqsort, so that both are timed in one run.
 *
 * --crc32 times the payloads' CRC-32 (lib/crc32.c) on the file's bytes,
 * folded and with zlib's code, beside memcpy of the same bytes: one JSON
 * line of GB/s, the median of REPEATS (make bench-ingest prints it).
 *
 *   wdrift-bench DTYPE A.raw B.raw [REPEATS [THREADS [SORT]]]
 *   wdrift-bench --crc32 FILE [REPEATS]
 *   wdrift-bench-vqsort --vqsort A.raw B.raw [REPEATS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wdrift.h"
#include "bench_time.h"
#include "crc32.h"

static void *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	void *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	*size = buf ? (size_t)len : 0;
	fclose(f);
	return buf;
}

#ifdef WD_VQSORT_PEER
double vqsort_peer_w1(float *a, float *b, size_t n);
double vqsort_peer_w1_two_threads(float *a, float *b, size_t n);
const char *vqsort_peer_target(int avx2_only);

/* The median of reps runs of peer on copies of a and b (size bytes each), made untimed; its W1 in *w1. */
static double peer_median(double (*peer)(float *, float *, size_t), const void *a, const void *b,
			  float *ca, float *cb, size_t size, int reps, double *w1)
{
	double t[64];

	for (int r = 0; r < reps; r++) {
		memcpy(ca, a, size);
		memcpy(cb, b, size);
		double t0 = bench_now();
		*w1 = peer(ca, cb, size / 4);
		t[r] = bench_now() - t0;
	}
	qsort(t, (size_t)reps, sizeof(double), bench_cmp_double);
	return t[reps / 2];
}

struct copy_job {
	void *dst;
	const void *src;
	size_t n;
};

static void *copy_one(void *arg)
{
	struct copy_job *j = arg;
	memcpy(j->dst, j->src, j->n);
	return NULL;
}

/*
 * This host's memory, as the ideal peer cannot see it: the median GB/s of
 * copying both tensors on one thread (one after the other) and on two (one
 * each, at once), the buffers faulted in before the clock. A sort of 2^24
 * keys is bound by memory: where two threads copy little more than one,
 * no split of the same work reaches one thread's time halved.
 */
static void copy_rates(const void *a, const void *b, float *ca, float *cb, size_t size, int reps,
		       double *one, double *two)
{
	double t1[64], t2[64];
	struct copy_job ja = { ca, a, size }, jb = { cb, b, size };

	copy_one(&ja);
	copy_one(&jb);
	for (int r = 0; r < reps; r++) {
		double t0 = bench_now();
		copy_one(&ja);
		copy_one(&jb);
		t1[r] = bench_now() - t0;
		pthread_t other;
		t0 = bench_now();
		int threaded = pthread_create(&other, NULL, copy_one, &jb) == 0;
		copy_one(&ja);
		if (threaded)
			pthread_join(other, NULL);
		else
			copy_one(&jb);
		t2[r] = bench_now() - t0;
	}
	*one = 2.0 * (double)size / bench_median(t1, reps) / 1e9;
	*two = 2.0 * (double)size / bench_median(t2, reps) / 1e9;
}

/*
 * The peer: the median time of two vqsort calls and the |a - b| pass
 * (copies made untimed), on Highway's own dispatch and on AVX2 at most;
 * "seconds" is the faster (vqsort_peer.cc says why both), which then also
 * runs on two threads, one tensor each ("seconds_two_threads").
 */
static int vqsort_main(int argc, char **argv)
{
	size_t sa, sb;
	int reps = argc > 4 ? atoi(argv[4]) : 5;
	double w1 = 0, med[2];
	const char *target[2];
	void *a = slurp(argv[2], &sa), *b = slurp(argv[3], &sb);
	float *ca = malloc(sa + 4), *cb = malloc(sb + 4);

	if (!a || !b || !ca || !cb || sa != sb || reps < 1 || reps > 64) {
		fprintf(stderr, "wdrift-bench-vqsort: cannot read '%s' and '%s' (same size)\n",
			argv[2], argv[3]);
		return 1;
	}
	for (int avx2 = 0; avx2 <= 1; avx2++) {
		target[avx2] = vqsort_peer_target(avx2);
		med[avx2] = peer_median(vqsort_peer_w1, a, b, ca, cb, sa, reps, &w1);
	}
	int best = med[1] < med[0];
	/* The faster dispatch again, each tensor sorted on a thread of its own. */
	double w1_two = 0;
	vqsort_peer_target(best);
	double two = peer_median(vqsort_peer_w1_two_threads, a, b, ca, cb, sa, reps, &w1_two);
	vqsort_peer_target(0);
	double copy1, copy2;
	copy_rates(a, b, ca, cb, sa, reps, &copy1, &copy2);
	printf("{\"peer\": \"vqsort\", \"n\": %zu, \"w1\": %.17g, \"seconds\": %.6f, \"target\": \"%s\", "
	       "\"seconds_dispatch\": %.6f, \"target_dispatch\": \"%s\", \"seconds_avx2\": %.6f, "
	       "\"seconds_two_threads\": %.6f, \"w1_two_threads\": %.17g, \"copy_gbps_one_thread\": %.3f, "
	       "\"copy_gbps_two_threads\": %.3f}\n",
	       sa / 4, w1, med[best], target[best], med[0], target[0], med[1], two, w1_two, copy1, copy2);
	free(a);
	free(b);
	free(ca);
	free(cb);
	return 0;
}
#endif

/* GB/s of wd_crc32's median run over n bytes, folded or with zlib's code. */
static double crc_rate(const void *p, size_t n, int reps, int fold, uint32_t *crc)
{
	double t[64];

	wd_crc32_use(fold);
	for (int r = 0; r < reps; r++) {
		double t0 = bench_now();
		*crc = wd_crc32(0, p, n);
		t[r] = bench_now() - t0;
	}
	wd_crc32_use(1);
	qsort(t, (size_t)reps, sizeof(double), bench_cmp_double);
	return (double)n / t[reps / 2] / 1e9;
}

static int crc_main(int argc, char **argv)
{
	size_t n = 0;
	int reps = argc > 3 ? atoi(argv[3]) : 7;
	double t[64];
	uint32_t folded = 0, plain = 0;

	if (reps < 1 || reps > 64) {
		fprintf(stderr, "wdrift-bench: --crc32 FILE [REPEATS]: REPEATS is 1 to 64\n");
		return 2;
	}
	void *p = slurp(argv[2], &n), *dst = p ? malloc(n + 1) : NULL;
	if (!dst) {
		fprintf(stderr, "wdrift-bench: cannot read '%s'\n", argv[2]);
		free(p);
		return 1;
	}
	int can_fold = wd_crc32_folds();
	double gf = crc_rate(p, n, reps, 1, &folded), gz = crc_rate(p, n, reps, 0, &plain);
	memcpy(dst, p, n);	/* faulted in before the clock */
	for (int r = 0; r < reps; r++) {
		double t0 = bench_now();
		memcpy(dst, p, n);
		t[r] = bench_now() - t0;
	}
	qsort(t, (size_t)reps, sizeof(double), bench_cmp_double);
	printf("{\"bytes\": %zu, \"crc32_gbps\": %.3f, \"folded\": %s, \"zlib_gbps\": %.3f, "
	       "\"memcpy_gbps\": %.3f, \"equal\": %s}\n", n, gf, can_fold ? "true" : "false", gz,
	       (double)n / t[reps / 2] / 1e9, folded == plain ? "true" : "false");
	free(p);
	free(dst);
	return folded == plain ? 0 : 1;
}

int main(int argc, char **argv)
{
	enum wd_dtype t;
	size_t sa, sb;
	struct wd_engine *e;
	int reps = argc > 4 ? atoi(argv[4]) : 5, threads = argc > 5 ? atoi(argv[5]) : 0;
	double full[64], each[64], warm[64], w1 = 0;

#ifdef WD_VQSORT_PEER
	if (argc >= 4 && !strcmp(argv[1], "--vqsort"))
		return vqsort_main(argc, argv);
#endif
	if (argc >= 3 && !strcmp(argv[1], "--crc32"))
		return crc_main(argc, argv);
	const char *sort = argc > 6 ? argv[6] : "auto";
	enum wd_sort how = !strcmp(sort, "radix") ? WD_SORT_RADIX
			 : !strcmp(sort, "vqsort") ? WD_SORT_VQSORT : WD_SORT_AUTO;
	if (argc < 4 || wd_dtype_parse(argv[1], &t) || reps < 1 || reps > 64 || threads < 0 ||
	    (how == WD_SORT_AUTO && strcmp(sort, "auto"))) {
		fprintf(stderr, "usage: wdrift-bench f32|f64|f16|bf16 A.raw B.raw "
			"[REPEATS<=64 [THREADS [auto|radix|vqsort]]]\n");
		return 2;
	}
	void *a = slurp(argv[2], &sa), *b = slurp(argv[3], &sb);
	if (!a || !b) {
		fprintf(stderr, "wdrift-bench: cannot read '%s' or '%s'\n", argv[2], argv[3]);
		return 1;
	}
	if (wd_engine_open(WD_BACKEND_CPU, &e))
		return 1;
	wd_engine_set_threads(e, threads);
	if (wd_engine_set_sort(e, how)) {
		fprintf(stderr, "wdrift-bench: no %s sort in this build or on this CPU\n", sort);
		return 1;
	}
	struct wd_view va = { t, a, sa / wd_dtype_size(t) }, vb = { t, b, sb / wd_dtype_size(t) };
	for (int r = 0; r < reps; r++) {
		struct wd_prepared *p[2], *pa, *pb;
		struct wd_view v[2] = { va, vb };
		/* the job as wdrift compare runs a pair: one batch, then W1 */
		double t0 = bench_now();
		if (wd_prepare_many(e, v, 2, 0, p))
			return 1;
		wd_w1(e, p[0], p[1], &w1);
		full[r] = bench_now() - t0;
		wd_prepared_free(&p[0]);
		wd_prepared_free(&p[1]);
		/* one tensor at a time, each split over the threads */
		t0 = bench_now();
		if (wd_prepare(e, &va, 0, &pa))
			return 1;
		double t1 = bench_now();
		if (wd_prepare(e, &vb, 0, &pb))
			return 1;
		wd_w1(e, pa, pb, &w1);
		double t2 = bench_now();
		each[r] = t2 - t0;
		warm[r] = t2 - t1;
		if (r == reps - 1)
			printf("{\"dtype\": \"%s\", \"n\": %zu, \"method\": \"%s\", ", wd_dtype_name(t),
			       (size_t)va.numel,
			       wd_prepared_method(pa) == WD_METHOD_HIST16 ? "hist16" : "sort");
		wd_prepared_free(&pa);
		wd_prepared_free(&pb);
	}
	qsort(full, (size_t)reps, sizeof(double), bench_cmp_double);
	qsort(each, (size_t)reps, sizeof(double), bench_cmp_double);
	qsort(warm, (size_t)reps, sizeof(double), bench_cmp_double);
	printf("\"w1\": %.17g, \"seconds\": %.6f, \"seconds_one_at_a_time\": %.6f, "
	       "\"seconds_prepared_baseline\": %.6f, \"threads\": %d, \"engine\": \"%s\"}\n",
	       w1, full[reps / 2], each[reps / 2], warm[reps / 2], wd_engine_threads(e),
	       wd_engine_describe(e));
	wd_engine_close(&e);
	free(a);
	free(b);
	return 0;
}
