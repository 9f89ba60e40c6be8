/*
 * compare.c: one study at one step, through the engine, into drift rows
 * (compare.h). Each baseline tensor is read and prepared once and used for
 * every run; the proxies come first, so that when the candidates' rows are
 * made every proxy's W1 for that tensor is known and gives their ratios.
 *
 * On the CPU the step's tensors are spread over compute.threads: workers,
 * each with an engine of one thread, take them one at a time, the large
 * ones first while the memory they hold fits memory.budget; a large one
 * that is too big for that, or more than a worker's share of the step,
 * takes every thread of the compute thread's engine (which splits its
 * sort) before the workers start (compare_all). Each tensor's rows land in
 * its own slots of the grid and the batch is built from the grid in
 * tensor order, so the rows, their order and their bits are those of one
 * thread (the engine's bits do not depend on its thread count:
 * docs/engine.md, "Threads").
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
#include "sanitizer.h"
#include "state.h"
#include "wdrift.h"

_Static_assert(CONFIG_MAX_PROXIES <= DRIFTLOG_MAX_PROXIES, "a drift row holds every proxy's ratio");

/*
 * A worker's read buffers, kept from one tensor to the next: [0] for the
 * baseline's tensor, [1] for a run's. A worker takes its tensors largest
 * first, so after the first one it reads into memory already faulted in:
 * fresh memory costs a page fault a page, and the workers' fresh reads
 * were what the daemon's step faulted most on two threads once ingest kept
 * its buffers (docs/performance.md). What a worker keeps stays held
 * within memory.budget between its tensors (worker()).
 */
struct reads {
	void *buf[2];
	size_t cap[2];
	size_t reused;	/* reads into a buffer kept from an earlier tensor */
};

/* The bytes rd keeps. */
static uint64_t reads_bytes(const struct reads *rd)
{
	return (uint64_t)rd->cap[0] + rd->cap[1];
}

static void reads_free(struct reads *rd)
{
	for (int k = 0; k < 2; k++) {
		free(rd->buf[k]);
		rd->buf[k] = NULL;
		rd->cap[k] = 0;
	}
}

/*
 * Done with data that read_tensor gave: freed when it was the caller's
 * own, else kept in rd and, under ASan, marked not to be read until the
 * next read_tensor hands it out again.
 */
static void reads_let_go(const struct reads *rd, const void *data)
{
	if (!rd) {
		free((void *)data);	/* wd_ckpt_read's own buffer, held as a view's const data */
		return;
	}
	for (int k = 0; data && k < 2; k++)
		if (rd->buf[k] == data)
			WD_POISON(rd->buf[k], rd->cap[k]);
}

/*
 * Reads tensor i of ck: into rd's buffer slot (wd_ckpt_read_reuse), or,
 * with rd NULL, a buffer of its own (wd_ckpt_read). *raw NULL on failure
 * when it was the read's own; 0, or -1 with err.
 */
static int read_tensor(struct wd_ckpt *ck, size_t i, struct reads *rd, int slot, void **raw,
		       char *err)
{
	if (!rd)
		return wd_ckpt_read(ck, i, raw, err);
	const struct wd_ckpt_entry *e = wd_ckpt_entry(ck, i);
	size_t bytes = e->numel * wd_dtype_size(e->dtype);
	int kept = rd->buf[slot] && rd->cap[slot] >= bytes;
	if (kept)
		WD_UNPOISON(rd->buf[slot], bytes);
	int r = wd_ckpt_read_reuse(ck, i, &rd->buf[slot], &rd->cap[slot], err);
	rd->reused += (size_t)(kept && r == 0);
	*raw = rd->buf[slot];
	return r;
}

/*
 * Reads and prepares one tensor: NULL when ck has no such tensor or it
 * cannot be read. The data stays in *view (KEEP_RAW): in rd's slot, or,
 * with rd NULL, in a buffer the caller frees (unload).
 */
static struct wd_prepared *load(struct wd_engine *engine, struct wd_ckpt *ck, const char *name,
				struct reads *rd, int slot, struct wd_view *view)
{
	char err[WD_CKPT_ERR_MAX];
	struct wd_prepared *p = NULL;
	long i = wd_ckpt_find(ck, name);
	void *raw = NULL;

