/*
 * compute.c: the compute thread (see compute.h).
 *
 * When a snapshot of a study's run becomes durable at step S, the thread
 * recomputes the study at the baseline's step B nearest to S (B = S unless
 * alignment.tolerance allows otherwise): every candidate and proxy with a
 * snapshot at B (or one whose nearest baseline step is B: the nearest
 * such, spool_index_aligned) against it, each
 * baseline tensor prepared once and reused for every run. A later arrival
 * at S (a proxy, so that candidates get their ratios) recomputes S again;
 * the drift log keeps every row, and the latest row for (step, tensor, run)
 * is the current one.
 */
#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "compare.h"
#include "compute.h"
#include "logging.h"
#include "name_match.h"
#include "records.h"
#include "result_cover.h"
#include "spool_index.h"
#include "state.h"
#include "wal.h"
#include "wdrift.h"
#include "workq.h"

enum job_kind {
	JOB_COMPARE,	/* run's snapshot at step is durable: compare it */
	JOB_KNOWN,	/* start-up: durable, its results already logged */
	JOB_CONFIG,	/* a reload: new studies and rules */
	JOB_FORGET,	/* runs rm: compute_forget waits on it */
};

struct job {
	struct workq_item item;
	enum job_kind kind;
	char *run;
	int64_t step;
	/* JOB_CONFIG */
	struct spool_rules rules;
	struct cstudy *studies;
	size_t n_studies;
	/* JOB_FORGET: read by the waiting caller */
	int rc;
	size_t results;
	long files;
};

struct compute {
	struct workq q;
	char *dir;
	struct wal *wal;
	struct wd_engine *engine;
	struct compare_workers *workers;	/* compute.threads over a step's tensors */
	/* the thread's own */
	struct cstudy *studies;
	size_t n_studies;
	struct spool_index spool;	/* durable snapshots whose files are kept */
	/* every result record in the WAL: those replayed at start-up, then ours */
	char **replayed;
	size_t n_replayed, cap_replayed;
	/* the spool as the thread left it after its last job: status and /metrics read them */
	_Atomic uint64_t spool_bytes, spool_files, retention_dropped;
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
		free(s[i].names_said);
		free(s[i].nonfinite_said);
		free(s[i].behind_said);
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
		c->names_said = calloc(c->n_cands + c->n_proxies + 2, sizeof(*c->names_said));
		c->nonfinite_said = calloc(c->n_cands + c->n_proxies + 2, 1);
		c->behind_said = calloc(c->n_cands + 1, 1);
		c->synthetic = s->synthetic_proxy;
		if (c->synthetic != WD_SYNTHETIC_NONE) {
			c->labels[c->n_proxies] = strdup(wd_config_synthetic_label(c->synthetic));
			c->pruns[c->n_proxies++] = NULL;
		}
		*n = i + 1;
	}
	return v;
}

static struct spool_rules rules_of(const struct wd_config *cfg)
{
	return (struct spool_rules){ cfg->alignment.tolerance, cfg->spool.retention.every,
				     cfg->spool.retention.disk_budget };
}

/* Has study s run as its baseline, a candidate or a proxy? */
static int study_has(const struct cstudy *s, const char *run)
{
	if (!strcmp(s->baseline, run))
		return 1;
	for (size_t k = 0; k < s->n_cands; k++)
		if (!strcmp(s->cands[k], run))
			return 1;
	for (size_t k = 0; k < s->n_proxies; k++)
		if (s->pruns[k] && !strcmp(s->pruns[k], run))
			return 1;
	return 0;
}

/*
 * spool.retention.disk_budget dropped run's snapshot at step. Where run is
 * a study's baseline or trained proxy and a candidate's latest snapshot is
 * before step, that candidate cannot be compared there (against it) when
 * it comes: said at warning, once per candidate (until a reload). A
 * trial's lagging candidate was acked, never compared, and only notices of
 * the drops said anything.
 */
