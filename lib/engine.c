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
#include <unistd.h>

#include "backend_cpu.h"
#include "grow.h"
#include "backend_cuda.h"
#include "dtype.h"
#include "sort_vq.h"
#include "log.h"
#include "pool.h"
#include "prepared.h"
#include "sort_vq.h"

/* A result queued by wd_w1_async() and computed on the CPU. */
struct pending {
	double *out;
	double value;
};

struct wd_engine {
	enum wd_backend backend;	/* in use: CPU after a fallback */
	char desc[200];
	struct cpu_engine cpu;	/* the radix sort's scratch, the threads */
	struct cuda_engine *cuda;	/* NULL on the CPU */
	struct wd_prepared *live;	/* tensors holding device memory */
	int device_lost;	/* sync owes the caller an -EIO */
	int fell_back;		/* the device was given up after an error */
	char why[100];		/* why not CUDA, when AUTO found none */
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

/*
 * Whether a GPU driver can be there at all: its device node. AUTO asks the
 * CUDA runtime only then, so that a machine without one (a laptop, a login
 * node) does not load libcuda or start the runtime for nothing. /dev/dxg
 * is WSL2's, through which CUDA runs there with no /dev/nvidia*.
 */
static int gpu_node_present(void)
{
	return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0 ||
	       access("/dev/dxg", F_OK) == 0;
}

/* "cpu (exact, N threads)" and why not CUDA, if it was asked of. */
static void describe_cpu(struct wd_engine *e)
{
	int n = cpu_engine_threads(&e->cpu);
	int vq = cpu_sort_vq(&e->cpu);
	snprintf(e->desc, sizeof(e->desc), "cpu (exact, %d thread%s, %s%s%s)%s%.99s", n,
		 n == 1 ? "" : "s", vq ? "vqsort " : "radix sort", vq ? vq_target_name() : "",
		 e->fell_back ? "; fell back after a cuda error" : "", e->why[0] ? "; no cuda: " : "",
		 e->why);
}

int wd_engine_open_device(enum wd_backend backend, int device, struct wd_engine **out)
{
	struct wd_engine *e;

	*out = NULL;
	if ((backend != WD_BACKEND_AUTO && backend != WD_BACKEND_CPU &&
	     backend != WD_BACKEND_CUDA) || device < 0)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->backend = WD_BACKEND_CPU;
	if (backend == WD_BACKEND_AUTO && wd_have_cuda() && !gpu_node_present()) {
		snprintf(e->why, sizeof(e->why), "no GPU device node (/dev/nvidiactl)");
	} else if (backend != WD_BACKEND_CPU) {
		int r = cuda_engine_open(&e->cuda, device, e->desc, sizeof(e->desc));
		if (r == 0) {
			e->backend = WD_BACKEND_CUDA;
			wd_log(WD_LOG_NOTICE, "engine: %s", e->desc);
			*out = e;
			return 0;
		}
		snprintf(e->why, sizeof(e->why), "%.99s", e->desc);
		if (backend == WD_BACKEND_CUDA) {
			wd_log(WD_LOG_ERR, "engine: cuda asked for, but %s", e->why);
			free(e);
			return -ENODEV;
		}
	}
	/*
	 * No line here: the caller sets its threads and sort next, which the
	 * description names (wd_engine_describe). A trial's daemon logged the
	 * auto line with the default thread count, not compute.threads, and
	 * 64 lines for its 64 workers' engines.
	 */
	describe_cpu(e);
	*out = e;
	return 0;
}

void wd_engine_set_threads(struct wd_engine *e, int threads)
{
	cpu_engine_set_threads(&e->cpu, threads);
	if (!e->cuda)
		describe_cpu(e);
}

int wd_engine_threads(const struct wd_engine *e)
{
	return cpu_engine_threads(&e->cpu);
}

void wd_engine_set_grain(struct wd_engine *e, uint64_t elements)
{
	e->cpu.grain = elements;
}

int wd_engine_set_sort(struct wd_engine *e, enum wd_sort sort)
{
	if (sort != WD_SORT_AUTO && sort != WD_SORT_RADIX && sort != WD_SORT_VQSORT)
		return -EINVAL;
	if (sort == WD_SORT_VQSORT && !vq_available())
		return -ENOTSUP;
	e->cpu.sort = sort;
	if (!e->cuda)
		describe_cpu(e);
	return 0;
}

enum wd_sort wd_engine_sort(const struct wd_engine *e)
{
	return cpu_sort_vq(&e->cpu) ? WD_SORT_VQSORT : WD_SORT_RADIX;
}

void wd_engine_release_scratch(struct wd_engine *e)
{
	cpu_release_scratch(&e->cpu);
	cpu_spares_trim();
}

uint64_t wd_engine_spare_bytes(void)
{
	return cpu_spares_kept();
}

uint64_t wd_prepare_bytes(const struct wd_engine *e, enum wd_dtype dtype, uint64_t numel,
			  unsigned flags)
{
	struct wd_view v = { dtype, NULL, numel };

	return wd_dtype_size(dtype) ? cpu_prepare_bytes(&e->cpu, &v, flags) : 0;
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
	e->fell_back = 1;
	e->why[0] = 0;
	describe_cpu(e);
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
	if (!wd_dtype_size(v->dtype) || (!v->data && v->numel) || (flags & ~WD_PREP_ALL))
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
		cpu_hist_put(p->hist);
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
	cpu_keys_put((*p)->values);
	cpu_hist_put((*p)->hist);
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
		*w1 = (a->n_finite && b->n_finite) ? cpu_w1(&e->cpu, &ha, &hb) : NAN;
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
	wd_engine_summarize(NULL, p, s);
}

void wd_engine_summarize(struct wd_engine *e, const struct wd_prepared *p, struct wd_summary *s)
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
		cpu_summarize(e ? &e->cpu : NULL, p, s);
}