	*view = (struct wd_view){ 0 };
	if (i < 0)
		return NULL;
	if (read_tensor(ck, (size_t)i, rd, slot, &raw, err) < 0) {
		log_err("compute: %s", err);
		reads_let_go(rd, raw);
		return NULL;
	}
	const struct wd_ckpt_entry *e = wd_ckpt_entry(ck, (size_t)i);
	struct wd_view v = { e->dtype, raw, e->numel };
	if (wd_prepare(engine, &v, WD_PREP_KEEP_RAW, &p) < 0) {
		reads_let_go(rd, raw);
		return NULL;
	}
	*view = v;
	return p;
}

/* Frees what load gave: the prepared tensor, then lets its data go (reads_let_go). */
static void unload(struct wd_prepared **p, struct wd_view *view, const struct reads *rd)
{
	wd_prepared_free(p);
	reads_let_go(rd, view->data);
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
	uint64_t budget;		/* memory.budget: what the workers may hold at once */
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
	w->budget = budget;
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
	/* the workers' list (compare_all), the next to take, and the workers' own engines */
	struct compare_workers *w;
	size_t *items, n_items;
	unsigned char *whole;	/* whole[t]: tensor t is large and one to a worker */
	atomic_size_t next;
	/* the bytes the workers hold (tensor_need, worker_bytes), within w->budget */
	pthread_mutex_t lock;
	pthread_cond_t freed;
	uint64_t held, held_max;
	size_t waits;		/* how often a worker waited for the others to free some */
	size_t n_waiting;	/* workers waiting now */
	size_t given_back;	/* times a worker gave its kept reads back before the step's end */
	size_t reused;		/* reads into a worker's kept buffer (struct reads) */
};

/* Tensor t against every run: its rows into grid's column t; reads into rd when given. */
static void compare_tensor(struct wd_engine *engine, const struct step *st, size_t t,
			   struct reads *rd)
{
	const struct cstudy *s = st->s;
	const struct compare_input *in = st->in;
	const char *name = wd_ckpt_entry(in->base, t)->name;
	struct wd_view bv;
	struct wd_prepared *bp = load(engine, in->base, name, rd, 0, &bv);
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
			struct wd_nonfinite over;
			wd_drift_rounded_w1(engine, bp, &bv, to, &row->w1, &over);
			row->posinf = over.posinf;	/* out of the format's range: compute.c says them */
			row->neginf = over.neginf;
			row->numel = bv.numel;
			pw1[s->n_proxies - 1] = row->w1;
			continue;
		}
		if (!in->ck[r] || !(xp = load(engine, in->ck[r], name, rd, 1, &xv)))
			continue;	/* that run has no such tensor: left NaN */
		/* a lost device: the engine goes on on the CPU; these values stay as measured */
		wd_drift_measure(engine, bp, &bv, xp, &xv, NULL, &d);
		row_set_drift(row, &d);
		/*
		 * The baseline's count, as compare's numel: the summaries weight
		 * each tensor by it, so that a run's and its proxies' weighted
		 * means share their weights (a trial: a tensor of unequal sizes
		 * was weighted by the candidate's count here, the baseline's in
		 * compare, and their summaries differed). A run's tensor with no
		 * element stays 0: absent (query.c).
		 */
		row->numel = d.numel ? bv.numel : 0;
		if (in->role[r] == ROLE_PROXY)
			for (size_t k = 0; k < st->n_trained; k++)
				if (!strcmp(s->pruns[k], in->runs[r]))
					pw1[k] = row->w1;
		unload(&xp, &xv, rd);
	}
	/* candidates' ratios, now that every proxy's W1 for this tensor is known */
	for (size_t r = st->first_cand; r < in->n_runs; r++) {
		struct drift_row *row = &st->grid[r * st->nt + t];
		wd_drift_ratios(row->w1, pw1, s->n_proxies, row->ratio);
	}
	unload(&bp, &bv, rd);
}

