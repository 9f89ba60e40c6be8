/*
 * compute.c: the compute thread (see compute.h).
 *
 * When a snapshot of a study's run becomes durable at step S, the thread
 * recomputes the study at the baseline's step B nearest to S (B = S unless
 * alignment.tolerance allows otherwise): every candidate and proxy with a
 * snapshot at B (or nearest to it, within the tolerance) against it, each baseline tensor prepared
 * once and reused for every run. A later arrival at S (a proxy, so that
 * candidates get their ratios) recomputes S again; the drift log keeps
 * every row, and the latest row for (step, tensor, run) is the current one.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "compare.h"
#include "compute.h"
#include "drift.h"
#include "forget.h"
#include "logging.h"
#include "wal.h"
#include "wdrift.h"


struct job {
	char *run;		/* NULL: a config job */
	int64_t step;
	int64_t tolerance, keep_every;	/* config jobs */
	uint64_t disk_budget;
	int index_only;		/* start-up: durable, its results already logged */
	struct cstudy *studies;
	size_t n_studies;
	/* compute_forget: the caller waits on done, then reads rc and results */
	char *forget;
	int done, rc;
	size_t results;
	long files;
	struct job *next;
};

struct durable {
	char *run;
	int64_t step;
	uint64_t bytes;		/* of its spool file, for the disk budget */
};

struct compute {
	char *dir;
	struct wal *wal;
	struct wd_engine *engine;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct job *jobs, *jobs_tail;
	pthread_cond_t forgot;		/* a forget job is done */
	struct result_batch *done, *done_tail;
	size_t depth;
	int stopping, efd;
	/* the thread's own */
	struct cstudy *studies;
	size_t n_studies;
	int64_t tolerance;	/* alignment.tolerance, in steps */
	int64_t keep_every;	/* spool.retention.every */
	uint64_t disk_budget;	/* spool.retention.disk_budget */
	uint64_t spool_bytes;	/* sum of the durable snapshots' files */
	struct durable *dur;
	size_t n_dur, cap_dur;
	/* every result record in the WAL: those replayed at start-up, then ours */
	char **replayed;
	size_t n_replayed, cap_replayed;
};

/* --- studies --- */

static void studies_free(struct cstudy *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(s[i].name);
		free(s[i].baseline);
		for (size_t k = 0; k < s[i].n_cands; k++)
			free(s[i].cands[k]);
		free(s[i].cands);
		for (size_t k = 0; k < s[i].n_proxies; k++) {
			free(s[i].labels[k]);
			free(s[i].pruns[k]);
		}
		driftlog_close(&s[i].store);
	}
	free(s);
}

static struct cstudy *studies_copy(const struct wd_config *cfg, size_t *n)
{
	struct cstudy *v = calloc(cfg->n_studies + 1, sizeof(*v));

	*n = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < cfg->n_studies; i++) {
		const struct wd_config_study *s = &cfg->studies[i];
		struct cstudy *c = &v[i];
		c->name = strdup(s->name);
		c->baseline = strdup(s->baseline);
		c->cands = calloc(s->candidates.n + 1, sizeof(char *));
		for (size_t k = 0; c->cands && k < s->candidates.n; k++)
			c->cands[c->n_cands++] = strdup(s->candidates.names[k]);
		/* the config allows CONFIG_MAX_PROXIES, the synthetic one included */
		for (size_t k = 0; k < s->proxies.n && c->n_proxies < DRIFTLOG_MAX_PROXIES; k++) {
			c->labels[c->n_proxies] = strdup(s->proxies.v[k].label);
			c->pruns[c->n_proxies++] = strdup(s->proxies.v[k].run);
		}
		c->synthetic = s->synthetic_proxy;
		if (c->synthetic != WD_SYNTHETIC_NONE) {
			c->labels[c->n_proxies] = strdup(c->synthetic == WD_SYNTHETIC_BF16 ? "round:bf16"
											 : "round:fp16");
			c->pruns[c->n_proxies++] = NULL;
		}
		*n = i + 1;
	}
	return v;
}

/* --- result records: JSON in the WAL --- */