int wd_pair_stats(struct wd_engine *e, const struct wd_view *a,
		  const struct wd_view *b, struct wd_pair_stats *out)
{
	/* raw views are host memory: the CPU's */
	return cpu_pair_stats(e ? &e->cpu : NULL, a, b, out);
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

/* --- Batches: many tensors at once (docs/engine.md, "Threads") --- */

/*
 * A tensor under WD_BATCH_SPLIT_MIN is "small" in a batch: it runs on one
 * thread beside others, as the daemon's compute workers run them. A split
 * of such a tensor costs more than it saves: on a Llama-shaped fp32
 * snapshot (make bench-snapshot) 2 threads went from 0.85x to 1.22x one
 * thread's tensors/s when the tensors under 2^20 that could be split
 * (threads x 65536 elements and more) were no longer. Capped, so that the
 * tensors in flight at once (each with its key and scratch buffers, on
 * every thread) stay small.
 */
static int many_small(const struct wd_engine *e, uint64_t numel)
{
	return cpu_engine_threads(&e->cpu) > 1 && numel < WD_BATCH_SPLIT_MIN;
}

/*
 * A large tensor of a batch is prepared whole on one thread too, beside
 * the others, when that needs no memory but its result (vqsort, 16-bit
 * counts: nothing is in flight that the batch would not hold anyway) and
 * it is at most a thread's share of the batch's work (cpu_prepare_cost:
 * a 16-bit count is cheap beside a sort), so that the threads finish
 * together. A split deals the keys into buckets before it
 * sorts (count, then deal: 20 ms of a 2^24 fp32 tensor's 70 on 2 threads,
 * c); one tensor per thread needs neither. So a pair of 2^24 tensors on 2
 * threads is two sorts side by side. A larger one, or one the radix sort
 * takes (a scratch buffer of its size per thread), is split as before.
 */
static int many_whole(const struct wd_engine *e, const struct wd_view *v, unsigned flags,
		      uint64_t share)
{
	return cpu_engine_threads(&e->cpu) > 1 && cpu_prepare_cost(v, flags) <= share &&
	       cpu_prepare_in_result(&e->cpu, v, flags);
}

/* wd_prepare on the CPU side c, for a batch's thread. */
static int prepare_on_cpu(struct cpu_engine *c, const struct wd_view *v, unsigned flags,
			  struct wd_prepared **out)
{
	struct wd_prepared *p;
	int r;

	*out = NULL;
	if (!wd_dtype_size(v->dtype) || (!v->data && v->numel))
		return -EINVAL;
	if (!(p = malloc(sizeof(*p))))
		return -ENOMEM;
	prepared_init(p, v);
	if ((r = cpu_prepare(c, v, flags, p)) < 0) {
		wd_prepared_free(&p);
		return r;
	}
	*out = p;
	return 0;
}

/* A batch's small items, taken one at a time by whichever thread is free. */
struct many_job {
	const size_t *items;
	size_t n_items;
	size_t next;		/* atomic: the next item to take */
	struct cpu_engine *sub;	/* per part: its own scratch, one thread */
	/* prepare */
	const struct wd_view *views;
	unsigned flags;
	struct wd_prepared **out;
	int *err;
	/* w1 */
	const struct wd_prepared *const *a, *const *b;
	double *w1;
};

static void many_prepare_part(void *ctx, int i, int parts)
{
	struct many_job *j = ctx;
	size_t k;

	(void)parts;
	while ((k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_items) {
		size_t x = j->items[k];
		j->err[x] = prepare_on_cpu(&j->sub[i], &j->views[x], j->flags, &j->out[x]);
	}
}

static void many_w1_part(void *ctx, int i, int parts)
{
	struct many_job *j = ctx;
	size_t k;

	(void)i;
	(void)parts;
	while ((k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_items) {
		size_t x = j->items[k];
		j->w1[x] = cpu_w1(NULL, j->a[x], j->b[x]);
	}
}

/* Runs the job's items over the engine's threads, each with a CPU side of its own. */
static int many_run(struct wd_engine *e, struct many_job *j, void (*fn)(void *, int, int))
{
	int parts = j->n_items < 2 ? 1 : cpu_parts(&e->cpu, UINT64_MAX);
	if ((size_t)parts > j->n_items)
		parts = (int)j->n_items;
	if (parts < 1)
		return 0;
	j->sub = calloc((size_t)parts, sizeof(*j->sub));
	if (!j->sub)
		return -ENOMEM;
	for (int i = 0; i < parts; i++) {
		j->sub[i].threads = 1;
		j->sub[i].sort = e->cpu.sort;
	}
	pool_run(parts > 1 ? e->cpu.pool : NULL, parts, fn, j);
	for (int i = 0; i < parts; i++)
		cpu_engine_close(&j->sub[i]);
	free(j->sub);
	j->sub = NULL;
	return 0;
}

/* qsort_r's order of batch items: the view with more elements first, then by index. */
static int larger_first(const void *x, const void *y, void *views)
{
	const struct wd_view *v = views;
	size_t i = *(const size_t *)x, k = *(const size_t *)y;

	if (v[i].numel != v[k].numel)
		return v[i].numel > v[k].numel ? -1 : 1;
	return i < k ? -1 : i > k;
}

int wd_prepare_many(struct wd_engine *e, const struct wd_view *views, size_t n, unsigned flags,
		    struct wd_prepared **out)
{
	struct many_job j = { 0 };
	int *err = calloc(n + 1, sizeof(*err));
	size_t *items = calloc(n + 1, sizeof(*items));
	unsigned char *whole = calloc(n + 1, 1);	/* whole[i]: on a thread of its own */
	int r = err && items && whole ? 0 : -ENOMEM;

	uint64_t total = 0, share, threads = (uint64_t)cpu_engine_threads(&e->cpu);
	size_t n_whole = 0, n_small = 0;

	for (size_t i = 0; i < n; i++) {
		out[i] = NULL;
		total += cpu_prepare_cost(&views[i], flags);
	}
	/* a bad view is the first error by index, whichever order the rest runs in */
	for (size_t i = 0; !r && i < n; i++)
		if (!wd_dtype_size(views[i].dtype) || (!views[i].data && views[i].numel) || (flags & ~WD_PREP_ALL))
			r = -EINVAL;
	share = (total + threads - 1) / threads;
	/* large ones whole on a thread first, the largest first, then the small ones */
	for (size_t i = 0; !r && !e->cuda && i < n; i++) {
		if (many_small(e, views[i].numel))
			n_small++;
		else if (many_whole(e, &views[i], flags, share))
			items[n_whole++] = i;
	}
	if (n_whole == 1 && !n_small)	/* nothing to run beside it: split it */
		n_whole = 0;
	for (size_t k = 0; k < n_whole; k++)
		whole[items[k]] = 1;
	if (n_whole > 1)
		qsort_r(items, n_whole, sizeof(*items), larger_first, (void *)views);
	j.n_items = n_whole;
	/* those too large (or all, on the device) in turn, each split over the threads */
	for (size_t i = 0; !r && i < n; i++) {
		if (!e->cuda && many_small(e, views[i].numel))
			items[j.n_items++] = i;
		else if (!whole[i])
			r = err[i] = wd_prepare(e, &views[i], flags, &out[i]);
	}
	if (!r) {
		j.items = items;
		j.views = views;
		j.flags = flags;
		j.out = out;
		j.err = err;
		r = many_run(e, &j, many_prepare_part);
	}
	for (size_t i = 0; !r && i < n; i++)
		r = err[i];
	if (r)
		for (size_t i = 0; i < n; i++)
			wd_prepared_free(&out[i]);
	free(err);
	free(items);
	free(whole);
	return r;
}

int wd_w1_many(struct wd_engine *e, const struct wd_prepared *const *a,
	       const struct wd_prepared *const *b, size_t n, double *w1)
{
	struct many_job j = { 0 };
	size_t *items = calloc(n + 1, sizeof(*items));
	int r = items ? 0 : -ENOMEM;

	for (size_t i = 0; i < n; i++)
		w1[i] = NAN;
	for (size_t i = 0; !r && i < n; i++) {
		if (!a[i] || !b[i]) {
			r = -EINVAL;
		} else if (!e->cuda && !a[i]->stale && !b[i]->stale && prepared_on_host(a[i]) &&
			   prepared_on_host(b[i]) && !prepared_on_device(a[i]) &&
			   !prepared_on_device(b[i]) &&
			   many_small(e, a[i]->n_finite > b[i]->n_finite ? a[i]->n_finite
									 : b[i]->n_finite)) {
			if (a[i]->n_finite && b[i]->n_finite)
				items[j.n_items++] = i;	/* else NaN, as wd_w1 */
		} else {
			r = wd_w1(e, a[i], b[i], &w1[i]);
		}
	}
	if (!r) {
		j.items = items;
		j.a = a;
		j.b = b;
		j.w1 = w1;
		r = many_run(e, &j, many_w1_part);
	}
	free(items);
	return r;
}