static int is_large(const struct step *st, size_t t)
{
	return wd_ckpt_entry(st->in->base, t)->numel >= WD_BATCH_SPLIT_MIN;
}

/*
 * The most compare_tensor holds at once for tensor t on a worker, by the
 * sizes in the listings (all): the baseline's data and the largest run's,
 * each raw and prepared (wd_prepare_bytes), or the synthetic proxy's
 * 16-bit codes with their counts, whichever is larger; and of that, the
 * raw data read (raw[0] the baseline's, raw[1] the largest run's), which
 * a worker's reads hold.
 */
struct need {
	uint64_t all, raw[2];
};

static uint64_t side_bytes(const struct step *st, const struct wd_ckpt_entry *e)
{
	return e->numel * wd_dtype_size(e->dtype) +
	       wd_prepare_bytes(st->w->small[0], e->dtype, e->numel, WD_PREP_KEEP_RAW);
}

static struct need tensor_need(const struct step *st, size_t t)
{
	const struct wd_ckpt_entry *e = wd_ckpt_entry(st->in->base, t);
	struct need n = { 0, { e->numel * wd_dtype_size(e->dtype), 0 } };
	uint64_t run = 0, synth = 0;

	for (size_t r = 0; r < st->in->n_runs; r++) {
		long i = st->in->ck[r] ? wd_ckpt_find(st->in->ck[r], e->name) : -1;
		const struct wd_ckpt_entry *x = i >= 0 ? wd_ckpt_entry(st->in->ck[r], (size_t)i) : NULL;
		uint64_t b = x ? side_bytes(st, x) : 0, raw = x ? x->numel * wd_dtype_size(x->dtype) : 0;
		run = b > run ? b : run;
		n.raw[1] = raw > n.raw[1] ? raw : n.raw[1];
	}
	if (st->s->synthetic != WD_SYNTHETIC_NONE)
		synth = 2 * e->numel + wd_prepare_bytes(st->w->small[0], WD_BF16, e->numel, 0);
	n.all = side_bytes(st, e) + (run > synth ? run : synth);
	return n;
}

/*
 * What a worker holds for a tensor that needs n with its reads rd: the
 * tensor's bytes, and what rd keeps beyond the tensor's raw data (a buffer
 * larger than needed is used as it is; one too small is freed before it
 * grows).
 */
static uint64_t worker_bytes(struct need n, const struct reads *rd)
{
	uint64_t all = n.all;

	for (int k = 0; k < 2; k++)
		all += rd->cap[k] > n.raw[k] ? rd->cap[k] - n.raw[k] : 0;
	return all;
}

/*
 * Takes a worker's hold of the workers' share of memory.budget from *mine
 * to want, waiting while the others hold too much. A worker that keeps
 * reads (*mine) gives them back first, and holds bare (the tensor's own
 * bytes) instead, when they would make it wait (two workers that each
 * kept some and waited for the other would wait for ever), when want
 * alone passes the budget (only a tensor larger than the budget runs
 * beyond it), and when another worker waits (its tensor, taken earlier,
 * is larger: it goes first).
 */
static void hold_to(struct step *st, uint64_t *mine, uint64_t want, uint64_t bare,
		    struct reads *rd)
{
	uint64_t budget = st->w->budget;
	pthread_mutex_lock(&st->lock);
	uint64_t others = st->held - *mine;
	if (*mine && (others + want > budget || st->n_waiting)) {
		st->given_back++;
		reads_free(rd);
		st->held = others;
		*mine = 0;
		want = bare;
		pthread_cond_broadcast(&st->freed);
	}
	if (others && others + want > budget) {
		st->waits++;
		st->n_waiting++;
		while ((others = st->held - *mine) && others + want > budget)
			pthread_cond_wait(&st->freed, &st->lock);
		st->n_waiting--;
	}
	st->held = others + want;
	*mine = want;
	if (st->held > st->held_max)
		st->held_max = st->held;
	pthread_mutex_unlock(&st->lock);
}

/*
 * Takes a worker's hold from *mine down to what its reads keep now, after
 * a tensor; with another worker waiting, the reads are given back (freed
 * before they are taken off the count, which so stays an upper bound).
 */