static json_t *jnum(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

static double num_of(json_t *v)
{
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static char *batch_encode(const struct result_batch *b)
{
	json_t *rows = json_array(), *labels = json_array();

	for (size_t i = 0; i < b->n_proxies; i++)
		json_array_append_new(labels, json_string(b->proxies[i]));
	for (size_t i = 0; i < b->n_rows; i++) {
		const struct drift_row *r = &b->rows[i];
		json_t *ratio = json_array();
		for (size_t k = 0; k < b->n_proxies; k++)
			json_array_append_new(ratio, jnum(r->ratio[k]));
		json_array_append_new(rows, json_pack("[i,i,o,s,I,o,o,o,I,I,I,o,f]", r->kind, r->role,
			r->tensor ? json_string(r->tensor) : json_null(), r->run, (json_int_t)r->numel,
			jnum(r->w1), jnum(r->max_abs_diff), jnum(r->rel_l2), (json_int_t)r->nan,
			(json_int_t)r->posinf, (json_int_t)r->neginf, ratio, r->wall));
	}
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "t", "result", "study", b->study,
			      "step", (json_int_t)b->step, "baseline", b->baseline, "proxies", labels,
			      "rows", rows);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

struct result_batch *result_batch_decode(const char *payload, size_t len)
{
	json_t *o = json_loadb(payload, len, 0, NULL), *rows, *labels;
	struct result_batch *b = calloc(1, sizeof(*b));
	const char *study = json_string_value(json_object_get(o, "study"));
	const char *base = json_string_value(json_object_get(o, "baseline"));

	rows = json_object_get(o, "rows");
	labels = json_object_get(o, "proxies");
	if (!b || !study || !base || !json_is_array(rows) || !json_is_array(labels) ||
	    json_array_size(labels) > DRIFTLOG_MAX_PROXIES) {
		json_decref(o);
		free(b);
		return NULL;
	}
	b->study = strdup(study);
	b->baseline = strdup(base);
	b->step = json_integer_value(json_object_get(o, "step"));
	for (size_t k = 0; k < json_array_size(labels); k++) {
		const char *l = json_string_value(json_array_get(labels, k));
		b->proxies[b->n_proxies++] = strdup(l ? l : "?");
	}
	b->rows = calloc(json_array_size(rows) + 1, sizeof(*b->rows));
	for (size_t i = 0; b->rows && i < json_array_size(rows); i++) {
		json_t *a = json_array_get(rows, i);
		struct drift_row *r = &b->rows[b->n_rows];
		const char *t = json_string_value(json_array_get(a, 2));
		const char *run = json_string_value(json_array_get(a, 3));
		if (!json_is_array(a) || json_array_size(a) != 13 || !run)
			continue;
		r->step = b->step;
		r->kind = (int)json_integer_value(json_array_get(a, 0));
		r->role = (int)json_integer_value(json_array_get(a, 1));
		r->tensor = t ? strdup(t) : NULL;
		r->run = strdup(run);
		r->numel = (uint64_t)json_integer_value(json_array_get(a, 4));
		r->w1 = num_of(json_array_get(a, 5));
		r->max_abs_diff = num_of(json_array_get(a, 6));
		r->rel_l2 = num_of(json_array_get(a, 7));
		r->nan = (uint64_t)json_integer_value(json_array_get(a, 8));
		r->posinf = (uint64_t)json_integer_value(json_array_get(a, 9));
		r->neginf = (uint64_t)json_integer_value(json_array_get(a, 10));
		for (size_t k = 0; k < b->n_proxies; k++)
			r->ratio[k] = num_of(json_array_get(json_array_get(a, 11), k));
		r->wall = num_of(json_array_get(a, 12));
		b->n_rows++;
	}
	json_decref(o);
	return b;
}

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
	free(b->rows);
	free(b->index);
	free(b->study);
	free(b->baseline);
	free(b);
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

int result_record_study(const char *payload, size_t len, char *study, size_t size, int64_t *step)
{
	json_t *o = json_loadb(payload, len, 0, NULL);
	const char *t = json_string_value(json_object_get(o, "t"));
	const char *s = json_string_value(json_object_get(o, "study"));
	int r = t && s && !strcmp(t, "result");
	if (r) {
		snprintf(study, size, "%s", s);
		*step = json_integer_value(json_object_get(o, "step"));
	}
	json_decref(o);
	return r;
}

/* --- drift logs --- */

/*
 * Orders a logged batch's ratios as the study's proxies are now: each by its
 * label, NaN for a label the batch did not have. A config may have added,
 * removed or reordered proxies since the batch was logged; the drift log
 * holds the current labels, and a ratio must stay under its own.
 */
static void relabel(struct result_batch *b, const struct cstudy *s)
{
	int from[DRIFTLOG_MAX_PROXIES];

	for (size_t k = 0; k < s->n_proxies; k++) {
		from[k] = -1;
		for (size_t j = 0; j < b->n_proxies; j++)
			if (!strcmp(b->proxies[j], s->labels[k]))
				from[k] = (int)j;
	}
	for (size_t i = 0; i < b->n_rows; i++) {
		double old[DRIFTLOG_MAX_PROXIES];
		memcpy(old, b->rows[i].ratio, sizeof(old));
		for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
			b->rows[i].ratio[k] = k < s->n_proxies && from[k] >= 0 ? old[from[k]] : NAN;
	}
	for (size_t j = 0; j < b->n_proxies; j++)
		free(b->proxies[j]);
	b->n_proxies = 0;
	for (size_t k = 0; k < s->n_proxies; k++)
		b->proxies[b->n_proxies++] = strdup(s->labels[k]);
}

static void aside_removed(void *ctx, const char *path, uint64_t bytes, int errnum)
{
	(void)ctx;
	if (errnum)
		log_warning("cannot remove the set-aside drift log '%s': %s", path, strerror(errnum));
	else
		log_notice("removed the set-aside drift log '%s' (%llu bytes): the newest %d are kept",
			   path, (unsigned long long)bytes, DRIFTLOG_ASIDE_KEEP);
}

/*
 * Opens the study's drift log, rebuilding it from the WAL when needed: when
 * it does not open, or holds other rows than the WAL's results (fewer: a
 * crash before its write; more: --force moved records aside). The old file
 * is kept as a copy (driftlog_set_aside).
 */
static struct driftlog_writer *study_store(struct compute *c, struct cstudy *s)
{
	char path[4200], err[512], dir[4100];
	uint64_t want = 0;

	if (s->store)
		return s->store;
	snprintf(dir, sizeof(dir), "%s/drift", c->dir);
	mkdir(dir, 0750);
	snprintf(path, sizeof(path), "%s/%s.h5", dir, s->name);
	/* what the WAL says this log must hold */
	struct result_batch **mine = calloc(c->n_replayed + 1, sizeof(*mine));
	size_t n_mine = 0;
	for (size_t i = 0; mine && i < c->n_replayed; i++) {
		struct result_batch *b = result_batch_decode(c->replayed[i], strlen(c->replayed[i]));
		if (b && !strcmp(b->study, s->name)) {
			relabel(b, s);
			mine[n_mine++] = b;
			want += b->n_rows;
		} else {
			result_batch_free(&b);
		}
	}
	const char *labels[DRIFTLOG_MAX_PROXIES];
	for (size_t k = 0; k < s->n_proxies; k++)
		labels[k] = s->labels[k];
	/* a missing drift log (runs rm removed it) is made again, with no copy to keep */
	struct stat sb;
	int exists = stat(path, &sb) == 0;
	int ok = exists && driftlog_open(path, labels, s->n_proxies, &s->store, err, sizeof(err)) == 0;
	if (ok && driftlog_rows(s->store) != want) {
		log_warning("drift log '%s' holds %llu rows, the write-ahead log %llu: rebuilding it",
			    path, (unsigned long long)driftlog_rows(s->store), (unsigned long long)want);
		driftlog_close(&s->store);
		ok = 0;
	} else if (!ok && exists) {
		log_warning("%s: rebuilding it from the write-ahead log", err);
	}
	if (!ok) {
		char aside[4300];
		int r = !exists ? -ENOENT : driftlog_set_aside(path, (long long)time(NULL), DRIFTLOG_ASIDE_KEEP, aside, sizeof(aside),
					aside_removed, NULL, err, sizeof(err));
		if (r == 0)
			log_notice("moved the old drift log aside to '%s'", aside);
		else if (r != -ENOENT)
			log_warning("%s", err);
		if (driftlog_open(path, labels, s->n_proxies, &s->store, err, sizeof(err)) < 0) {
			log_err("%s", err);
			s->store = NULL;
		}
		for (size_t i = 0; s->store && i < n_mine; i++)
			if (driftlog_append(s->store, mine[i]->rows, mine[i]->n_rows, err, sizeof(err)) < 0)
				log_err("rebuilding '%s': %s", path, err);
	}
	for (size_t i = 0; i < n_mine; i++)
		result_batch_free(&mine[i]);
	free(mine);
	return s->store;
}

/* Has the study a drift log on disk, or results in the WAL? */
static int has_drift_log(const struct compute *c, const struct cstudy *s)
{
	char path[4200], study[256];
	struct stat st;
	int64_t step;

	snprintf(path, sizeof(path), "%s/drift/%s.h5", c->dir, s->name);
	if (stat(path, &st) == 0)
		return 1;
	for (size_t i = 0; i < c->n_replayed; i++)
		if (result_record_study(c->replayed[i], strlen(c->replayed[i]), study, sizeof(study),
					&step) && !strcmp(study, s->name))
			return 1;
	return 0;
}

/* --- alignment --- */

static int is_durable(const struct compute *c, const char *run, int64_t step)
{
	for (size_t i = 0; i < c->n_dur; i++)
		if (c->dur[i].step == step && !strcmp(c->dur[i].run, run))
			return 1;
	return 0;
}

/*
 * The run's durable step nearest to step within the tolerance, the exact
 * step first, then the lower of two equally near; -1 when there is none.
 */
static int64_t nearest_step(const struct compute *c, const char *run, int64_t step)
{
	int64_t best = -1, dist = c->tolerance + 1;
	for (size_t i = 0; i < c->n_dur; i++) {
		if (strcmp(c->dur[i].run, run))
			continue;
		int64_t s = c->dur[i].step, d = s > step ? s - step : step - s;
		if (d < dist || (d == dist && s < best)) {
			best = s;
			dist = d;
		}
	}
	return best;
}

static void spool_path(const struct compute *c, const char *run, int64_t step, char *buf,
		       size_t size)
{
	snprintf(buf, size, "%s/spool/%s/%lld.h5", c->dir, run, (long long)step);
}

static void add_durable(struct compute *c, const char *run, int64_t step)
{
	char path[4200];
	struct stat st;

	if (is_durable(c, run, step))
		return;
	if (c->n_dur == c->cap_dur) {
		size_t cap = c->cap_dur ? 2 * c->cap_dur : 256;
		struct durable *d = realloc(c->dur, cap * sizeof(*d));
		if (!d)
			return;
		c->dur = d;
		c->cap_dur = cap;
	}
	spool_path(c, run, step, path, sizeof(path));
	c->dur[c->n_dur].run = strdup(run);
	c->dur[c->n_dur].step = step;
	c->dur[c->n_dur].bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
	c->spool_bytes += c->dur[c->n_dur++].bytes;
}

/*
 * Removes snapshot i from the spool: the index, the file; logged and WAL'd.
 * The WAL's "drop" record goes first: a crash after it leaves a file that
 * the next start removes, while a crash after the unlink alone would leave
 * a durable snapshot whose file is gone. Returns 0, or -1 (kept) when the
 * record cannot be written.
 */
static int drop(struct compute *c, size_t i, const char *why)
{
	char path[4200];
	struct durable d = c->dur[i];

	spool_path(c, d.run, d.step, path, sizeof(path));
	json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "t", "drop", "run", d.run, "step",
			      (json_int_t)d.step, "why", why);
	char *payload = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	int r = payload ? wal_append(c->wal, payload, strlen(payload)) : -ENOMEM;
	if (r == 0)
		r = wal_sync(c->wal);
	free(payload);
	if (r < 0) {
		log_err("retention: write-ahead log: cannot record the drop of '%s' (%s): keeping it",
			path, strerror(-r));
		return -1;
	}
	if (unlink(path) < 0 && errno != ENOENT)
		log_warning("retention: cannot remove '%s': %s", path, strerror(errno));
	log_notice("retention: dropped run '%s' step %lld (%llu bytes): %s", d.run, (long long)d.step,
		   (unsigned long long)d.bytes, why);
	c->spool_bytes -= d.bytes < c->spool_bytes ? d.bytes : c->spool_bytes;
	free(d.run);
	c->dur[i] = c->dur[--c->n_dur];
	return 0;
}

/* Is run a candidate of some study? Candidates are never thinned by 'every'. */
static int is_candidate(const struct compute *c, const char *run)
{
	for (size_t i = 0; i < c->n_studies; i++)
		for (size_t k = 0; k < c->studies[i].n_cands; k++)
			if (!strcmp(c->studies[i].cands[k], run))
				return 1;
	return 0;
}

/*
 * spool.retention, after run's snapshot at step was compared: baseline and
 * proxy snapshots are kept at every K-th step only, and the spool within
 * its disk budget by dropping the oldest steps (never a run's latest).
 */
static void retain(struct compute *c, const char *run, int64_t step)
{
	char why[128];

	if (c->keep_every > 1 && step % c->keep_every != 0 && !is_candidate(c, run))
		for (size_t i = 0; i < c->n_dur; i++)
			if (c->dur[i].step == step && !strcmp(c->dur[i].run, run)) {
				snprintf(why, sizeof(why), "step is not a multiple of spool.retention.every (%lld)",
					 (long long)c->keep_every);
				drop(c, i, why);
				break;
			}
	while (c->disk_budget && c->spool_bytes > c->disk_budget) {
		size_t oldest = c->n_dur;
		for (size_t i = 0; i < c->n_dur; i++) {
			int latest = 1;	/* a run's newest snapshot stays */
			for (size_t k = 0; k < c->n_dur && latest; k++)
				latest = !(k != i && c->dur[k].step > c->dur[i].step &&
					   !strcmp(c->dur[k].run, c->dur[i].run));
			if (!latest && (oldest == c->n_dur || c->dur[i].step < c->dur[oldest].step))
				oldest = i;
		}
		if (oldest == c->n_dur)
			break;	/* only latest snapshots left: nothing more to give */
		snprintf(why, sizeof(why), "spool over spool.retention.disk_budget (%llu bytes)",
			 (unsigned long long)c->disk_budget);
		if (drop(c, oldest, why) < 0)
			break;	/* the WAL failed: the same one would be picked again */
	}
}

static struct wd_ckpt *open_spool(struct compute *c, const char *run, int64_t step)
{
	char path[4200], err[WD_CKPT_ERR_MAX];
	struct wd_ckpt *ck;

	spool_path(c, run, step, path, sizeof(path));
	if (wd_ckpt_open(path, &ck, err) < 0) {
		log_err("compute: %s", err);
		return NULL;
	}
	return ck;
}

/*
 * The runs of study s aligned to the baseline's step, their spooled
 * snapshots open: 0, or -1 when there is nothing to compare there (no
 * baseline snapshot, or no other run and no synthetic proxy).
 */
static int gather(struct compute *c, const struct cstudy *s, int64_t step,
		  struct compare_input *in)
{
	size_t n_trained = s->n_proxies - (s->synthetic != WD_SYNTHETIC_NONE);
	int64_t at[COMPARE_MAX_RUNS];	/* each run's aligned step */

	memset(in, 0, sizeof(*in));
	in->step = step;
	if (!is_durable(c, s->baseline, step))
		return -1;
	/* proxies first (their W1 gives the candidates' ratios), then candidates */
	for (size_t k = 0; k < n_trained; k++)
		if ((at[in->n_runs] = nearest_step(c, s->pruns[k], step)) >= 0) {
			in->runs[in->n_runs] = s->pruns[k];
			in->role[in->n_runs++] = ROLE_PROXY;
		}
	for (size_t k = 0; k < s->n_cands; k++)	/* n_proxies + n_cands <= COMPARE_MAX_RUNS */
		if ((at[in->n_runs] = nearest_step(c, s->cands[k], step)) >= 0) {
			in->runs[in->n_runs] = s->cands[k];
			in->role[in->n_runs++] = ROLE_CANDIDATE;
		}
	if (in->n_runs == 0 && s->synthetic == WD_SYNTHETIC_NONE)
		return -1;
	if (!(in->base = open_spool(c, s->baseline, step)))
		return -1;
	for (size_t r = 0; r < in->n_runs; r++)
		in->ck[r] = open_spool(c, in->runs[r], at[r]);
	return 0;
}

static void release(struct compare_input *in)
{
	wd_ckpt_close(&in->base);
	for (size_t r = 0; r < in->n_runs; r++)
		wd_ckpt_close(&in->ck[r]);
}
/* Durable results: the WAL first (fsync'd), then the drift log. */
static void record(struct compute *c, struct cstudy *s, struct result_batch *b)
{
	char err[512];
	char *payload = batch_encode(b);
	int r = payload ? wal_append(c->wal, payload, strlen(payload)) : -ENOMEM;

	if (r == 0)
		r = wal_sync(c->wal);
	if (r < 0)
		log_err("compute: study '%s' step %lld: write-ahead log: %s", s->name,
			(long long)b->step, strerror(-r));
	/* opened (or rebuilt) first: what it checks against is the WAL before b */
	struct driftlog_writer *st = study_store(c, s);
	/*
	 * Kept with the replayed ones: a drift log rebuilt later in this run (a
	 * reload that changes the study's proxies) must hold these rows too.
	 */
	if (r == 0 && c->n_replayed == c->cap_replayed) {
		size_t cap = c->cap_replayed ? 2 * c->cap_replayed : 64;
		char **v = realloc(c->replayed, cap * sizeof(*v));
		if (v) {
			c->replayed = v;
			c->cap_replayed = cap;
		}
	}
	if (r == 0 && c->n_replayed < c->cap_replayed) {
		c->replayed[c->n_replayed++] = payload;
		payload = NULL;
	}
	free(payload);
	if (st && driftlog_append(st, b->rows, b->n_rows, err, sizeof(err)) < 0)
		log_err("compute: drift log of '%s': %s", s->name, err);
}

static void handle(struct compute *c, const char *run, int64_t step)
{
	add_durable(c, run, step);
	for (size_t i = 0; i < c->n_studies; i++) {
		struct cstudy *s = &c->studies[i];
		int involved = !strcmp(s->baseline, run);
		for (size_t k = 0; !involved && k < s->n_cands; k++)
			involved = !strcmp(s->cands[k], run);
		for (size_t k = 0; !involved && k < s->n_proxies; k++)
			involved = s->pruns[k] && !strcmp(s->pruns[k], run);
		if (!involved)
			continue;
		/* rows are keyed by the baseline's step: align the others to it */
		int64_t bstep = !strcmp(s->baseline, run) ? step : nearest_step(c, s->baseline, step);
		if (bstep < 0)
			continue;	/* no baseline there yet: its arrival triggers this */
		struct compare_input in;
		if (gather(c, s, bstep, &in) < 0)
			continue;
		struct result_batch *b = compare_step(c->engine, s, &in);
		release(&in);
		if (!b)
			continue;
		record(c, s, b);
		log_info("compute: study '%s' step %lld: %zu rows", s->name, (long long)step, b->n_rows);
		result_batch_index(b);	/* here, not on the main thread: drift queries look rows up */
		pthread_mutex_lock(&c->lock);
		if (c->done_tail)
			c->done_tail->next = b;
		else
			c->done = b;
		c->done_tail = b;
		uint64_t one = 1;
		if (write(c->efd, &one, sizeof(one)) < 0)
			log_err("compute: eventfd: %s", strerror(errno));
		pthread_mutex_unlock(&c->lock);
	}
}

int result_batch_forget(struct result_batch *b, const char *run)
{
	if (!strcmp(b->baseline, run))
		return 1;
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
	if (b->index)
		result_batch_index(b);
	return k == 0;
}

/* The studies whose result records a forgotten run was in (forget_records' seen). */
struct touched {
	char **names;
	size_t n, cap;
	size_t records;
};

static void note_touched(void *ctx, const char *payload)
{
	struct touched *t = ctx;
	char study[256];
	int64_t step;
	size_t i = 0;

	t->records++;
	if (!t->names || !result_record_study(payload, strlen(payload), study, sizeof(study), &step))
		return;
	while (i < t->n && strcmp(t->names[i], study))
		i++;
	if (i == t->n && t->n < t->cap)
		t->names[t->n++] = strdup(study);
}

/*
 * runs rm (compute_forget): the "forget" record, fsync'd, then the run out
 * of the spool index, its spool files removed, its rows out of the logged
 * results and the batches not yet taken, and the drift logs it was in
 * rebuilt from what is left. On the compute thread, between comparisons;
 * the main thread waits, so no snapshot of the run is stored meanwhile.
 */
static void forget_job(struct compute *c, struct job *j)
{
	const char *run = j->forget;
	char *payload = forget_record(run), path[4200];
	int r = payload ? wal_append(c->wal, payload, strlen(payload)) : -ENOMEM;

	free(payload);
	if (r == 0)
		r = wal_sync(c->wal);
	if ((j->rc = r) < 0)
		return;
	for (size_t i = 0; i < c->n_dur;) {
		if (strcmp(c->dur[i].run, run)) {
			i++;
			continue;
		}
		c->spool_bytes -= c->dur[i].bytes < c->spool_bytes ? c->dur[i].bytes : c->spool_bytes;
		free(c->dur[i].run);
		c->dur[i] = c->dur[--c->n_dur];
	}
	j->files = forget_spool(c->dir, run);
	struct touched tch = { calloc(c->n_studies + 1, sizeof(char *)), 0, c->n_studies, 0 };
	char **touched = tch.names;
	c->n_replayed = forget_records(c->replayed, c->n_replayed, run, note_touched, &tch);
	size_t n_touched = tch.n;
	j->results += tch.records;
	for (size_t i = 0; i < c->n_studies; i++) {
		struct cstudy *s = &c->studies[i];
		int involved = !strcmp(s->baseline, run);
		for (size_t t = 0; !involved && t < s->n_cands; t++)
			involved = !strcmp(s->cands[t], run);
		for (size_t t = 0; !involved && t < s->n_proxies; t++)
			involved = s->pruns[t] && !strcmp(s->pruns[t], run);
		for (size_t t = 0; !involved && t < n_touched; t++)
			involved = touched[t] && !strcmp(touched[t], s->name);
		if (!involved)
			continue;
		driftlog_close(&s->store);
		snprintf(path, sizeof(path), "%s/drift/%s.h5", c->dir, s->name);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warning("runs rm: cannot remove '%s': %s", path, strerror(errno));
		study_store(c, s);	/* rebuilt from the results left, if any */
	}
	for (size_t t = 0; t < n_touched; t++)
		free(touched[t]);
	free(touched);
	pthread_mutex_lock(&c->lock);	/* batches computed before, not yet taken */
	struct result_batch **pb = &c->done;
	c->done_tail = NULL;
	while (*pb) {
		struct result_batch *b = *pb;
		if (result_batch_forget(b, run)) {
			*pb = b->next;
			result_batch_free(&b);
		} else {
			c->done_tail = b;
			pb = &b->next;
		}
	}
	pthread_mutex_unlock(&c->lock);	/* the main thread logs it, with what it forgot */
}

static void *compute_main(void *arg)
{
	struct compute *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->jobs && !c->stopping)
			pthread_cond_wait(&c->wake, &c->lock);
		if (!c->jobs)
			break;
		struct job *j = c->jobs;
		c->jobs = j->next;
		if (!c->jobs)
			c->jobs_tail = NULL;
		pthread_mutex_unlock(&c->lock);
		if (j->forget) {	/* the caller owns it and waits */
			forget_job(c, j);
			pthread_mutex_lock(&c->lock);
			j->done = 1;
			c->depth--;
			pthread_cond_broadcast(&c->forgot);
			continue;
		}
		if (j->run && j->index_only) {
			add_durable(c, j->run, j->step);
			free(j->run);
		} else if (j->run) {
			handle(c, j->run, j->step);
			retain(c, j->run, j->step);
			free(j->run);
		} else {	/* a new config: drift logs reopen with it */
			studies_free(c->studies, c->n_studies);
			c->studies = j->studies;
			c->n_studies = j->n_studies;
			c->tolerance = j->tolerance;
			c->keep_every = j->keep_every;
			c->disk_budget = j->disk_budget;
		}
		free(j);
		pthread_mutex_lock(&c->lock);
		c->depth--;
		if (c->stopping)
			break;	/* the rest is recomputed from the WAL at the next start */
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static void enqueue(struct compute *c, struct job *j)
{
	pthread_mutex_lock(&c->lock);
	if (c->jobs_tail)
		c->jobs_tail->next = j;
	else
		c->jobs = j;
	c->jobs_tail = j;
	c->depth++;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
}

int compute_start(const char *storage_dir, struct wal *wal, struct wd_engine *engine,
		  const struct wd_config *cfg, char **replayed, size_t n_replayed,
		  struct compute **out)
{
	struct compute *c = calloc(1, sizeof(*c));
	int r = 0;

	*out = NULL;
	if (!c || !(c->dir = strdup(storage_dir)))
		return free(c), -ENOMEM;
	c->wal = wal;
	c->engine = engine;
	c->replayed = replayed;
	c->n_replayed = c->cap_replayed = n_replayed;
	c->studies = studies_copy(cfg, &c->n_studies);
	c->tolerance = cfg->alignment.tolerance;
	c->keep_every = cfg->spool.retention.every;
	c->disk_budget = cfg->spool.retention.disk_budget;
	/*
	 * Start-up step 3 (daemon.md): a drift log that lags the WAL, or that a
	 * killed writer left flagged, is rebuilt now, not at the study's next
	 * result, which may never come. Before the thread: nothing else runs.
	 */
	for (size_t i = 0; i < c->n_studies; i++)
		if (has_drift_log(c, &c->studies[i]))
			study_store(c, &c->studies[i]);
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	pthread_cond_init(&c->forgot, NULL);
	if (c->efd < 0 || (r = pthread_create(&c->thread, NULL, compute_main, c)) != 0) {
		r = c->efd < 0 ? -errno : -r;
		if (c->efd >= 0)
			close(c->efd);
		studies_free(c->studies, c->n_studies);	/* closes the drift logs opened above */
		free(c->dir);
		free(c);
		return r;	/* the caller keeps replayed */
	}
	*out = c;
	return 0;
}

void compute_set_config(struct compute *c, const struct wd_config *cfg)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return;
	j->studies = studies_copy(cfg, &j->n_studies);
	j->tolerance = cfg->alignment.tolerance;
	j->keep_every = cfg->spool.retention.every;
	j->disk_budget = cfg->spool.retention.disk_budget;
	enqueue(c, j);
}

