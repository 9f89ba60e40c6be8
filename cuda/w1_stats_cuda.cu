/*
 * w1_stats_cuda.cu: W1 and the statistics on the device (backend_cuda.h:
 * cuda_w1_async, cuda_summarize, cuda_pair_stats, cuda_to_host): the W1
 * kernels' launches (a count expanded to sorted values where it meets
 * anything but a count of its format), a sorted tensor's summary, the
 * fused pair statistics, and a prepared tensor copied back to the host.
 * Reductions write per-block partials into the results arena
 * (engine_cuda.cu), added on the host in a fixed order. The kernels it
 * launches (kernels.cuh) are launched from here only.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_cuda.cuh"
#include "kernels.cuh"

/* At open: the kernels load on this device (this build is sm_90 and PTX). */
cudaError_t w1_kernels_probe(void)
{
	cudaFuncAttributes fa;
	return cudaFuncGetAttributes(&fa, w1_hist_scan_kernel);
}

/* --- W1 --- */

/*
 * A prepared 16-bit count as sorted floats, in a new device buffer: the
 * counts in value order, scanned on the device into offsets (no host
 * round trip, no sync), then spread over every thread.
 */
static int expand_to_values(struct cuda_engine *c, const struct wd_prepared *p, float **out)
{
	int f = fmt_index(p->store);
	unsigned n_order = c->n_order[f];
	size_t off_bytes = (n_order + 1) * sizeof(unsigned long long), tmp_bytes = 0;
	void *gathered = NULL, *off = NULL, *tmp = NULL;
	cudaError_t err;
	int r;

	*out = NULL;
	err = cub::DeviceScan::ExclusiveSum(NULL, tmp_bytes, (unsigned long long *)NULL,
					    (unsigned long long *)NULL, (int)n_order + 1, c->compute);
	if (err != cudaSuccess)
		return cuda_fail(err, "DeviceScan (size)", __FILE__, __LINE__);
	if ((r = dev_alloc(c, (void **)out, p->n_finite * 4)) ||
	    (r = dev_alloc(c, &gathered, off_bytes)) || (r = dev_alloc(c, &off, off_bytes)) ||
	    (r = dev_alloc(c, &tmp, tmp_bytes)))
		goto done;
	gather_counts_kernel<<<grid_for(c, n_order + 1, 256), 256, 0, c->compute>>>(
		(const unsigned long long *)p->dev_hist, c->d_order[f], n_order,
		(unsigned long long *)gathered);
	if ((err = cudaGetLastError()) != cudaSuccess) {
		r = cuda_fail(err, "gather_counts_kernel", __FILE__, __LINE__);
		goto done;
	}
	err = cub::DeviceScan::ExclusiveSum(tmp, tmp_bytes, (unsigned long long *)gathered,
					    (unsigned long long *)off, (int)n_order + 1, c->compute);
	if (err != cudaSuccess) {
		r = cuda_fail(err, "DeviceScan", __FILE__, __LINE__);
		goto done;
	}
	{
		unsigned g = grid_for(c, (p->n_finite + EXPAND_ITEMS - 1) / EXPAND_ITEMS, 256);
		if (p->store == WD_BF16)
			expand_kernel<fmt_bf16><<<g, 256, 0, c->compute>>>(
				(const unsigned long long *)off, c->d_order[f], n_order, *out);
		else
			expand_kernel<fmt_f16><<<g, 256, 0, c->compute>>>(
				(const unsigned long long *)off, c->d_order[f], n_order, *out);
		if ((err = cudaGetLastError()) != cudaSuccess)
			r = cuda_fail(err, "expand_kernel", __FILE__, __LINE__);
	}
done:
	dev_free(c, &tmp, tmp_bytes);	/* stream-ordered: after the kernels */
	dev_free(c, &off, off_bytes);
	dev_free(c, &gathered, off_bytes);
	if (r)
		dev_free(c, (void **)out, p->n_finite * 4);
	return r;
}

/* Queues W1 of two sorted value arrays. */
template <typename TA, typename TB>
static int w1_sorted(struct cuda_engine *c, const TA *a, size_t na, const TB *b, size_t nb,
		     double *out)
{
	size_t first;
	unsigned g;
	int r;

	if (sizeof(TA) == sizeof(TB) && na == nb) {
		const int V = 16 / sizeof(TA);
		int vec = aligned16(a) && aligned16(b);
		g = grid_for(c, vec ? (na + V - 1) / V : na, RED_THREADS);
		if ((r = arena_take(c, g, 1, &first)))
			return r;
		if (vec)
			w1_equal_kernel<TA, TA, 16 / sizeof(TA)><<<g, RED_THREADS, 0, c->compute>>>(
				a, (const TA *)b, na, c->d_arena + first);
		else
			w1_equal_kernel<TA, TA, 1><<<g, RED_THREADS, 0, c->compute>>>(
				a, (const TA *)b, na, c->d_arena + first);
		CU_LAUNCH();
		return queue_result(c, out, first, g, 1, 1.0 / (double)na);
	}
	g = grid_for(c, (na + nb + MERGE_ITEMS - 1) / MERGE_ITEMS, RED_THREADS);
	if ((r = arena_take(c, g, 1, &first)))
		return r;
	w1_merge_kernel<TA, TB><<<g, RED_THREADS, 0, c->compute>>>(a, na, b, nb, c->d_arena + first);
	CU_LAUNCH();
	return queue_result(c, out, first, g, 1, 1.0);
}

