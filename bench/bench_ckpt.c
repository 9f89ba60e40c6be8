/*
 * bench_ckpt.c: what reading a checkpoint in a resource-limited child
 * (lib/ckpt_sandbox.c) costs beside the in-process reader it wraps
 * (lib/checkpoint.c), on one file: open, list, read every tensor and sum
 * its bytes (so that both paths touch the data as a consumer would).
 * The two alternate, REPEATS times each, after one warm-up of each that
 * puts the file in the page cache. Prints the median and the minimum of
 * each, and the overhead. Not a test: timings are noisy on shared hosts.
 *
 *   wdrift-bench-ckpt FILE.h5 [REPEATS]   (default 9)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_sandbox.h"
#include "bench_time.h"

/* A sum over the bytes as 64-bit words: every page is read. */
static uint64_t touch(const void *p, size_t bytes)
{
	const uint64_t *w = p;
	uint64_t s = 0;
	for (size_t i = 0; i < bytes / 8; i++)
		s += w[i];
	for (size_t i = bytes / 8 * 8; i < bytes; i++)
		s += ((const unsigned char *)p)[i];
	return s;
}

/* One pass; returns its seconds, or -1 with the error printed. */
static double pass(const char *path, int sandboxed, const struct wd_sandbox_limits *lim,
		   uint64_t *sum, uint64_t *bytes, size_t *tensors)
{
	char err[WD_CKPT_ERR_MAX];
	struct wd_ckpt *c = NULL;
	struct wd_ckpt_box *box = NULL;
	double t0 = bench_now();
	int r = sandboxed ? wd_ckpt_box_open(path, lim, &box, err) : wd_ckpt_open(path, &c, err);
	const struct wd_ckpt *list = box ? wd_ckpt_box_listing(box) : c;

	*sum = *bytes = 0;
	*tensors = 0;
	for (size_t i = 0; r == 0 && i < wd_ckpt_count(list); i++) {
		size_t n;
		if (wd_ckpt_check(list, i, &n, err) < 0)
			continue;	/* not a tensor: neither path reads it */
		if (box) {
			struct wd_tensor_map m;
			if ((r = wd_ckpt_box_read(box, i, &m, err)) < 0)
				break;
			*sum += touch(m.data, m.bytes);
			wd_tensor_map_release(&m);
		} else {
			void *buf;
			if ((r = wd_ckpt_read(c, i, &buf, err)) < 0)
				break;
			*sum += touch(buf, n);
			free(buf);
		}
		*bytes += n;
		++*tensors;
	}
	wd_ckpt_box_close(&box);
	wd_ckpt_close(&c);
	if (r < 0) {
		fprintf(stderr, "wdrift-bench-ckpt: %s\n", err);
		return -1;
	}
	return bench_now() - t0;
}

int main(int argc, char **argv)
{
	struct wd_sandbox_limits lim;
	char err[256];
	int repeats = argc > 2 ? atoi(argv[2]) : 9;
	double t[2][101];
	uint64_t sum[2], bytes;
	size_t tensors;

	if (argc < 2 || repeats < 1 || repeats > 100) {
		fprintf(stderr, "usage: wdrift-bench-ckpt FILE.h5 [REPEATS (1-100)]\n");
		return 2;
	}
	if (wd_sandbox_limits_env(&lim, err, sizeof(err)) < 0) {
		fprintf(stderr, "wdrift-bench-ckpt: %s\n", err);
		return 2;
	}
	for (int k = -1; k < repeats; k++)	/* k = -1: the warm-up */
		for (int s = 0; s < 2; s++) {
			double secs = pass(argv[1], s, &lim, &sum[s], &bytes, &tensors);
			if (secs < 0)
				return 1;
			if (k >= 0)
				t[s][k] = secs;
		}
	if (sum[0] != sum[1]) {
		fprintf(stderr, "wdrift-bench-ckpt: the two paths read different bytes\n");
		return 1;
	}
	for (int s = 0; s < 2; s++)
		qsort(t[s], (size_t)repeats, sizeof(double), bench_cmp_double);
	double med[2] = { t[0][repeats / 2], t[1][repeats / 2] };
	printf("%s: %zu tensors, %.1f MiB; %d passes each, open + read + sum\n", argv[1], tensors,
	       (double)bytes / (1 << 20), repeats);
	printf("  in-process  median %8.1f ms  min %8.1f ms  (%.2f GB/s)\n", med[0] * 1e3,
	       t[0][0] * 1e3, (double)bytes / med[0] / 1e9);
	printf("  sandboxed   median %8.1f ms  min %8.1f ms  (%.2f GB/s)\n", med[1] * 1e3,
	       t[1][0] * 1e3, (double)bytes / med[1] / 1e9);
	printf("  overhead    median %+8.1f ms (%+.0f%%), %+.3f ms per tensor\n",
	       (med[1] - med[0]) * 1e3, 100 * (med[1] / med[0] - 1),
	       (med[1] - med[0]) * 1e3 / (double)(tensors ? tensors : 1));
	return 0;
}
