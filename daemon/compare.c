/*
 * compare.c: one study at one step, through the engine, into drift rows
 * (compare.h). Each baseline tensor is read and prepared once and used for
 * every run; the proxies come first, so that when the candidates' rows are
 * made every proxy's W1 for that tensor is known and gives their ratios.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "compare.h"
#include "compute.h"
#include "drift.h"
#include "logging.h"
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

/* Recomputes study s at step: every run present there against the baseline. */
struct result_batch *compare_step(struct wd_engine *engine, const struct cstudy *s,
				  const struct compare_input *in)
{
	struct wd_ckpt *base = in->base, *const *ck = in->ck;
	const char *const *runs = in->runs;
	const int *role = in->role;
	size_t n_runs = in->n_runs, n_trained = s->n_proxies - (s->synthetic != WD_SYNTHETIC_NONE);
	int64_t step = in->step;
	struct timespec now;

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
	clock_gettime(CLOCK_REALTIME, &now);
	double wall = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
	/* rows grouped by run: row index = run * nt + tensor */
	size_t stride = nt, n_row_runs = n_runs + (s->synthetic != WD_SYNTHETIC_NONE);
	for (size_t t = 0; t < nt; t++) {
		const char *name = wd_ckpt_entry(base, t)->name;
		struct wd_view bv;
		struct wd_prepared *bp = load(engine, base, name, &bv);
		double pw1[DRIFTLOG_MAX_PROXIES];
		for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
			pw1[k] = NAN;
		if (!bp)
			continue;
		for (size_t r = 0; r < n_row_runs; r++) {
			struct drift_row *row = &grid[r * stride + t];
			int synth = r == n_runs;
			struct wd_view xv;
			struct wd_prepared *xp;
			struct wd_drift_tensor d;
			row->step = step;
			row->kind = ROW_TENSOR;
			row->role = synth ? ROLE_PROXY : role[r];
			row->tensor = strdup(name);
			row->run = strdup(synth ? s->labels[s->n_proxies - 1] : runs[r]);
			row->w1 = row->max_abs_diff = row->rel_l2 = NAN;
			row->wall = wall;
			for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
				row->ratio[k] = NAN;
			if (synth) {	/* the baseline rounded: its own W1 */
				enum wd_dtype to = s->synthetic == WD_SYNTHETIC_BF16 ? WD_BF16 : WD_F16;
				wd_drift_rounded_w1(engine, bp, &bv, to, &row->w1);
				row->numel = bv.numel;
				pw1[s->n_proxies - 1] = row->w1;
				continue;
			}
			if (!ck[r] || !(xp = load(engine, ck[r], name, &xv)))
				continue;	/* that run has no such tensor: left NaN */
			/* a lost device: the engine goes on on the CPU; these values stay as measured */
			wd_drift_measure(engine, bp, &bv, xp, &xv, NULL, &d);
			row_set_drift(row, &d);
			if (role[r] == ROLE_PROXY)
				for (size_t k = 0; k < n_trained; k++)
					if (!strcmp(s->pruns[k], runs[r]))
						pw1[k] = row->w1;
			unload(&xp, &xv);
		}
		/* candidates' ratios, now that every proxy's W1 for this tensor is known */
		for (size_t r = first_cand; r < n_runs; r++) {
			struct drift_row *row = &grid[r * stride + t];
			wd_drift_ratios(row->w1, pw1, s->n_proxies, row->ratio);
		}
		unload(&bp, &bv);
	}
	/* compact (tensors the baseline could not read have no row), then aggregates */
	size_t out = 0;
	for (size_t r = 0; r < n_row_runs; r++) {
		size_t first = out;
		for (size_t t = 0; t < nt; t++) {
			struct drift_row *row = &grid[r * stride + t];
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

