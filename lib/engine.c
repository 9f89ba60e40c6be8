/*
 * engine.c: the engine API and its one dispatcher: the backend choice, and
 * where each call runs. The work itself is the backends': the CPU's
 * (backend_cpu.h: prepare_cpu.c, w1.c, stats.c) and the CUDA one's
 * (backend_cuda.h: cuda/, or backend_cuda_none.c in a build without it),
 * and neither calls back in here.
 *
 * A tensor over the device budget is prepared on the CPU, and a device
 * error makes the engine fall back to the CPU for good, with a logged
 * error. Depends on libc only.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "grow.h"
#include "backend_cuda.h"
#include "dtype.h"
#include "log.h"
#include "prepared.h"

/* A result queued by wd_w1_async() and computed on the CPU. */
struct pending {
	double *out;
	double value;
};

struct wd_engine {
	enum wd_backend backend;	/* in use: CPU after a fallback */
	char desc[160];
	struct cpu_engine cpu;	/* the radix sort's scratch */
	struct cuda_engine *cuda;	/* NULL on the CPU */
	struct wd_prepared *live;	/* tensors holding device memory */
	int device_lost;	/* sync owes the caller an -EIO */
	struct pending *pend;
	size_t n_pend, cap_pend;
};

int wd_backend_parse(const char *s, enum wd_backend *out)
{
	if (!strcmp(s, "auto"))
		*out = WD_BACKEND_AUTO;
	else if (!strcmp(s, "cpu"))
		*out = WD_BACKEND_CPU;
	else if (!strcmp(s, "cuda"))
		*out = WD_BACKEND_CUDA;
	else
		return -EINVAL;
	return 0;
}

int wd_engine_open(enum wd_backend backend, struct wd_engine **out)
{
	return wd_engine_open_device(backend, 0, out);
}

int wd_engine_open_device(enum wd_backend backend, int device, struct wd_engine **out)
{
	struct wd_engine *e;
	char why[sizeof(((struct wd_engine *)0)->desc)] = "";

	*out = NULL;
	if ((backend != WD_BACKEND_AUTO && backend != WD_BACKEND_CPU &&
	     backend != WD_BACKEND_CUDA) || device < 0)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->backend = WD_BACKEND_CPU;
	if (backend != WD_BACKEND_CPU) {
		int r = cuda_engine_open(&e->cuda, device, e->desc, sizeof(e->desc));
		if (r == 0) {
			e->backend = WD_BACKEND_CUDA;
			wd_log(WD_LOG_NOTICE, "engine: %s", e->desc);
			*out = e;
			return 0;
		}
		snprintf(why, sizeof(why), "%s", e->desc);
		if (backend == WD_BACKEND_CUDA) {
			wd_log(WD_LOG_ERR, "engine: cuda asked for, but %s", why);
			free(e);
			return -ENODEV;
		}
	}
	snprintf(e->desc, sizeof(e->desc), "cpu (exact, 1 thread)%s%.100s",
		 why[0] ? "; no cuda: " : "", why);
	wd_log(WD_LOG_NOTICE, "engine: %s", e->desc);
	*out = e;
	return 0;
}

/* Adds p, just prepared on the device, to the engine's live tensors. */
static void live_add(struct wd_engine *e, struct wd_prepared *p)
{
	p->live_prev = NULL;
	p->live_next = e->live;
	if (e->live)
		e->live->live_prev = p;
	e->live = p;
}

static void live_del(struct wd_engine *e, struct wd_prepared *p)
{
	if (p->live_prev)
		p->live_prev->live_next = p->live_next;
	else if (e->live == p)
		e->live = p->live_next;
	if (p->live_next)
		p->live_next->live_prev = p->live_prev;
	p->live_prev = p->live_next = NULL;
}

/*
 * Frees the device memory of every live tensor before the device goes
 * (an error, or the engine closing), so that none is left in the pool for
 * cuda_engine_close. The tensors stay the caller's to free, but stale:
 * detached from the engine, so that freeing them later touches neither
 * the device nor, after wd_engine_close, the engine.
 */
static void engine_release_live(struct wd_engine *e)
{
	while (e->live) {
		struct wd_prepared *p = e->live;
		live_del(e, p);
		cuda_prepared_release(e->cuda, p);
		p->engine = NULL;
		p->stale = 1;
	}
}