static void dropped_ahead(void *ctx, const struct spool_index *ix, const char *run, int64_t step)
{
	struct compute *c = ctx;

	for (size_t i = 0; i < c->n_studies; i++) {
		struct cstudy *s = &c->studies[i];
		const char *label = NULL;
		for (size_t k = 0; k < s->n_proxies; k++)
			if (s->pruns[k] && !strcmp(s->pruns[k], run))
				label = s->labels[k];
		if (strcmp(s->baseline, run) && !label)
			continue;
		for (size_t k = 0; s->behind_said && k < s->n_cands; k++) {
			int64_t *steps = NULL;
			size_t n = spool_index_steps(ix, s->cands[k], &steps);
			int64_t latest = n ? steps[n - 1] : -1;
			free(steps);
			if (s->behind_said[k] || latest >= step)
				continue;
			char where[64] = "it has no snapshot";
			if (n)
				snprintf(where, sizeof(where), "its latest is step %lld", (long long)latest);
			log_warning("retention: run '%s' step %lld, the %s%s%s of study '%s', went for "
				    "spool.retention.disk_budget before candidate '%s' reached that step (%s): "
				    "if '%s' publishes step %lld, it finds no %s there; raise "
				    "spool.retention.disk_budget, or keep the candidate closer (said once for the "
				    "candidate)", run, (long long)step, label ? "proxy '" : "baseline", label ? label : "",
				    label ? "'" : "", s->name, s->cands[k], where, s->cands[k], (long long)step,
				    label ? "snapshot of that proxy" : "baseline");
			s->behind_said[k] = 1;
		}
	}
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

/* --- drift logs --- */

/*
 * Orders a logged batch's ratios as the study's proxies are now: each by its
 * label, NaN for a label the batch did not have. A config may have added,
 * removed or reordered proxies since the batch was logged; the drift log
 * holds the current labels, and a ratio must stay under its own.
 */
static void relabel(struct result_batch *b, const struct cstudy *s)
{
	drift_rows_relabel(b->rows, b->n_rows, b->proxies, b->n_proxies, s->labels, s->n_proxies);
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
		log_notice("removed the set-aside drift log '%s' (%llu bytes): the newest %d of its kind are kept",
			   path, (unsigned long long)bytes, DRIFTLOG_ASIDE_KEEP);
}

/*
 * Opens the study's drift log, rebuilding it from the WAL when needed: when
 * it does not open, or holds other rows than the WAL's results (fewer: a
 * crash before its write; more: --force moved records aside). The old file
 * is kept as a copy (driftlog_set_aside). removed: runs rm took the file
 * away on purpose, so that its absence is no news to say.
 */
static struct driftlog_writer *study_store(struct compute *c, struct cstudy *s, int removed)
{
	char path[4200], err[512], dir[4100];
	uint64_t want = 0;

	if (s->store)
		return s->store;
	snprintf(dir, sizeof(dir), "%s/drift", c->dir);
	mkdir(dir, 0750);
	snprintf(path, sizeof(path), "%s/%s.h5", dir, s->name);
	const char *labels[DRIFTLOG_MAX_PROXIES];
	for (size_t k = 0; k < s->n_proxies; k++)
		labels[k] = s->labels[k];
	struct stat sb;
	if (s->closed_clean) {	/* closed by store_rest: as it was, unless changed since */
		s->closed_clean = 0;
		if (stat(path, &sb) == 0 &&	/* removed since (runs rm): made again below */
		    driftlog_open(path, labels, s->n_proxies, &s->store, err, sizeof(err)) == 0 &&
		    driftlog_rows(s->store) == s->rows_at_close)
			return s->store;
		driftlog_close(&s->store);	/* checked against the WAL, below */
	}
	/* what the WAL says this log must hold */
	struct result_batch **mine = calloc(c->n_replayed + 1, sizeof(*mine));
	size_t n_mine = 0;
	for (size_t i = 0; mine && i < c->n_replayed; i++) {
		struct result_batch *b = record_result_decode(c->replayed[i], strlen(c->replayed[i]));
		if (b && !strcmp(b->study, s->name)) {
			relabel(b, s);
			mine[n_mine++] = b;
			want += b->n_rows;
		} else {
			result_batch_free(&b);
		}
	}
	/* a missing drift log (runs rm removed it) is made again, with no copy to keep */
	int exists = stat(path, &sb) == 0;
	int opened = exists ? driftlog_open(path, labels, s->n_proxies, &s->store, err, sizeof(err)) : -1;
	int ok = opened == 0;
	if (ok && driftlog_rows(s->store) != want) {
		log_warning("drift log '%s' holds %llu rows, the write-ahead log %llu: rebuilding it",
			    path, (unsigned long long)driftlog_rows(s->store), (unsigned long long)want);
		driftlog_close(&s->store);
		ok = 0;
	} else if (opened == DRIFTLOG_OTHER_LABELS) {	/* the config changed, nothing is wrong */
		log_notice("%s (a config change): rebuilding it with them from the write-ahead log", err);
	} else if (!ok && exists) {
		log_warning("%s: rebuilding it from the write-ahead log", err);
	}
	if (!ok) {
		char aside[4300];
		const char *why = opened == DRIFTLOG_OTHER_LABELS ? DRIFTLOG_ASIDE_RELABELED : DRIFTLOG_ASIDE_BROKEN;
		int r = !exists ? -ENOENT : driftlog_set_aside(path, why, (long long)time(NULL), DRIFTLOG_ASIDE_KEEP,
							       aside, sizeof(aside), aside_removed, NULL, err,
							       sizeof(err));
		if (r == 0)
			log_notice("moved the old drift log aside to '%s'", aside);
		else if (r != -ENOENT)
			log_warning("%s", err);
		else if (want && !removed)	/* removed by hand, not by runs rm: a trial's went unsaid */
			log_warning("drift log '%s' was not there: making it again from the write-ahead log (%llu "
				    "rows)", path, (unsigned long long)want);
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

/*
 * With no job waiting, the drift logs are closed: an open one is flagged
 * open in its file (HDF5's SWMR writer), and a daemon killed while idle
 * (the OOM killer, SIGKILL, a power loss) left every study's drift log to
 * be moved aside and rebuilt from the whole WAL at the next start. Closed
 * cleanly, each opens again as it was at its next append.
 */
static void store_rest(struct compute *c)
{
	for (size_t i = 0; i < c->n_studies; i++) {
		struct cstudy *s = &c->studies[i];
		if (!s->store)
			continue;
		s->rows_at_close = driftlog_rows(s->store);
		s->closed_clean = driftlog_close(&s->store) == 0;
	}
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
		if (record_result_study(c->replayed[i], strlen(c->replayed[i]), study, sizeof(study),
					&step) && !strcmp(study, s->name))
			return 1;
	return 0;
}

/* --- one comparison --- */

static struct wd_ckpt *open_spool(struct compute *c, const char *run, int64_t step)
{
	char path[4200], err[WD_CKPT_ERR_MAX];
	struct wd_ckpt *ck;

	spool_path(path, sizeof(path), c->dir, run, step);
	if (wd_ckpt_open(path, &ck, err) < 0) {
		log_err("compute: %s", err);
		return NULL;
	}
	return ck;
}

/*
 * The runs of study s aligned to the baseline's step (at: each run's own
 * step), proxies first (their W1 gives the candidates' ratios), then
 * candidates: 0, or -1 when there is nothing to compare there (no baseline
 * snapshot, or no other run and no synthetic proxy). Nothing is opened.
 */
static int align(const struct compute *c, const struct cstudy *s, int64_t step,
		 struct compare_input *in, int64_t *at)
{
	size_t n_trained = s->n_proxies - (s->synthetic != WD_SYNTHETIC_NONE);

	memset(in, 0, sizeof(*in));
	in->step = step;
	if (!spool_index_has(&c->spool, s->baseline, step))
		return -1;
	/* each run's step that belongs to this baseline step, not merely one near it */
	for (size_t k = 0; k < n_trained; k++)
		if ((at[in->n_runs] = spool_index_aligned(&c->spool, s->pruns[k], s->baseline, step)) >= 0) {
			in->runs[in->n_runs] = s->pruns[k];
			in->role[in->n_runs++] = ROLE_PROXY;
		}
	for (size_t k = 0; k < s->n_cands; k++)	/* n_proxies + n_cands <= COMPARE_MAX_RUNS */
		if ((at[in->n_runs] = spool_index_aligned(&c->spool, s->cands[k], s->baseline, step)) >= 0) {
			in->runs[in->n_runs] = s->cands[k];
			in->role[in->n_runs++] = ROLE_CANDIDATE;
		}
	return in->n_runs == 0 && s->synthetic == WD_SYNTHETIC_NONE ? -1 : 0;
}

/* align(), with the spooled snapshots open: 0, or -1 (nothing to compare, or no baseline file). */
static int gather(struct compute *c, const struct cstudy *s, int64_t step,
		  struct compare_input *in)
{
	int64_t at[COMPARE_MAX_RUNS];

	if (align(c, s, step, in, at) < 0 || !(in->base = open_spool(c, s->baseline, step)))
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
	char *payload = record_result(b);
	int r = payload ? wal_append(c->wal, payload, strlen(payload)) : -ENOMEM;

	if (r == 0)
		r = wal_sync(c->wal);
	if (r < 0)
		log_err("compute: study '%s' step %lld: write-ahead log: %s", s->name,
			(long long)b->step, strerror(-r));
	/* opened (or rebuilt) first: what it checks against is the WAL before b */
	struct driftlog_writer *st = study_store(c, s, 0);
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

/*
 * Says when a run's tensor names stop or start matching the baseline's
 * (name_match.h): a warning when they differ, and again only when what
 * differs changes, so that a run named otherwise for a whole training
 * run is said once, not at every step; a notice when they match again.
 * What differs is also kept in b, when there is one, for `drift`
 * (result_batch.h): every step, where the log says it once per change.
 * Out of memory: not kept.
 */
static void check_names(struct cstudy *s, const struct compare_input *in, struct result_batch *b)
{
	for (size_t r = 0; r < in->n_runs; r++) {
		size_t slot = SIZE_MAX;
		if (!in->ck[r])
			continue;
		struct name_match m;
		char what[1024];
		name_match_count(in->base, in->ck[r], &m);
		if (m.lacking || m.extra)
			name_match_say(&m, in->base, in->ck[r], what, sizeof(what));
		if (b && (m.lacking || m.extra))
			(void)result_batch_note(b, in->runs[r], what);
		for (size_t k = 0; k < s->n_proxies; k++)
			if (s->pruns[k] && !strcmp(s->pruns[k], in->runs[r]))
				slot = k;
		for (size_t k = 0; k < s->n_cands; k++)
			if (!strcmp(s->cands[k], in->runs[r]))
				slot = s->n_proxies + k;
		if (!s->names_said || slot == SIZE_MAX || in->step < s->names_said[slot].step)
			continue;
		s->names_said[slot].step = in->step;
		const char *who = in->role[r] == ROLE_PROXY ? "proxy" : "candidate";
		if (m.reshaped != s->names_said[slot].reshaped || m.relaid != s->names_said[slot].relaid) {
			char shapes[1024];	/* said apart from the names: another mistake */
			name_match_say_shapes(&m, shapes, sizeof(shapes));
			if (m.reshaped || m.relaid)
				log_warning("compute: study '%s' step %lld: %s '%s' %s", s->name, (long long)in->step,
					    who, in->runs[r], shapes);
			else
				log_notice("compute: study '%s' step %lld: %s '%s' has the baseline's shapes again",
					   s->name, (long long)in->step, who, in->runs[r]);
			s->names_said[slot].reshaped = m.reshaped;
			s->names_said[slot].relaid = m.relaid;
		}
		if (m.lacking == s->names_said[slot].lacking && m.extra == s->names_said[slot].extra)
			continue;
		if (m.lacking || m.extra)
			log_warning("compute: study '%s' step %lld: %s '%s' %s", s->name, (long long)in->step,
				    who, in->runs[r], what);
		else
			log_notice("compute: study '%s' step %lld: %s '%s' has the baseline's tensor names "
				   "again", s->name, (long long)in->step, who, in->runs[r]);
		s->names_said[slot].lacking = m.lacking;
		s->names_said[slot].extra = m.extra;
	}
}

/*
 * Says when a compared run's weights hold NaN or +-Inf, and when they are
 * finite again: once per change, as check_names does. A diverged run had
 * been said only by `wdrift drift`, /metrics and a nonfinite alert rule,
 * when one was configured: nothing in the log (a trial's).
 */
static void check_nonfinite(struct cstudy *s, const struct result_batch *b)
{
	for (size_t slot = 0; s->nonfinite_said && slot < s->n_proxies + s->n_cands; slot++) {
		const char *run = slot < s->n_proxies ? s->pruns[slot] : s->cands[slot - s->n_proxies];
		uint64_t nan = 0, posinf = 0, neginf = 0, tensors = 0, odd = 0;
		const char *first = NULL;
		int role = 0, synth = !run;
		if (synth)	/* the synthetic proxy: its rows carry its label; its infinities are overflow */
			run = s->labels[slot];
		for (size_t i = 0; i < b->n_rows; i++) {
			const struct drift_row *r = &b->rows[i];
			if (r->kind != ROW_TENSOR || strcmp(r->run, run))
				continue;
			role = r->role;
			tensors++;
			nan += r->nan, posinf += r->posinf, neginf += r->neginf;
			if (r->nan + r->posinf + r->neginf && !odd++)
				first = r->tensor;
		}
		if (!tensors || !odd == !s->nonfinite_said[slot])
			continue;	/* not compared at this step, or as it was said */
		const char *who = role == ROLE_PROXY ? "proxy" : "candidate";
		if (odd && synth)
			log_warning("compute: study '%s' step %lld: synthetic proxy '%s': %llu value%s of the "
				    "baseline %s out of the format's range (fp16's 65504) in %llu of its %llu tensors, "
				    "the first '%.200s': rounded, %s +-Inf, which its W1 leaves out, so it measures "
				    "%s loss, not rounding, and ratios against it mean little (round:bf16 has fp32's "
				    "range). Said again when they are gone", s->name, (long long)b->step, run,
				    (unsigned long long)(posinf + neginf), posinf + neginf == 1 ? "" : "s",
				    posinf + neginf == 1 ? "is" : "are", (unsigned long long)odd,
				    (unsigned long long)tensors, first, posinf + neginf == 1 ? "it is" : "they are",
				    posinf + neginf == 1 ? "its" : "their");
		else if (odd)
			log_warning("compute: study '%s' step %lld: %s '%s' holds %llu value%s that %s NaN or "
				    "Inf (%llu NaN, %llu +Inf, %llu -Inf) in %llu of its %llu tensors, the first "
				    "'%.200s': its W1, max|d| and rel L2 leave them out (`wdrift drift` counts them; "
				    "a nonfinite alert rule alerts on them). Said again when they are gone",
				    s->name, (long long)b->step, who, run, (unsigned long long)(nan + posinf + neginf),
				    nan + posinf + neginf == 1 ? "" : "s", nan + posinf + neginf == 1 ? "is" : "are",
				    (unsigned long long)nan, (unsigned long long)posinf, (unsigned long long)neginf,
				    (unsigned long long)odd, (unsigned long long)tensors, first);
		else
			log_notice("compute: study '%s' step %lld: %s '%s' holds only finite values again",
				   s->name, (long long)b->step, who, run);
		s->nonfinite_said[slot] = odd > 0;
	}
}

/*
 * Study s at the baseline's step bstep: compared, recorded, handed to the
 * main thread. 1 when results came of it, 0 when there was nothing to compare.
 * history: a reload's backfill over snapshots held before (result_batch.h).
 */
static int compute_at(struct compute *c, struct cstudy *s, int64_t bstep, int history)
{
	struct compare_input in;
	double t0 = now_mono();	/* for /metrics' wdrift_compute_seconds_total */

	if (gather(c, s, bstep, &in) < 0)
		return 0;
	struct result_batch *b = compare_step(c->workers, s, &in);
	check_names(s, &in, b);
	release(&in);
	if (!b)
		return 0;
	record(c, s, b);
	check_nonfinite(s, b);
	b->seconds = now_mono() - t0;
	b->backfill = history;
	log_info("compute: study '%s' step %lld: %zu rows", s->name, (long long)bstep, b->n_rows);
	result_batch_index(b);	/* here, not on the main thread: drift queries look rows up */
	workq_finish(&c->q, &b->item);
	return 1;
}

/*
 * A baseline step bstep has arrived: a neighbour's row that compared a
 * run's step now nearer to bstep (or as near, and bstep lower) is computed
 * again, so that the step it should compare instead is (a review found a
 * step never compared, with the baseline arriving after the candidate).
 * Only where a run has a step within the tolerance of both: never with
 * tolerance 0, nor with steps saved at the same interval as the baseline's
 * and a tolerance under half of it.
 */
static void realign_neighbours(struct compute *c, struct cstudy *s, int64_t bstep)
{
	int64_t nb[2];
	size_t n_trained = s->n_proxies - (s->synthetic != WD_SYNTHETIC_NONE);

	if (!c->spool.rules.tolerance)
		return;
	spool_index_neighbours(&c->spool, s->baseline, bstep, &nb[0], &nb[1]);
	for (int k = 0; k < 2; k++) {
		int moved = 0;
		for (size_t r = 0; nb[k] >= 0 && !moved && r < s->n_cands + n_trained; r++)
			moved = spool_index_between(&c->spool, r < s->n_cands ? s->cands[r]
						    : s->pruns[r - s->n_cands], bstep, nb[k]);
		if (moved)
			compute_at(c, s, nb[k], 0);
	}
}

static void handle(struct compute *c, const char *run, int64_t step)
{
	if (spool_index_add(&c->spool, run, step, -1) < 0)
		log_err("compute: out of memory noting run '%s' step %lld", run, (long long)step);
	for (size_t i = 0; i < c->n_studies; i++) {
		struct cstudy *s = &c->studies[i];
		if (!study_has(s, run))
			continue;
		/* rows are keyed by the baseline's step: align the others to it */
		int is_base = !strcmp(s->baseline, run);
		int64_t bstep = is_base ? step : spool_index_nearest(&c->spool, s->baseline, step);
		if (bstep < 0)	/* no baseline there yet: its arrival triggers this */
			continue;
		compute_at(c, s, bstep, 0);
		if (is_base)
			realign_neighbours(c, s, bstep);
	}
}

/* --- a reload's new studies, over the snapshots held --- */

/*
 * At the baseline's step: STEP_MISSING, a run of s has a snapshot aligned
 * there with no row; STEP_COVERED, each run aligned has its row; STEP_ALONE,
 * no run of s has a snapshot aligned there.
 */
enum { STEP_ALONE, STEP_COVERED, STEP_MISSING };
static int step_state(const struct compute *c, const struct cstudy *s, int64_t step,
		      const struct result_cover *cv)
{
	struct compare_input in;
	int64_t at[COMPARE_MAX_RUNS];

	if (align(c, s, step, &in, at) < 0)
		return STEP_ALONE;
	int cands = 0;
	for (size_t r = 0; r < in.n_runs; r++) {
		if (!result_cover_has(cv, step, in.runs[r]))
			return STEP_MISSING;
		cands += in.role[r] == ROLE_CANDIDATE;
	}
	/*
	 * A trained proxy aligned here under a label the candidates' rows were
	 * not computed with (a reload renamed it, or gave a run that was there
	 * a proxy's place): their ratios to it are missing, though every run
	 * has its row (a trial's renamed proxy lost the whole history's).
	 */
	for (size_t r = 0; cands && r < in.n_runs; r++)
		for (size_t k = 0; in.role[r] == ROLE_PROXY && k < s->n_proxies; k++)
			if (s->pruns[k] && !strcmp(s->pruns[k], in.runs[r]) &&
			    !result_cover_has_label(cv, step, s->labels[k]))
				return STEP_MISSING;
	/* the synthetic proxy's rows go under its label, the last one */
	return s->synthetic != WD_SYNTHETIC_NONE && !result_cover_has(cv, step, s->labels[s->n_proxies - 1]) ?
	       STEP_MISSING : STEP_COVERED;
}

/*
 * A study the reload added, or whose runs it changed: compared at every
 * durable step of its baseline where one of its runs has no row yet,
 * oldest first, as start-up does for what the WAL lacks (recover.c).
 * Results go to the WAL, the drift log and the main thread like any other.
 */
static void backfill(struct compute *c, struct cstudy *s, const char *why)
{
	struct result_cover cv;
	int64_t *steps;
	size_t n = spool_index_steps(&c->spool, s->baseline, &steps), done = 0, had = 0, alone = 0;

	if (result_cover_build(&cv, c->replayed, c->n_replayed, s->name, s->baseline) < 0) {
		log_err("compute: study '%s' (%s): out of memory reading its results: its snapshots "
			"held are not computed until they arrive again or the daemon restarts", s->name, why);
		free(steps);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		int state = step_state(c, s, steps[i], &cv);
		had += state == STEP_COVERED;
		alone += state == STEP_ALONE;
		if (state == STEP_MISSING)
			done += (size_t)compute_at(c, s, steps[i], 1);	/* history: result_batch.h */
	}
	/*
	 * "at 0 of the 3", after a typo set right, read as a failure: the rest
	 * say why; and runs with no snapshot at all are named, since "with
	 * results already" counts only the runs that have some (a reload's
	 * mistyped candidate is not among them).
	 */
	char rest[600] = "";
	size_t at = 0, silent = 0;
	if (had || alone)
		at = (size_t)snprintf(rest, sizeof(rest), " (%zu with results already, %zu with no snapshot of "
				      "its runs aligned)", had, alone);
	for (size_t k = 0; k < s->n_cands + s->n_proxies && at < sizeof(rest); k++) {
		int cand = k < s->n_cands;
		const char *run = cand ? s->cands[k] : s->pruns[k - s->n_cands];
		int64_t *held = NULL;
		if (!run)	/* the synthetic proxy: no run of its own */
			continue;
		size_t n_held = spool_index_steps(&c->spool, run, &held);
		free(held);
		if (n_held || ++silent > 3)
			continue;
		at += (size_t)snprintf(rest + at, sizeof(rest) - at, "%s%s '%s'", silent == 1 ?
				       "; with no snapshot at all: " : ", ", cand ? "candidate" : "proxy", run);
	}
	if (silent > 3 && at < sizeof(rest))
		snprintf(rest + at, sizeof(rest) - at, ", and %zu more", silent - 3);
	log_notice("compute: study '%s' (%s): computed at %zu of the %zu durable steps of baseline "
		   "'%s' held%s", s->name, why, done, n, s->baseline, rest);
	result_cover_release(&cv);
	free(steps);
}

static int same_names(char *const *a, size_t na, char *const *b, size_t nb)
{
	if (na != nb)
		return 0;
	for (size_t i = 0; i < na; i++)
		if (!a[i] != !b[i] || (a[i] && strcmp(a[i], b[i])))
			return 0;
	return 1;
}

/* Why s (of a new config) needs a backfill against the old studies, or NULL. */
static const char *backfill_reason(const struct cstudy *old, size_t n_old, const struct cstudy *s)
{
	for (size_t i = 0; i < n_old; i++) {
		const struct cstudy *o = &old[i];
		if (strcmp(o->name, s->name))
			continue;
		return strcmp(o->baseline, s->baseline) || !same_names(o->cands, o->n_cands, s->cands,
		       s->n_cands) || !same_names(o->pruns, o->n_proxies, s->pruns, s->n_proxies) ||
		       !same_names(o->labels, o->n_proxies, s->labels, s->n_proxies) ?
		       "runs changed by reload" : NULL;
	}
	return "added by reload";
}

/* --- runs rm --- */

/* The studies whose result records a forgotten run was in (record_results_without's seen). */
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
	if (!t->names || !record_result_study(payload, strlen(payload), study, sizeof(study), &step))
		return;
	while (i < t->n && strcmp(t->names[i], study))
		i++;
	if (i == t->n && t->n < t->cap)
		t->names[t->n++] = strdup(study);
}

/* A result batch not yet taken, without the run being forgotten: dropped when nothing is left. */
static int batch_forget(struct workq_item *item, void *run)
{
	struct result_batch *b = workq_entry(item, struct result_batch, item);

	if (!result_batch_forget(b, run))
		return 0;
	result_batch_free(&b);
	return 1;
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
	const char *run = j->run;
	char *payload = record_forget(run), path[4200];
	int r = payload ? wal_append(c->wal, payload, strlen(payload)) : -ENOMEM;

	free(payload);
	if (r == 0)
		r = wal_sync(c->wal);
	if ((j->rc = r) < 0)
		return;
	spool_index_forget(&c->spool, run);
	j->files = spool_remove_run(c->dir, run);
	struct touched tch = { calloc(c->n_studies + 1, sizeof(char *)), 0, c->n_studies, 0 };
	c->n_replayed = record_results_without(c->replayed, c->n_replayed, run, note_touched, &tch);
	j->results += tch.records;
	for (size_t i = 0; i < c->n_studies; i++) {
		struct cstudy *s = &c->studies[i];
		int involved = study_has(s, run);
		for (size_t t = 0; !involved && t < tch.n; t++)
			involved = tch.names[t] && !strcmp(tch.names[t], s->name);
		if (!involved)
			continue;
		s->closed_clean = 0;	/* its rows change: checked against the WAL, or made again */
		driftlog_close(&s->store);
		snprintf(path, sizeof(path), "%s/drift/%s.h5", c->dir, s->name);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warning("runs rm: cannot remove '%s': %s", path, strerror(errno));
		study_store(c, s, 1);	/* rebuilt from the results left, if any */
	}
	for (size_t t = 0; t < tch.n; t++)
		free(tch.names[t]);
	free(tch.names);
	/* batches computed before, not yet taken; the main thread logs it, with what it forgot */
	workq_remove_ready_if(&c->q, batch_forget, (void *)run);
}

/* --- the thread --- */

static void job_free(struct job *j)
{
	free(j->run);
	studies_free(j->studies, j->n_studies);
	free(j);
}

static void work(struct workq *q, struct workq_item *item, void *ctx)
{
	struct compute *c = ctx;
	struct job *j = workq_entry(item, struct job, item);

	switch (j->kind) {
	case JOB_FORGET:	/* the caller owns it and waits */
		forget_job(c, j);
		c->spool_bytes = c->spool.bytes;
		c->spool_files = c->spool.n;
		if (!workq_queued(q))
			store_rest(c);
		return;
	case JOB_KNOWN:
		if (spool_index_add(&c->spool, j->run, j->step, -1) < 0)
			log_err("compute: out of memory noting run '%s' step %lld", j->run,
				(long long)j->step);
		break;
	case JOB_COMPARE:
		handle(c, j->run, j->step);
		c->retention_dropped += spool_retain(&c->spool, c->wal, j->run, j->step,
						     !is_candidate(c, j->run), dropped_ahead, c);
		break;
	case JOB_CONFIG: {	/* drift logs reopen with it */
		struct cstudy *old = c->studies;
		size_t n_old = c->n_studies;
		c->studies = j->studies;
		c->n_studies = j->n_studies;
		j->studies = NULL;
		j->n_studies = 0;
		/* a new tolerance aligns snapshots held anew: those waiting may have a partner now */
		int realigned = c->spool.rules.tolerance != j->rules.tolerance;
		c->spool.rules = j->rules;
		/* a disk_budget lowered by the reload applies now, not at the next snapshot */
		c->retention_dropped += spool_retain(&c->spool, c->wal, "", -1, 0, dropped_ahead, c);
		for (size_t i = 0; i < c->n_studies; i++) {
			const char *why = backfill_reason(old, n_old, &c->studies[i]);
			if (!why && realigned)
				why = "alignment.tolerance changed by reload";
			if (why)
				backfill(c, &c->studies[i], why);
		}
		studies_free(old, n_old);
		break;
	}
	}
	job_free(j);
	c->spool_bytes = c->spool.bytes;
	c->spool_files = c->spool.n;
	if (!workq_queued(q))
		store_rest(c);
}

int compute_start(const char *storage_dir, struct wal *wal, struct wd_engine *engine,
		  const struct wd_config *cfg, char **replayed, size_t n_replayed,
		  struct compute **out)
{
	struct compute *c = calloc(1, sizeof(*c));
	struct spool_rules rules = rules_of(cfg);
	int r;

	*out = NULL;
	if (!c || !(c->dir = strdup(storage_dir)) || spool_index_init(&c->spool, storage_dir, &rules) < 0) {
		if (c)
			free(c->dir);
		free(c);
		return -ENOMEM;
	}
	c->wal = wal;
	c->engine = engine;
	if (compare_workers_open(engine, (uint64_t)cfg->memory.budget, &c->workers) < 0) {
		spool_index_release(&c->spool);
		free(c->dir);
		free(c);
		return -ENOMEM;
	}
	size_t at_once = compare_workers_count(c->workers);
	int threads = wd_engine_threads(engine);
	log_info("compute: %zu tensor%s compared at once, %d thread%s for a large one (%s elements "
		 "or more)", at_once, at_once == 1 ? "" : "s", threads, threads == 1 ? "" : "s", "2^20");
	c->replayed = replayed;
	c->n_replayed = c->cap_replayed = n_replayed;
	c->studies = studies_copy(cfg, &c->n_studies);
	/*
	 * Start-up step 3 (daemon.md): a drift log that lags the WAL, or that a
	 * killed writer left flagged, is rebuilt now, not at the study's next
	 * result, which may never come. Before the thread: nothing else runs.
	 */
	for (size_t i = 0; i < c->n_studies; i++)
		if (has_drift_log(c, &c->studies[i]))
			study_store(c, &c->studies[i], 0);
	store_rest(c);	/* closed until a job comes, which may be never */
	if ((r = workq_start(&c->q, "compute", work, c)) < 0) {
		studies_free(c->studies, c->n_studies);	/* closes the drift logs opened above */
		compare_workers_close(&c->workers);
		spool_index_release(&c->spool);
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
	j->kind = JOB_CONFIG;
	j->studies = studies_copy(cfg, &j->n_studies);
	j->rules = rules_of(cfg);
	workq_push(&c->q, &j->item);
}

static void submit(struct compute *c, const char *run, int64_t step, enum job_kind kind)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j || !(j->run = strdup(run))) {
		free(j);
		log_err("compute: out of memory queueing run '%s' step %lld", run, (long long)step);
		return;
	}
	j->kind = kind;
	j->step = step;
	workq_push(&c->q, &j->item);
}

void compute_submit(struct compute *c, const char *run, int64_t step)
{
	submit(c, run, step, JOB_COMPARE);
}

void compute_known(struct compute *c, const char *run, int64_t step)
{
	submit(c, run, step, JOB_KNOWN);
}

/* A queued comparison of the run being forgotten: it would read files about to go. */
static int job_of_run(struct workq_item *item, void *run)
{
	struct job *j = workq_entry(item, struct job, item);

	if (!j->run || strcmp(j->run, run))
		return 0;
	job_free(j);
	return 1;
}

int compute_forget(struct compute *c, const char *run, size_t *results, long *files)
{
	struct job j = { .kind = JOB_FORGET };

	if (!(j.run = strdup(run)))
		return -ENOMEM;
	workq_remove_if(&c->q, job_of_run, (void *)run);
	/* first: what is queued after it must not see the run */
	workq_call(&c->q, &j.item);
	*results = j.results;
	*files = j.files;
	free(j.run);
	return j.rc;
}

int compute_fd(const struct compute *c)
{
	return workq_fd(&c->q);
}

struct result_batch *compute_take(struct compute *c)
{
	struct workq_item *i = workq_take(&c->q);
	return i ? workq_entry(i, struct result_batch, item) : NULL;
}

size_t compute_depth(struct compute *c)
{
	return workq_pending(&c->q);
}

void compute_spool(struct compute *c, struct spool_usage *u)
{
	u->bytes = c->spool_bytes;
	u->files = c->spool_files;
	u->dropped = c->retention_dropped;
}

/* Left at stop: what they stood for is in the WAL, and recomputed at the next start. */
static void drop_job(struct workq_item *item)
{
	job_free(workq_entry(item, struct job, item));
}

static void drop_batch(struct workq_item *item)
{
	struct result_batch *b = workq_entry(item, struct result_batch, item);
	result_batch_free(&b);
}

void compute_stop(struct compute **pc)
{
	struct compute *c = *pc;
	if (!c)
		return;
	workq_stop(&c->q, 0, drop_job, drop_batch);
	compare_workers_close(&c->workers);
	studies_free(c->studies, c->n_studies);
	spool_index_release(&c->spool);
	for (size_t i = 0; i < c->n_replayed; i++)
		free(c->replayed[i]);
	free(c->replayed);
	free(c->dir);
	free(c);
	*pc = NULL;
}