static void submit(struct compute *c, const char *run, int64_t step, int index_only)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j || !(j->run = strdup(run))) {
		free(j);
		log_err("compute: out of memory queueing run '%s' step %lld", run, (long long)step);
		return;
	}
	j->step = step;
	j->index_only = index_only;
	enqueue(c, j);
}

void compute_submit(struct compute *c, const char *run, int64_t step)
{
	submit(c, run, step, 0);
}

void compute_known(struct compute *c, const char *run, int64_t step)
{
	submit(c, run, step, 1);
}

int compute_forget(struct compute *c, const char *run, size_t *results, long *files)
{
	struct job *j = calloc(1, sizeof(*j));
	int rc;

	if (!j || !(j->forget = strdup(run))) {
		free(j);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->lock);
	/* the run's queued comparisons would read files about to go: dropped */
	for (struct job **p = &c->jobs; *p;) {
		struct job *q = *p;
		if (q->run && !strcmp(q->run, run)) {
			*p = q->next;
			free(q->run);
			free(q);
			c->depth--;
		} else {
			p = &q->next;
		}
	}
	c->jobs_tail = NULL;
	for (struct job *q = c->jobs; q; q = q->next)
		c->jobs_tail = q;
	j->next = c->jobs;	/* first: what is queued after it must not see the run */
	c->jobs = j;
	if (!c->jobs_tail)
		c->jobs_tail = j;
	c->depth++;
	pthread_cond_signal(&c->wake);
	while (!j->done)
		pthread_cond_wait(&c->forgot, &c->lock);
	pthread_mutex_unlock(&c->lock);
	rc = j->rc;
	*results = j->results;
	*files = j->files;
	free(j->forget);
	free(j);
	return rc;
}