void wd_engine_close(struct wd_engine **e)
{
	if (!*e)
		return;
	if ((*e)->cuda) {
		engine_release_live(*e);
		cuda_engine_close(&(*e)->cuda);
	}
	free((*e)->pend);
	cpu_engine_close(&(*e)->cpu);
	free(*e);
	*e = NULL;
}

const char *wd_engine_describe(const struct wd_engine *e)
{
	return e->desc;
}

enum wd_backend wd_engine_backend(const struct wd_engine *e)
{
	return e->backend;
}

void wd_engine_set_budget(struct wd_engine *e, uint64_t bytes)
{
	if (e->cuda)
		cuda_engine_set_budget(e->cuda, bytes);
}

/*
 * Gives the device up after an error: every later call runs on the CPU, and
 * tensors prepared on the device before that are stale, their device memory
 * freed: after an error that is not sticky the device stays usable (by the
 * caller's framework too), and what we held would otherwise stay mapped.
 */
static void engine_lose_device(struct wd_engine *e, const char *during)
{
	if (!e->cuda)
		return;	/* given up already: said once */
	wd_log(WD_LOG_ERR, "engine: device error during %s; falling back to the cpu", during);
	engine_release_live(e);
	cuda_engine_close(&e->cuda);
	e->cuda = NULL;
	e->device_lost = 1;
	e->backend = WD_BACKEND_CPU;
	snprintf(e->desc, sizeof(e->desc), "cpu (exact, 1 thread; fell back after a cuda error)");
}

/* A prepared tensor of v with nothing in it yet, as cpu_prepare and cuda_prepare expect. */
static void prepared_init(struct wd_prepared *p, const struct wd_view *v)
{
	memset(p, 0, sizeof(*p));
	p->dtype = v->dtype;
	p->numel = v->numel;
	p->method = WD_METHOD_SORT;
}

int wd_prepare(struct wd_engine *e, const struct wd_view *v, unsigned flags,
	       struct wd_prepared **out)
{
	struct wd_prepared *p;
	int r;

	*out = NULL;
	if (!wd_dtype_size(v->dtype) || (!v->data && v->numel))
		return -EINVAL;
	p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	prepared_init(p, v);
	if (e->cuda) {
		p->engine = e;
		r = cuda_prepare(e->cuda, v, flags, p);
		if (r == 0) {
			live_add(e, p);
			*out = p;
			return 0;
		}
		/* Start again on the CPU from a clean slate. */
		int device_view = p->view_on_device;
		cuda_prepared_release(e->cuda, p);
		free(p->hist);
		free(p->values);
		prepared_init(p, v);
		if (r == -EIO)
			engine_lose_device(e, "prepare");
		if ((r != -EIO && r != -ENOMEM) || (device_view && r == -EIO)) {
			free(p);	/* a device view cannot be read once the device is gone */
			return r;
		}
		if (device_view) {	/* over the budget: the CPU works on a host copy */
			struct wd_view hv = *v;
			void *copy;
			/* of any device: cuda_copy_to_host reads it where it is */
			if ((r = cuda_copy_to_host(e->cuda, v->data, v->numel * wd_dtype_size(v->dtype),
						   &copy))) {
				free(p);
				if (r == -EIO)
					engine_lose_device(e, "a copy to the host");
				return r;
			}
			hv.data = copy;
			free(p);
			r = wd_prepare(e, &hv, flags & ~WD_PREP_KEEP_RAW, out);
			free(copy);
			return r;
		}
	}
	r = cpu_prepare(&e->cpu, v, flags, p);
	if (r < 0) {
		wd_prepared_free(&p);
		return r;
	}
	*out = p;
	return 0;
}

void wd_prepared_free(struct wd_prepared **p)
{
	if (!*p)
		return;
	/* a stale tensor has no device memory left and no engine */
	if ((*p)->engine && !(*p)->stale && (*p)->engine->cuda) {
		cuda_prepared_release((*p)->engine->cuda, *p);
		live_del((*p)->engine, *p);
	}
	free((*p)->values);
	free((*p)->hist);
	free(*p);
	*p = NULL;
}