static void hold_down(struct step *st, uint64_t *mine, struct reads *rd)
{
	pthread_mutex_lock(&st->lock);
	int give_back = st->n_waiting > 0 && reads_bytes(rd);
	pthread_mutex_unlock(&st->lock);
	if (give_back)
		reads_free(rd);
	pthread_mutex_lock(&st->lock);
	st->given_back += (size_t)give_back;
	uint64_t keep = reads_bytes(rd);
	st->held -= *mine - keep;
	*mine = keep;
	pthread_cond_broadcast(&st->freed);
	pthread_mutex_unlock(&st->lock);
}

/* A worker: the next tensor of the list, until none is left. */
struct worker_arg {
	struct step *st;
	struct wd_engine *engine;
};

static void *worker(void *arg)
{
	struct worker_arg *a = arg;
	struct step *st = a->st;
	struct reads rd = { { NULL, NULL }, { 0, 0 }, 0 };
	uint64_t mine = 0;	/* held: the tensor's bytes while it works, rd's between */
	size_t k;

	while ((k = atomic_fetch_add(&st->next, 1)) < st->n_items) {
		size_t t = st->items[k];
		struct need n = tensor_need(st, t);
		hold_to(st, &mine, worker_bytes(n, &rd), n.all, &rd);
		compare_tensor(a->engine, st, t, &rd);
		if (st->whole[t] || n.all > COMPARE_WORKER_BYTES)	/* the radix sort's scratch: not held now */
			wd_engine_release_scratch(a->engine);
		hold_down(st, &mine, &rd);
	}
	reads_free(&rd);
	hold_down(st, &mine, &rd);
	pthread_mutex_lock(&st->lock);
	st->reused += rd.reused;
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* qsort_r's order of the workers' list: more elements first, then by tensor index. */
static int larger_first(const void *x, const void *y, void *arg)
{
	const struct step *st = arg;
	size_t i = *(const size_t *)x, k = *(const size_t *)y;
	uint64_t a = wd_ckpt_entry(st->in->base, i)->numel, b = wd_ckpt_entry(st->in->base, k)->numel;

	if (a != b)
		return a > b ? -1 : 1;
	return i < k ? -1 : i > k;
}

/* The workers' list, on min(workers, items) threads; this one is worker 0. */
static void run_workers(struct step *st)
{
	struct compare_workers *w = st->w;
	size_t k = w->n < st->n_items ? w->n : st->n_items;
	pthread_t tid[k];
	struct worker_arg arg[k];
	int started[k];

	atomic_init(&st->next, 0);
	for (size_t i = 0; i < k; i++) {
		arg[i] = (struct worker_arg){ st, w->small[i] };
		/* a thread that cannot start leaves its share to the others */
		started[i] = i > 0 && pthread_create(&tid[i], NULL, worker, &arg[i]) == 0;
	}
	worker(&arg[0]);
	for (size_t i = 1; i < k; i++)
		if (started[i])
			pthread_join(tid[i], NULL);
	/* the engine's spare buffers beyond their 32 MiB: the next step's peak starts again */
	if (k)
		wd_engine_release_scratch(w->small[0]);
}

/*
 * Every tensor of the step. The workers take a list: the large tensors
 * that go whole to one of them, largest first, then the small ones, each
 * holding its tensor_need of memory.budget while it works (and a
 * worker's kept reads beside: worker_bytes). A large tensor
 * goes whole when at least two such fit the budget, it is at most a
 * worker's share of the step's elements, so that the workers end
 * together, and something runs beside it. Two sorts side by side need no
 * split's count and deal (docs/engine.md, "Batches"), and their reads
 * and statistics run side by side too. The other large ones go first, in
 * turn, with every thread of the compute thread's engine.
 */
static void compare_all(struct step *st)
{
	struct compare_workers *w = st->w;
	size_t n_small = 0, n_whole = 0, n_split = 0;
	uint64_t total = 0;

	if (!w->n) {
		for (size_t t = 0; t < st->nt; t++) {
			compare_tensor(w->engine, st, t, NULL);
			if (is_large(st, t))	/* its keys and scratch: not held past it */
				wd_engine_release_scratch(w->engine);
			n_split += is_large(st, t);
		}
		/* the spares beyond their 32 MiB: the next step's peak starts again */
		wd_engine_release_scratch(w->engine);
		log_debug("compute: study '%s' step %lld: %zu tensors, one at a time (no workers: one thread, the GPU, or "
			  "memory.budget under 128M): %zu large ones over %d thread%s, %zu small ones",
			  st->s->name, (long long)st->in->step, st->nt, n_split, wd_engine_threads(w->engine),
			  wd_engine_threads(w->engine) == 1 ? "" : "s", st->nt - n_split);
		return;
	}
	for (size_t t = 0; t < st->nt; t++)
		total += wd_ckpt_entry(st->in->base, t)->numel;
	uint64_t share = total / w->n + 1;
	for (size_t t = 0; t < st->nt; t++) {
		if (!is_large(st, t))
			n_small++;
		else if (tensor_need(st, t).all <= w->budget / 2 &&
			 wd_ckpt_entry(st->in->base, t)->numel <= share)
			st->items[n_whole++] = t;
	}
	if (n_whole == 1 && !n_small)	/* nothing to run beside it: split it */
		n_whole = 0;
	for (size_t k = 0; k < n_whole; k++)
		st->whole[st->items[k]] = 1;
	qsort_r(st->items, n_whole, sizeof(*st->items), larger_first, st);
	st->n_items = n_whole;
	for (size_t t = 0; t < st->nt; t++) {
		if (!is_large(st, t))
			st->items[st->n_items++] = t;
		else if (!st->whole[t]) {
			compare_tensor(w->engine, st, t, NULL);
			wd_engine_release_scratch(w->engine);	/* its keys and scratch: not held past it */
			n_split++;
		}
	}
	if (st->n_items)
		run_workers(st);
	else	/* the spares beyond their 32 MiB: the next step's peak starts again */
		wd_engine_release_scratch(w->engine);
	log_debug("compute: study '%s' step %lld: %zu tensors: %zu large ones one to a worker, "
		  "%zu split over %d threads, %zu small ones; %zu waits for memory.budget, held at most "
		  "%llu of its %llu bytes; %zu reads into a worker's kept buffer, kept buffers given "
		  "back %zu times",
		  st->s->name, (long long)st->in->step, st->nt, n_whole, n_split,
		  wd_engine_threads(w->engine), n_small, st->waits, (unsigned long long)st->held_max,
		  (unsigned long long)w->budget, st->reused, st->given_back);
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
	size_t *items = calloc(nt + 1, sizeof(*items));
	unsigned char *whole = calloc(nt + 1, 1);
	int ok = b && grid && items && whole && (b->rows = calloc(cap, sizeof(*b->rows))) &&
		 (b->study = strdup(s->name)) && (b->baseline = strdup(s->baseline));
	for (size_t k = 0; ok && k < s->n_proxies; k++)
		ok = (b->proxies[b->n_proxies++] = strdup(s->labels[k])) != NULL;
	if (!ok) {
		log_err("compute: study '%s' step %lld: out of memory for %zu tensors of %zu runs; "
			"not compared", s->name, (long long)step, nt, n_runs + 1);
		result_batch_free(&b);
		free(grid);
		free(items);
		free(whole);
		return NULL;
	}
	b->step = step;
	size_t n_row_runs = n_runs + (s->synthetic != WD_SYNTHETIC_NONE);
	struct step st = { .s = s, .in = in, .grid = grid, .nt = nt, .n_row_runs = n_row_runs,
			   .n_trained = n_trained, .first_cand = first_cand, .w = w,
			   .items = items, .whole = whole, .wall = now_wall() };
	pthread_mutex_init(&st.lock, NULL);
	pthread_cond_init(&st.freed, NULL);
	compare_all(&st);
	pthread_cond_destroy(&st.freed);
	pthread_mutex_destroy(&st.lock);
	free(items);
	free(whole);
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