int compute_fd(const struct compute *c)
{
	return c->efd;
}

struct result_batch *compute_take(struct compute *c)
{
	uint64_t n;

	pthread_mutex_lock(&c->lock);
	struct result_batch *b = c->done;
	if (b) {
		c->done = b->next;
		if (!c->done)
			c->done_tail = NULL;
		b->next = NULL;
	} else if (read(c->efd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
		log_err("compute: eventfd: %s", strerror(errno));
	}
	pthread_mutex_unlock(&c->lock);
	return b;
}

size_t compute_depth(struct compute *c)
{
	pthread_mutex_lock(&c->lock);
	size_t d = c->depth;
	pthread_mutex_unlock(&c->lock);
	return d;
}

void compute_stop(struct compute **pc)
{
	struct compute *c = *pc;
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	for (struct job *j = c->jobs, *n; j; j = n) {
		n = j->next;
		free(j->run);
		free(j->forget);
		studies_free(j->studies, j->n_studies);
		free(j);
	}
	for (struct result_batch *b = c->done, *n; b; b = n) {
		n = b->next;
		result_batch_free(&b);
	}
	studies_free(c->studies, c->n_studies);
	for (size_t i = 0; i < c->n_dur; i++)
		free(c->dur[i].run);
	free(c->dur);
	for (size_t i = 0; i < c->n_replayed; i++)
		free(c->replayed[i]);
	free(c->replayed);
	close(c->efd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->forgot);
	free(c->dir);
	free(c);
	*pc = NULL;
}