enum wd_method wd_prepared_method(const struct wd_prepared *p) { return p->method; }
enum wd_dtype wd_prepared_dtype(const struct wd_prepared *p) { return p->dtype; }
uint64_t wd_prepared_numel(const struct wd_prepared *p) { return p->numel; }
/*
 * A device sort's counts reach the host after wd_prepare returns
 * (prepared.h): waits for them. After a device error the device is given
 * up and p is stale; its counts stay zero.
 */
static int prepared_settle(const struct wd_prepared *p)
{
	struct wd_engine *e = p->engine;

	if (!p->counts_pending)
		return 0;
	if (!e || !e->cuda || p->stale)
		return -EIO;
	int r = cuda_settle(e->cuda, (struct wd_prepared *)p);	/* fills in counts only */
	if (r == -EIO)
		engine_lose_device(e, "a sort");
	return r;
}

uint64_t wd_prepared_finite(const struct wd_prepared *p)
{
	prepared_settle(p);
	return p->n_finite;
}

void wd_prepared_nonfinite(const struct wd_prepared *p, struct wd_nonfinite *out)
{
	prepared_settle(p);
	*out = p->nonfinite;
}

/*
 * A device tensor whose device was given up cannot be used any more, nor
 * one of another engine's device.
 */
static int prepared_stale(const struct wd_engine *e, const struct wd_prepared *p)
{
	return p->stale || (prepared_on_device(p) && (!e->cuda || p->engine != e));
}

/* Usable on the host as it is: values or counts are in host memory. */
static int prepared_on_host(const struct wd_prepared *p)
{
	return p->method == WD_METHOD_HIST16 ? p->hist != NULL : !p->dev_keys;
}

static int pend_push(struct wd_engine *e, double *out, double value)
{
	struct pending *grown = wd_grow(e->pend, e->n_pend, &e->cap_pend, sizeof(*grown), 64);
	if (!grown)
		return -ENOMEM;
	e->pend = grown;
	e->pend[e->n_pend++] = (struct pending){ out, value };
	return 0;
}

static int engine_fetch_hist(struct wd_engine *e, struct wd_prepared *p);

/* W1 on the CPU, bringing a sorted device tensor's values over if needed. */
static int w1_on_host(struct wd_engine *e, const struct wd_prepared *a,
		      const struct wd_prepared *b, double *w1)
{
	struct wd_prepared ha, hb;
	void *va = NULL, *vb = NULL;
	int r = 0;

	/* a count's hist[] is kept once fetched; a sort's values are not */
	if (a->method == WD_METHOD_HIST16 && !a->hist)
		r = engine_fetch_hist(e, (struct wd_prepared *)a);
	if (!r && b->method == WD_METHOD_HIST16 && !b->hist)
		r = engine_fetch_hist(e, (struct wd_prepared *)b);
	ha = *a;
	hb = *b;
	if (!r && !prepared_on_host(a) && (r = cuda_to_host(e->cuda, a, &va)) == 0)
		ha.values = va;
	if (!r && !prepared_on_host(b) && (r = cuda_to_host(e->cuda, b, &vb)) == 0)
		hb.values = vb;
	if (!r)
		*w1 = (a->n_finite && b->n_finite) ? cpu_w1(&ha, &hb) : NAN;
	free(va);
	free(vb);
	return r;
}

int wd_w1_async(struct wd_engine *e, const struct wd_prepared *a,
		const struct wd_prepared *b, double *w1)
{
	double w;
	int r;

	if (!a || !b || !w1)
		return -EINVAL;
	if (prepared_stale(e, a) || prepared_stale(e, b))
		return -EIO;
	if ((r = prepared_settle(a)) || (r = prepared_settle(b)))
		return r;
	if (!a->n_finite || !b->n_finite)
		return pend_push(e, w1, NAN);
	if (e->cuda && prepared_on_device(a) && prepared_on_device(b)) {
		r = cuda_w1_async(e->cuda, a, b, w1);
		if (r == -EIO) {
			engine_lose_device(e, "w1");
			return -EIO;
		}
		if (r != -ENOMEM)
			return r;
		/* no room for the kernels' temporaries: do it on the host */
	}
	r = w1_on_host(e, a, b, &w);
	if (r == -EIO) {
		engine_lose_device(e, "a copy to the host");
		return -EIO;
	}
	return r ? r : pend_push(e, w1, w);
}

