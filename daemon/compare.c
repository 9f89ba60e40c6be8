/*
 * compare.c: one study at one step, through the engine, into drift rows
 * (compare.h). Each baseline tensor is read and prepared once and used for
 * every run; the proxies come first, so that when the candidates' rows are
 * made every proxy's W1 for that tensor is known and gives their ratios.
 *
 * On the CPU the step's tensors are spread over compute.threads: a large
 * tensor takes every thread (the engine splits its sort), the small ones
 * go one to a worker, many at once. Each tensor's rows land in its own
 * slots of the grid and the batch is built from the grid in tensor order,
 * so the rows, their order and their bits are those of one thread (the
 * engine's bits do not depend on its thread count: docs/engine.md,
 * "Threads").
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "compare.h"
#include "compute.h"
#include "drift.h"
#include "logging.h"
#include "state.h"
#include "wdrift.h"

_Static_assert(CONFIG_MAX_PROXIES <= DRIFTLOG_MAX_PROXIES, "a drift row holds every proxy's ratio");

/*
 * Reads and prepares one tensor: NULL when ck has no such tensor or it
 * cannot be read. The data stays in *view (KEEP_RAW), for the caller to free.
 */
static struct wd_prepared *load(struct wd_engine *engine, struct wd_ckpt *ck, const char *name,
				struct wd_view *view)
{
	char err[WD_CKPT_ERR_MAX];
	struct wd_prepared *p = NULL;
	long i = wd_ckpt_find(ck, name);
	void *raw = NULL;

	*view = (struct wd_view){ 0 };
	if (i < 0)
		return NULL;
	if (wd_ckpt_read(ck, (size_t)i, &raw, err) < 0) {
		log_err("compute: %s", err);
		return NULL;
	}
	const struct wd_ckpt_entry *e = wd_ckpt_entry(ck, (size_t)i);
	struct wd_view v = { e->dtype, raw, e->numel };
	if (wd_prepare(engine, &v, WD_PREP_KEEP_RAW, &p) < 0) {
		free(raw);
		return NULL;
	}
	*view = v;
	return p;
}

/* Frees what load gave: the prepared tensor, then the data it kept. */
static void unload(struct wd_prepared **p, struct wd_view *view)
{
	wd_prepared_free(p);
	free((void *)view->data);	/* load's own buffer, held as the view's const data */
	view->data = NULL;
}

/* A tensor row's values from the run's drift (lib/drift.h). */
static void row_set_drift(struct drift_row *row, const struct wd_drift_tensor *d)
{
	row->numel = d->numel;
	row->w1 = d->w1;
	row->max_abs_diff = d->pair.max_abs_diff;
	row->rel_l2 = d->pair.rel_l2;
	row->nan = d->nonfinite.nan;
	row->posinf = d->nonfinite.posinf;
	row->neginf = d->nonfinite.neginf;
}

/* The summary rows (lib/drift.h) of the tensor rows of one run. */
static size_t aggregate(struct drift_row *rows, size_t first, size_t n, size_t n_proxies,
			struct drift_row *out)
{
	double *vals = calloc(n + 1, sizeof(double));
	uint64_t *numel = calloc(n + 1, sizeof(uint64_t));
	struct wd_drift_summary d[DRIFTLOG_MAX_PROXIES + 1];	/* [n_proxies]: w1 itself */
	int ok = vals && numel && n;

	for (size_t i = 0; ok && i < n; i++)
		numel[i] = rows[first + i].numel;
	for (size_t m = 0; ok && m <= n_proxies; m++) {
		for (size_t i = 0; i < n; i++)
			vals[i] = m < n_proxies ? rows[first + i].ratio[m] : rows[first + i].w1;
		ok = wd_drift_summarize(vals, numel, n, &d[m]) == 0;
	}
	free(vals);
	free(numel);
	if (!ok)
		return 0;
	for (int kind = ROW_MEAN; kind <= ROW_MAX; kind++) {
		struct drift_row *a = &out[kind - ROW_MEAN];
		*a = rows[first];
		a->kind = kind;
		a->tensor = NULL;
		a->max_abs_diff = a->rel_l2 = NAN;
		a->nan = a->posinf = a->neginf = 0;
		a->numel = 0;
		for (size_t i = first; i < first + n; i++) {
			a->nan += rows[i].nan;
			a->posinf += rows[i].posinf;
			a->neginf += rows[i].neginf;
			a->numel += rows[i].numel;
		}
		for (size_t m = 0; m <= n_proxies; m++) {
			double v = kind == ROW_MEAN ? d[m].weighted : kind == ROW_MAX ? d[m].max : d[m].median;
			if (m < n_proxies)
				a->ratio[m] = v;
			else
				a->w1 = v;
		}
	}
	return 3;
}