/* The finite sorted values of p; a 16-bit count is expanded (owned). */
struct sorted {
	const void *values;
	int wide;	/* doubles */
	float *owned;
};

static int sorted_of(struct cuda_engine *c, struct wd_prepared *p, struct sorted *s)
{
	int r;

	s->owned = NULL;
	s->wide = p->method == WD_METHOD_SORT && p->store == WD_F64;
	if (p->method == WD_METHOD_SORT) {
		if ((r = settle(c, p)))
			return r;
		s->values = (const char *)p->dev_keys + p->dev_first * (s->wide ? 8 : 4);
		return 0;
	}
	r = expand_to_values(c, p, &s->owned);
	s->values = s->owned;
	return r;
}

static int w1_async(struct cuda_engine *c, struct wd_prepared *a, struct wd_prepared *b,
		    double *out)
{
	size_t first;
	int r;

	if ((r = settle(c, a)) || (r = settle(c, b)))
		return r;
	if (a->method == WD_METHOD_HIST16 && b->method == WD_METHOD_HIST16 && a->store == b->store) {
		int f = fmt_index(a->store);
		if ((r = arena_take(c, 1, 1, &first)))
			return r;
		w1_hist_scan_kernel<<<1, SCAN_THREADS, 0, c->compute>>>(
			(const unsigned long long *)a->dev_hist, a->n_finite,
			(const unsigned long long *)b->dev_hist, b->n_finite,
			c->d_order[f], c->d_gap[f], c->n_order[f], c->d_arena + first);
		CU_LAUNCH();
		return queue_result(c, out, first, 1, 1, 1.0);
	}
	struct sorted sa, sb;
	if ((r = sorted_of(c, a, &sa)))
		return r;
	if ((r = sorted_of(c, b, &sb))) {
		dev_free(c, (void **)&sa.owned, a->n_finite * 4);
		return r;
	}
	if (!sa.wide && !sb.wide)
		r = w1_sorted(c, (const float *)sa.values, a->n_finite, (const float *)sb.values,
			      b->n_finite, out);
	else if (sa.wide && sb.wide)
		r = w1_sorted(c, (const double *)sa.values, a->n_finite, (const double *)sb.values,
			      b->n_finite, out);
	else if (sa.wide)
		r = w1_sorted(c, (const double *)sa.values, a->n_finite, (const float *)sb.values,
			      b->n_finite, out);
	else
		r = w1_sorted(c, (const float *)sa.values, a->n_finite, (const double *)sb.values,
			      b->n_finite, out);
	dev_free(c, (void **)&sa.owned, a->n_finite * 4);	/* stream-ordered: after use */
	dev_free(c, (void **)&sb.owned, b->n_finite * 4);
	return r;
}

extern "C" int cuda_w1_async(struct cuda_engine *c, const struct wd_prepared *a,
			     const struct wd_prepared *b, double *out)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	/* settling fills in counts: the tensors' values do not change */
	return lost(c, w1_async(c, (struct wd_prepared *)a, (struct wd_prepared *)b, out));
}


/*
 * Host value of the finite sorted value at index i. Copies go on the
 * compute stream: the legacy stream would also wait for the caller's work.
 */
static int value_at(const struct cuda_engine *c, const struct wd_prepared *p, size_t i,
		    double *v)
{
	size_t es = p->store == WD_F64 ? 8 : 4;
	const char *src = (const char *)p->dev_keys + (p->dev_first + i) * es;
	if (es == 8) {
		CU(cudaMemcpyAsync(v, src, 8, cudaMemcpyDeviceToHost, c->compute));
		CU(cudaStreamSynchronize(c->compute));
	} else {
		float f;
		CU(cudaMemcpyAsync(&f, src, 4, cudaMemcpyDeviceToHost, c->compute));
		CU(cudaStreamSynchronize(c->compute));
		*v = f;
	}
	return 0;
}

/*
 * Summary of a sorted device tensor: min and max are its ends; the sums are
 * shifted by the median m (summary_body), so a large mean does not cancel
 * a small spread.
 */