int wd_engine_sync(struct wd_engine *e)
{
	int r = 0;

	if (e->cuda && cuda_sync(e->cuda) == -EIO)
		engine_lose_device(e, "sync");
	for (size_t i = 0; i < e->n_pend; i++)
		*e->pend[i].out = e->pend[i].value;
	e->n_pend = 0;
	if (e->device_lost) {
		e->device_lost = 0;
		r = -EIO;
	}
	return r;
}

int wd_w1(struct wd_engine *e, const struct wd_prepared *a,
	  const struct wd_prepared *b, double *w1)
{
	int r = wd_w1_async(e, a, b, w1);
	int s = wd_engine_sync(e);
	return r ? r : s;
}

/*
 * Brings a device count's hist[] to the host, for W1 against a tensor on
 * the host and for summaries. Returns 0, or -EIO when the device is gone
 * (p is stale then).
 */
static int engine_fetch_hist(struct wd_engine *e, struct wd_prepared *p)
{
	void *h;

	if (p->hist)
		return 0;
	if (!e || prepared_stale(e, p) || !p->dev_hist)
		return -EIO;
	int r = cuda_to_host(e->cuda, p, &h);
	if (r == -EIO)
		engine_lose_device(e, "a copy to the host");
	if (r)
		return r;
	p->hist = h;
	return 0;
}

/*
 * Computes the summary of a sorted device tensor into p->summary; does
 * nothing when the device is gone.
 */
static void engine_summarize_device(struct wd_engine *e, struct wd_prepared *p)
{
	if (prepared_stale(e, p))
		return;
	if (cuda_summarize(e->cuda, p) == -EIO)
		engine_lose_device(e, "summary");
}

void wd_summarize(const struct wd_prepared *p, struct wd_summary *s)
{
	/* A sorted device tensor's summary is computed when first asked for. */
	if (!p->have_summary && p->dev_keys && p->engine)
		engine_summarize_device(p->engine, (struct wd_prepared *)p);
	/* a device count's counts come to the host when first needed */
	if (p->method == WD_METHOD_HIST16 && !p->hist && p->engine)
		engine_fetch_hist(p->engine, (struct wd_prepared *)p);
	if (p->have_summary)
		*s = p->summary;
	else
		cpu_summarize(p, s);
}

int wd_pair_stats(struct wd_engine *e, const struct wd_view *a,
		  const struct wd_view *b, struct wd_pair_stats *out)
{
	(void)e;	/* raw views are host memory: the CPU's */
	return cpu_pair_stats(a, b, out);
}

int wd_pair_stats_prepared(struct wd_engine *e, const struct wd_prepared *a,
			   const struct wd_prepared *b, struct wd_pair_stats *out)
{
	if (!a || !b || a->numel != b->numel)
		return -EINVAL;
	if (prepared_stale(e, a) || prepared_stale(e, b))
		return -EIO;
	if (a->dev_raw && b->dev_raw) {
		int r = cuda_pair_stats(e->cuda, a, b, out);
		if (r == -EIO)
			engine_lose_device(e, "pair stats");
		return r;
	}
	if ((!a->host_raw && !a->dev_raw && a->numel) || (!b->host_raw && !b->dev_raw && b->numel))
		return -EINVAL;	/* raw values not kept */
	/* One on each side (one went over the budget): bring the device one over. */
	void *ca = NULL, *cb = NULL;
	int r = 0;
	if (a->dev_raw)
		r = cuda_copy_to_host(e->cuda, a->dev_raw, a->numel * wd_dtype_size(a->dtype), &ca);
	if (!r && b->dev_raw)
		r = cuda_copy_to_host(e->cuda, b->dev_raw, b->numel * wd_dtype_size(b->dtype), &cb);
	if (!r) {
		struct wd_view va = { a->dtype, ca ? ca : a->host_raw, a->numel };
		struct wd_view vb = { b->dtype, cb ? cb : b->host_raw, b->numel };
		r = wd_pair_stats(e, &va, &vb, out);
	} else if (r == -EIO) {
		engine_lose_device(e, "a copy to the host");
	}
	free(ca);
	free(cb);
	return r;
}