/* --- the workers --- */

/*
 * What one worker may hold at once: a small tensor of each side, raw and
 * prepared (fp64: 4 x 8 MiB), with room to spare. memory.budget / this
 * bounds the workers.
 */
#define COMPARE_WORKER_BYTES ((uint64_t)64 << 20)

struct compare_workers {
	struct wd_engine *engine;	/* the compute thread's: large tensors; all on a GPU */
	size_t n;			/* 0: every tensor on engine, in turn */
	struct wd_engine *small[];	/* n CPU engines of one thread each */
};

int compare_workers_open(struct wd_engine *engine, uint64_t budget, struct compare_workers **out)
{
	int threads = wd_engine_threads(engine);
	size_t n = wd_engine_backend(engine) == WD_BACKEND_CPU && threads > 1 ? (size_t)threads : 0;
	struct compare_workers *w;

	if (n > budget / COMPARE_WORKER_BYTES)
		n = budget / COMPARE_WORKER_BYTES > 1 ? budget / COMPARE_WORKER_BYTES : 0;
	*out = NULL;
	if (!(w = calloc(1, sizeof(*w) + (n + 1) * sizeof(w->small[0]))))
		return -ENOMEM;
	w->engine = engine;
	for (; w->n < n; w->n++) {
		if (wd_engine_open(WD_BACKEND_CPU, &w->small[w->n]) < 0)
			break;
		wd_engine_set_threads(w->small[w->n], 1);
	}
	if (w->n < n)
		log_warning("compute: %zu of %zu workers for small tensors could be had (out of "
			    "memory): they are compared %zu at a time", w->n, n, w->n ? w->n : 1);
	if (w->n == 1) {	/* one worker is the compute thread alone: as on one thread */
		wd_engine_close(&w->small[0]);
		w->n = 0;
	}
	*out = w;
	return 0;
}

void compare_workers_close(struct compare_workers **pw)
{
	struct compare_workers *w = *pw;
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++)
		wd_engine_close(&w->small[i]);
	free(w);
	*pw = NULL;
}

size_t compare_workers_count(const struct compare_workers *w)
{
	return w->n ? w->n : 1;
}

/* --- one step --- */

/* A step being compared: what every tensor's rows need. Read-only but for grid's slots. */
struct step {
	const struct cstudy *s;
	const struct compare_input *in;
	struct drift_row *grid;		/* grid[run * nt + tensor] */
	size_t nt, n_row_runs, n_trained, first_cand;
	double wall;
	/* the small tensors: the next to take, and the workers' own */
	struct compare_workers *w;
	atomic_size_t next;
};

/* Tensor t against every run: its rows into grid's column t. */
static void compare_tensor(struct wd_engine *engine, const struct step *st, size_t t)
{
	const struct cstudy *s = st->s;
	const struct compare_input *in = st->in;
	const char *name = wd_ckpt_entry(in->base, t)->name;
	struct wd_view bv;
	struct wd_prepared *bp = load(engine, in->base, name, &bv);
	double pw1[DRIFTLOG_MAX_PROXIES];

	for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
		pw1[k] = NAN;
	if (!bp)
		return;
	for (size_t r = 0; r < st->n_row_runs; r++) {
		struct drift_row *row = &st->grid[r * st->nt + t];
		int synth = r == in->n_runs;
		struct wd_view xv;
		struct wd_prepared *xp;
		struct wd_drift_tensor d;
		row->step = in->step;
		row->kind = ROW_TENSOR;
		row->role = synth ? ROLE_PROXY : in->role[r];
		row->tensor = strdup(name);
		row->run = strdup(synth ? s->labels[s->n_proxies - 1] : in->runs[r]);
		row->w1 = row->max_abs_diff = row->rel_l2 = NAN;
		row->wall = st->wall;
		for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
			row->ratio[k] = NAN;
		if (synth) {	/* the baseline rounded: its own W1 */
			enum wd_dtype to = s->synthetic == WD_SYNTHETIC_BF16 ? WD_BF16 : WD_F16;
			wd_drift_rounded_w1(engine, bp, &bv, to, &row->w1);
			row->numel = bv.numel;
			pw1[s->n_proxies - 1] = row->w1;
			continue;
		}
		if (!in->ck[r] || !(xp = load(engine, in->ck[r], name, &xv)))
			continue;	/* that run has no such tensor: left NaN */
		/* a lost device: the engine goes on on the CPU; these values stay as measured */
		wd_drift_measure(engine, bp, &bv, xp, &xv, NULL, &d);
		row_set_drift(row, &d);
		if (in->role[r] == ROLE_PROXY)
			for (size_t k = 0; k < st->n_trained; k++)
				if (!strcmp(s->pruns[k], in->runs[r]))
					pw1[k] = row->w1;
		unload(&xp, &xv);
	}
	/* candidates' ratios, now that every proxy's W1 for this tensor is known */
	for (size_t r = st->first_cand; r < in->n_runs; r++) {
		struct drift_row *row = &st->grid[r * st->nt + t];
		wd_drift_ratios(row->w1, pw1, s->n_proxies, row->ratio);
	}
	unload(&bp, &bv);
}

