/* result_batch.c: one study's results at one step, in memory (see result_batch.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "result_batch.h"

void result_batch_free(struct result_batch **pb)
{
	struct result_batch *b = *pb;
	if (!b)
		return;
	*pb = NULL;
	/* acq_rel: the other holder's reads of b happen before the free */
	if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) > 0)
		return;
	for (size_t i = 0; i < b->n_rows; i++) {
		free((char *)b->rows[i].tensor);
		free((char *)b->rows[i].run);
	}
	for (size_t k = 0; k < b->n_proxies; k++)
		free(b->proxies[k]);
	for (size_t k = 0; k < b->n_notes; k++) {
		free(b->notes[k].run);
		free(b->notes[k].text);
	}
	free(b->notes);
	free(b->rows);
	free(b->index);
	free(b->study);
	free(b->baseline);
	free(b);
}

int result_batch_note(struct result_batch *b, const char *run, const char *text)
{
	struct result_note *v = realloc(b->notes, (b->n_notes + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	b->notes = v;
	v[b->n_notes] = (struct result_note){ strdup(run), strdup(text) };
	if (!v[b->n_notes].run || !v[b->n_notes].text) {
		free(v[b->n_notes].run);
		free(v[b->n_notes].text);
		return -ENOMEM;
	}
	b->n_notes++;
	return 0;
}

const char *result_batch_note_of(const struct result_batch *b, const char *run)
{
	for (size_t k = 0; k < b->n_notes; k++)
		if (!strcmp(b->notes[k].run, run))
			return b->notes[k].text;
	return NULL;
}

struct result_batch *result_batch_ref(struct result_batch *b)
{
	atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
	return b;
}

int result_batch_shared(const struct result_batch *b)
{
	return atomic_load_explicit(&b->refs, memory_order_acquire) > 0;
}

struct result_batch *result_batch_dup(const struct result_batch *b)
{
	struct result_batch *d = calloc(1, sizeof(*d));
	int ok = d && (d->rows = calloc(b->n_rows + 1, sizeof(*d->rows))) &&
		 (d->study = strdup(b->study)) && (d->baseline = strdup(b->baseline));

	for (size_t k = 0; ok && k < b->n_proxies; k++)
		ok = (d->proxies[d->n_proxies++] = strdup(b->proxies[k])) != NULL;
	for (size_t i = 0; ok && i < b->n_rows; i++) {
		struct drift_row *r = &d->rows[i];
		*r = b->rows[i];
		r->tensor = r->run = NULL;
		d->n_rows++;
		ok = (!b->rows[i].tensor || (r->tensor = strdup(b->rows[i].tensor))) &&
		     (r->run = strdup(b->rows[i].run));
	}
	for (size_t k = 0; ok && k < b->n_notes; k++)
		ok = result_batch_note(d, b->notes[k].run, b->notes[k].text) == 0;
	if (d)
		d->step = b->step;
	if (!ok) {
		result_batch_free(&d);
		return NULL;
	}
	if (b->index)
		result_batch_index(d);
	return d;
}

/* FNV-1a over run, a NUL, then tensor: the index's key. */
static uint64_t row_hash(const char *run, const char *tensor)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)run; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	h *= 0x100000001b3ull;
	for (const unsigned char *p = (const unsigned char *)tensor; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

static int row_is(const struct drift_row *r, const char *run, const char *tensor)
{
	return r->kind == ROW_TENSOR && r->tensor && !strcmp(r->tensor, tensor) && !strcmp(r->run, run);
}

void result_batch_index(struct result_batch *b)
{
	size_t size = 16;

	free(b->index);
	b->index = NULL;
	b->index_size = 0;
	while (size < 2 * b->n_rows)	/* at most half full: short probes */
		size *= 2;
	if (b->n_rows >= UINT32_MAX || !(b->index = calloc(size, sizeof(*b->index))))
		return;
	b->index_size = size;
	for (size_t i = 0; i < b->n_rows; i++) {
		const struct drift_row *r = &b->rows[i];
		if (r->kind != ROW_TENSOR || !r->tensor)
			continue;
		size_t h = (size_t)row_hash(r->run, r->tensor) & (size - 1);
		/* the first row of a (run, tensor) wins, as a scan would find it */
		while (b->index[h] && !row_is(&b->rows[b->index[h] - 1], r->run, r->tensor))
			h = (h + 1) & (size - 1);
		if (!b->index[h])
			b->index[h] = (uint32_t)(i + 1);
	}
}

const struct drift_row *result_batch_find(const struct result_batch *b, const char *run,
					  const char *tensor)
{
	if (!b->index_size) {
		for (size_t i = 0; i < b->n_rows; i++)
			if (row_is(&b->rows[i], run, tensor))
				return &b->rows[i];
		return NULL;
	}
	size_t mask = b->index_size - 1, h = (size_t)row_hash(run, tensor) & mask;
	for (; b->index[h]; h = (h + 1) & mask)
		if (row_is(&b->rows[b->index[h] - 1], run, tensor))
			return &b->rows[b->index[h] - 1];
	return NULL;
}

int result_batch_forget(struct result_batch *b, const char *run)
{
	if (!strcmp(b->baseline, run))
		return 1;
	/*
	 * Nothing of run's in it: untouched, index and all. A batch a query
	 * reads (shared) is copied first only when it has run's rows or
	 * note (control_forget), so one without them may be read right now: a
	 * new index would free the one the query thread looks rows up in
	 * (a review's).
	 */
	if (!result_batch_has_run(b, run) && !result_batch_note_of(b, run))
		return b->n_rows == 0;
	size_t k = 0;
	for (size_t i = 0; i < b->n_rows; i++) {
		if (strcmp(b->rows[i].run, run)) {
			b->rows[k++] = b->rows[i];
			continue;
		}
		free((char *)b->rows[i].tensor);
		free((char *)b->rows[i].run);
	}
	b->n_rows = k;
	size_t kn = 0;
	for (size_t i = 0; i < b->n_notes; i++) {
		if (strcmp(b->notes[i].run, run)) {
			b->notes[kn++] = b->notes[i];
			continue;
		}
		free(b->notes[i].run);
		free(b->notes[i].text);
	}
	b->n_notes = kn;
	if (b->index)
		result_batch_index(b);
	return k == 0;
}

void drift_rows_relabel(struct drift_row *rows, size_t n, char *const *from, size_t n_from,
			char *const *to, size_t n_to)
{
	int map[DRIFTLOG_MAX_PROXIES];	/* to's k is from's map[k], or -1 */

	for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++) {
		map[k] = -1;
		for (size_t j = 0; k < n_to && j < n_from; j++)
			if (!strcmp(from[j], to[k]))
				map[k] = (int)j;
	}
	for (size_t i = 0; i < n; i++) {
		double old[DRIFTLOG_MAX_PROXIES];
		memcpy(old, rows[i].ratio, sizeof(old));
		for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
			rows[i].ratio[k] = map[k] >= 0 ? old[map[k]] : NAN;
	}
}

/* Whether run is one of the n names in runs. */
static int listed(const char *const *runs, size_t n, const char *run)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(runs[i], run))
			return 1;
	return 0;
}