static int summarize(struct cuda_engine *c, struct wd_prepared *p)
{
	struct wd_summary *s = &p->summary;
	double mid;
	size_t first;
	int r;

	if ((r = settle(c, p)))
		return r;
	s->numel = p->numel;
	s->n_finite = p->n_finite;
	s->nonfinite = p->nonfinite;
	s->mean = s->std = s->min = s->max = NAN;
	s->l2 = 0;
	if (!p->n_finite) {
		p->have_summary = 1;
		return 0;
	}
	int wide = p->store == WD_F64;
	const void *v = (const char *)p->dev_keys + p->dev_first * (wide ? 8 : 4);
	int vec = aligned16(v);
	size_t per = vec ? (wide ? 2 : 4) : 1;
	unsigned g = grid_for(c, (p->n_finite + per - 1) / per, RED_THREADS);
	/* past the queued results' partials: those stay for wd_engine_sync */
	if ((r = arena_take(c, g, SUMMARY_PARTIALS, &first)))
		return r;
	double *d = c->d_arena + first;
	if (wide && vec)
		summary_kernel<double, 2><<<g, RED_THREADS, 0, c->compute>>>((const double *)v, p->n_finite, d);
	else if (wide)
		summary_kernel<double, 1><<<g, RED_THREADS, 0, c->compute>>>((const double *)v, p->n_finite, d);
	else if (vec)
		summary_kernel<float, 4><<<g, RED_THREADS, 0, c->compute>>>((const float *)v, p->n_finite, d);
	else
		summary_kernel<float, 1><<<g, RED_THREADS, 0, c->compute>>>((const float *)v, p->n_finite, d);
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_arena + first, d, (size_t)g * SUMMARY_PARTIALS * sizeof(double),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	if ((r = value_at(c, p, 0, &s->min)) || (r = value_at(c, p, p->n_finite - 1, &s->max)) ||
	    (r = value_at(c, p, p->n_finite / 2, &mid)))
		return r;
	summary_finish(c->h_arena + first, g, mid, (double)p->n_finite, &s->mean, &s->std, &s->l2);
	p->have_summary = 1;
	return 0;
}

extern "C" int cuda_summarize(struct cuda_engine *c, struct wd_prepared *p)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, summarize(c, p));
}


/* --- element-wise statistics and copies back --- */

template <typename LA>
static void launch_pair_a(const struct cuda_engine *c, unsigned g, const struct wd_prepared *a,
			  const struct wd_prepared *b, double *out)
{
	const typename LA::T *pa = (const typename LA::T *)a->dev_raw;
	switch (b->dtype) {
	case WD_F32: pair_stats_kernel<LA, load_f32><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const float *)b->dev_raw, a->numel, out); break;
	case WD_F64: pair_stats_kernel<LA, load_f64><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const double *)b->dev_raw, a->numel, out); break;
	case WD_F16: pair_stats_kernel<LA, load_f16><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const uint16_t *)b->dev_raw, a->numel, out); break;
	case WD_BF16: pair_stats_kernel<LA, load_bf16><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const uint16_t *)b->dev_raw, a->numel, out); break;
	}
}

static int pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
		      const struct wd_prepared *b, struct wd_pair_stats *out)
{
	unsigned g = grid_for(c, (a->numel + PAIR_UNROLL - 1) / PAIR_UNROLL, RED_THREADS);
	size_t first;
	int r;

	if ((r = arena_take(c, g, PAIR_PARTIALS, &first)))	/* as in summarize() */
		return r;
	double *d = c->d_arena + first;
	switch (a->dtype) {
	case WD_F32: launch_pair_a<load_f32>(c, g, a, b, d); break;
	case WD_F64: launch_pair_a<load_f64>(c, g, a, b, d); break;
	case WD_F16: launch_pair_a<load_f16>(c, g, a, b, d); break;
	case WD_BF16: launch_pair_a<load_bf16>(c, g, a, b, d); break;
	}
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_arena + first, d, (size_t)g * PAIR_PARTIALS * sizeof(double),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	pair_stats_finish(c->h_arena + first, g, &out->max_abs_diff, &out->rel_l2,
			  &out->n_compared, &out->n_diff);
	return 0;
}

extern "C" int cuda_pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
			       const struct wd_prepared *b, struct wd_pair_stats *out)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, pair_stats(c, a, b, out));
}

/*
 * p on the host, in a new buffer: a sort's finite values, or a count's
 * 65536 counts (through the pinned buffer).
 */
static int to_host(struct cuda_engine *c, struct wd_prepared *p, void **values)
{
	int r = settle(c, p);
	if (r)
		return r;
	int counted = p->method == WD_METHOD_HIST16;
	size_t es = p->store == WD_F64 ? 8 : 4, n = p->n_finite;
	size_t bytes = counted ? 65536 * sizeof(uint64_t) : n * es;
	void *h = malloc(bytes + es);

	*values = NULL;
	if (!h)
		return -ENOMEM;
	const void *src = counted ? p->dev_hist : (const char *)p->dev_keys + p->dev_first * es;
	cudaError_t err = cudaMemcpyAsync(counted ? (void *)c->h_hist : h, src, bytes,
					  cudaMemcpyDeviceToHost, c->compute);	/* after the sort */
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(c->compute);
	if (err != cudaSuccess) {
		free(h);
		return cuda_fail(err, "copy to host", __FILE__, __LINE__);
	}
	if (counted)
		memcpy(h, c->h_hist, bytes);
	*values = h;
	return 0;
}

extern "C" int cuda_to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, to_host(c, (struct wd_prepared *)p, values));
}