static int is_large(const struct step *st, size_t t)
{
	/* compared one at a time with all the engine's threads; smaller ones one to a worker */
	return wd_ckpt_entry(st->in->base, t)->numel >= WD_BATCH_SPLIT_MIN;
}

/* A worker: small tensors, whichever is next, until none is left. */
struct worker_arg {
	struct step *st;
	struct wd_engine *engine;
};

static void *small_worker(void *arg)
{
	struct worker_arg *a = arg;
	size_t t;

	while ((t = atomic_fetch_add(&a->st->next, 1)) < a->st->nt)
		if (!is_large(a->st, t))
			compare_tensor(a->engine, a->st, t);
	return NULL;
}

/* Every tensor of the step: large ones with all threads, then the small ones many at once. */
static void compare_all(struct step *st)
{
	struct compare_workers *w = st->w;
	size_t n_small = 0;

	for (size_t t = 0; t < st->nt; t++)
		if (!w->n || is_large(st, t))
			compare_tensor(w->engine, st, t);
		else
			n_small++;
	if (!n_small)
		return;
	size_t k = w->n < n_small ? w->n : n_small;
	pthread_t tid[k];
	struct worker_arg arg[k];
	int started[k];
	atomic_init(&st->next, 0);
	for (size_t i = 0; i < k; i++) {
		arg[i] = (struct worker_arg){ st, w->small[i] };
		/* worker 0 is this thread; a thread that cannot start leaves its share to the others */
		started[i] = i > 0 && pthread_create(&tid[i], NULL, small_worker, &arg[i]) == 0;
	}
	small_worker(&arg[0]);
	for (size_t i = 1; i < k; i++)
		if (started[i])
			pthread_join(tid[i], NULL);
}

/* Recomputes study s at step: every run present there against the baseline. */
struct result_batch *compare_step(struct compare_workers *w, const struct cstudy *s,
				  const struct compare_input *in)
{
	struct wd_ckpt *base = in->base;
	const int *role = in->role;
	size_t n_runs = in->n_runs, n_trained = s->n_proxies - (s->synthetic != WD_SYNTHETIC_NONE);
	int64_t step = in->step;

	size_t first_cand = 0;
	while (first_cand < n_runs && role[first_cand] == ROLE_PROXY)
		first_cand++;
	struct result_batch *b = calloc(1, sizeof(*b));
	size_t nt = wd_ckpt_count(base), cap = (nt + 3) * (n_runs + 1) + 1;
	/* grid[run * nt + tensor]; compacted into b->rows at the end */
	struct drift_row *grid = calloc((nt + 1) * (n_runs + 1), sizeof(*grid));
	int ok = b && grid && (b->rows = calloc(cap, sizeof(*b->rows))) &&
		 (b->study = strdup(s->name)) && (b->baseline = strdup(s->baseline));
	for (size_t k = 0; ok && k < s->n_proxies; k++)
		ok = (b->proxies[b->n_proxies++] = strdup(s->labels[k])) != NULL;
	if (!ok) {
		log_err("compute: study '%s' step %lld: out of memory for %zu tensors of %zu runs; "
			"not compared", s->name, (long long)step, nt, n_runs + 1);
		result_batch_free(&b);
		free(grid);
		return NULL;
	}
	b->step = step;
	size_t n_row_runs = n_runs + (s->synthetic != WD_SYNTHETIC_NONE);
	struct step st = { .s = s, .in = in, .grid = grid, .nt = nt, .n_row_runs = n_row_runs,
			   .n_trained = n_trained, .first_cand = first_cand, .w = w,
			   .wall = now_wall() };
	compare_all(&st);
	/* compact (tensors the baseline could not read have no row), then aggregates */
	size_t out = 0;
	for (size_t r = 0; r < n_row_runs; r++) {
		size_t first = out;
		for (size_t t = 0; t < nt; t++) {
			struct drift_row *row = &grid[r * nt + t];
			if (!row->run)
				continue;
			b->rows[out++] = *row;
		}
		struct drift_row agg[3];
		size_t na = aggregate(b->rows, first, out - first, s->n_proxies, agg);
		for (size_t k = 0; k < na; k++) {
			agg[k].run = strdup(agg[k].run);
			b->rows[out++] = agg[k];
		}
	}
	b->n_rows = out;
	free(grid);
	return b;
}