/* b's runs, each once, into runs (RESULT_BATCH_MAX_RUNS); rows come run by run: looked up when it changes. */
static size_t runs_of(const struct result_batch *b, const char **runs)
{
	const char *last = NULL;
	size_t n = 0;

	for (size_t i = 0; i < b->n_rows; i++) {
		if (last && !strcmp(last, b->rows[i].run))
			continue;
		last = b->rows[i].run;
		if (!listed(runs, n, last) && n < RESULT_BATCH_MAX_RUNS)
			runs[n++] = last;
	}
	return n;
}

/*
 * Marks in keep[i] whether old's row i is kept (a run b has no row of and
 * that is not superseded); returns how many are. keep NULL: counted only.
 */
static size_t kept_rows(const struct result_batch *b, const struct result_batch *old,
			const char *const *superseded, size_t n_superseded, unsigned char *keep)
{
	const char *runs[RESULT_BATCH_MAX_RUNS], *last = NULL;
	size_t n_runs, n = 0;
	int k = 0;

	if (b->step != old->step || strcmp(b->study, old->study) || strcmp(b->baseline, old->baseline))
		return 0;	/* another baseline's rows are stale: the drift log keeps them */
	n_runs = runs_of(b, runs);
	for (size_t i = 0; i < old->n_rows; i++) {
		const char *run = old->rows[i].run;
		if (!last || strcmp(last, run)) {
			last = run;
			k = !listed(runs, n_runs, run) && !listed(superseded, n_superseded, run);
		}
		n += (size_t)k;
		if (keep)
			keep[i] = (unsigned char)k;
	}
	return n;
}

size_t result_batch_keeps(const struct result_batch *b, const struct result_batch *old,
			  const char *const *superseded, size_t n_superseded)
{
	return kept_rows(b, old, superseded, n_superseded, NULL);
}

int result_batch_keep_runs(struct result_batch *b, const struct result_batch *old,
			   const char *const *superseded, size_t n_superseded)
{
	unsigned char *keep = malloc(old->n_rows + 1);
	size_t extra = keep ? kept_rows(b, old, superseded, n_superseded, keep) : 0;
	struct drift_row *v = extra ? realloc(b->rows, (b->n_rows + extra) * sizeof(*v)) : NULL;

	if (!keep || (extra && !v)) {
		free(keep);
		return -1;
	}
	if (!extra) {
		free(keep);
		return 0;
	}
	b->rows = v;
	size_t n = b->n_rows;
	for (size_t i = 0; i < old->n_rows; i++) {
		const struct drift_row *o = &old->rows[i];
		if (!keep[i])
			continue;
		struct drift_row *r = &v[n];
		*r = *o;
		r->run = strdup(o->run);
		r->tensor = o->tensor ? strdup(o->tensor) : NULL;
		if (!r->run || (o->tensor && !r->tensor)) {
			free((char *)r->run);
			free((char *)r->tensor);
			for (size_t k = b->n_rows; k < n; k++) {
				free((char *)v[k].run);
				free((char *)v[k].tensor);
			}
			free(keep);
			return -1;
		}
		n++;
	}
	free(keep);
	drift_rows_relabel(v + b->n_rows, n - b->n_rows, old->proxies, old->n_proxies, b->proxies,
			   b->n_proxies);
	size_t before = b->n_rows;
	b->n_rows = n;
	/* the kept runs' notes too (out of memory: the rows without them) */
	for (size_t k = 0; k < old->n_notes; k++)
		for (size_t i = before; i < n; i++)
			if (!strcmp(v[i].run, old->notes[k].run)) {
				if (!result_batch_note_of(b, old->notes[k].run))
					(void)result_batch_note(b, old->notes[k].run, old->notes[k].text);
				break;
			}
	if (b->index)
		result_batch_index(b);
	return 0;
}

int result_batch_has_run(const struct result_batch *b, const char *run)
{
	/* the first tensor's row, looked up; else a scan: a run may lack that tensor */
	for (size_t i = 0; i < b->n_rows; i++)
		if (b->rows[i].kind == ROW_TENSOR && b->rows[i].tensor) {
			if (result_batch_find(b, run, b->rows[i].tensor))
				return 1;
			break;
		}
	for (size_t i = 0; i < b->n_rows; i++)
		if (!strcmp(b->rows[i].run, run))
			return 1;
	return 0;
}
