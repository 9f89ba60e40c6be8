/* recover.c: the WAL replayed into the daemon's state at start-up (see recover.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alerts.h"
#include "compute.h"
#include "logging.h"
#include "records.h"
#include "recover.h"
#include "grow.h"
#include "spool_index.h"

/* Appends one note to *v; 0 or -ENOMEM (nothing is taken then). */
static int note(struct recovered **v, size_t *n, size_t *cap, struct recovered x)
{
	struct recovered *w = wd_grow(*v, *n, cap, sizeof(*w), 256);
	if (!w)
		return -ENOMEM;
	*v = w;
	(*v)[(*n)++] = x;
	return 0;
}

/* A result record: its payload kept for the drift logs, the runs it covers noted. */
static void replay_result(struct recovery *rc, const struct result_batch *b, const char *payload,
			  size_t len)
{
	if (rc->n_results == rc->cap_results) {
		size_t cap = rc->cap_results ? 2 * rc->cap_results : 64;
		char **v = realloc(rc->results, cap * sizeof(*v));
		if (!v)
			return;
		rc->results = v;
		rc->cap_results = cap;
	}
	if (!(rc->results[rc->n_results] = strndup(payload, len)))
		return;
	rc->n_results++;
	for (size_t i = 0; i < b->n_rows; i++) {
		const char *run = b->rows[i].run;
		const struct recovered *last = rc->n_covered ? &rc->covered[rc->n_covered - 1] : NULL;
		if (last && last->step == b->step && !strcmp(last->run, run) &&
		    !strcmp(last->study, b->study))
			continue;	/* the row before covers it already */
		struct recovered x = { strdup(b->study), strdup(run), b->step };
		if (!x.study || !x.run || note(&rc->covered, &rc->n_covered, &rc->cap_covered, x) < 0) {
			free(x.study);
			free(x.run);
			return;
		}
	}
}

/*
 * A "forget" record (runs rm) in the replay: the run's durable steps, its
 * rows in the results read so far (all of a result whose baseline it was),
 * and what those noted, as compute.c's forget_job did when it was written.
 */
static void replay_forget(struct recovery *rc, const char *run)
{
	struct run *r = state_run(rc->st, run, 0);
	size_t k = 0;

	if (r) {
		rc->st->count.snapshots_durable -= r->n_durable < rc->st->count.snapshots_durable ?
						   r->n_durable : rc->st->count.snapshots_durable;
		state_forget_run(rc->st, r);
	}
	state_note_removed(rc->st, run);
	if (rc->alerts)	/* those its "alert" records before this one restored */
		alerts_forget_run(rc->alerts, run, rc->cfg, 0, NULL);
	rc->n_results = record_results_without(rc->results, rc->n_results, run, NULL, NULL);
	for (size_t i = 0; i < rc->n_covered; i++) {
		const struct wd_config_study *st = NULL;
		for (size_t s = 0; s < rc->cfg->n_studies; s++)
			if (!strcmp(rc->cfg->studies[s].name, rc->covered[i].study))
				st = &rc->cfg->studies[s];
		if (!strcmp(rc->covered[i].run, run) || (st && !strcmp(st->baseline, run))) {
			free(rc->covered[i].study);
			free(rc->covered[i].run);
			continue;
		}
		rc->covered[k++] = rc->covered[i];
	}
	rc->n_covered = k;
	k = 0;
	for (size_t i = 0; i < rc->n_dropped; i++) {
		if (!strcmp(rc->dropped[i].run, run)) {
			free(rc->dropped[i].run);
			continue;
		}
		rc->dropped[k++] = rc->dropped[i];
	}
	rc->n_dropped = k;
}

int recover_record(void *ctx, const char *payload, size_t len)
{
	struct recovery *rc = ctx;
	struct record rec;
	struct run *r;
	char err[256];

	if (record_decode(payload, len, &rec, err, sizeof(err)) < 0) {
		log_warning("write-ahead log: a record skipped: %s", err);
		return 0;
	}
	switch (rec.kind) {
	case RECORD_SNAPSHOT:
		if ((r = state_run(rc->st, rec.run, 1))) {
			/* the identity: NULL in records older than it; such steps go unchecked */
			run_add_durable(r, rec.step, rec.id);
			rec.id = NULL;
			if (rec.at > r->durable_wall)
				r->durable_wall = rec.at;
			rc->st->count.snapshots_durable++;
		}
		break;
	case RECORD_RESULT:
		replay_result(rc, rec.batch, payload, len);
		break;
	case RECORD_DROP: {
		struct recovered x = { NULL, rec.run, rec.step };
		if (note(&rc->dropped, &rc->n_dropped, &rc->cap_dropped, x) == 0)
			rec.run = NULL;
		break;
	}
	case RECORD_EXPIRED:	/* a step refused incomplete: runs and drift say it again */
		if ((r = state_run(rc->st, rec.run, 1))) {
			struct run_expiry *e = run_note_expired(r, rec.step, rec.why, rec.at);
			if (e)
				e->replayed = 1;
		}
		break;
	case RECORD_CONFLICT:	/* a snapshot refused for other content: refused says it again */
		if ((r = state_run(rc->st, rec.run, 1)))
			run_note_conflict(r, rec.step, rec.at, rec.own);
		break;
	case RECORD_MIXED:	/* two jobs at once: its steps since are both jobs' */
		if ((r = state_run(rc->st, rec.run, 1)) && run_note_mixed(r, rec.step, rec.why, rec.at))
			r->mixed_replayed = 1;
		break;
	case RECORD_RERUN:	/* a re-run's session: its later steps are refused after a restart too */
		if ((r = state_run(rc->st, rec.run, 1))) {
			run_note_from_start(r, rec.session, rec.from);
			struct run_rerun *rr = run_rerun_of(r, rec.session);
			if (rr)
				rr->conflict = rec.step;
		}
		break;
	case RECORD_FORGET:	/* runs rm: what came before it of the run goes */
		replay_forget(rc, rec.run);
		break;
	case RECORD_ALERT:	/* the instances as an evaluation left them */
		if (rc->alerts)
			alerts_restore(rc->alerts, rec.alert);
		break;
	case RECORD_OTHER:	/* a later version's: skipped */
		break;
	}
	record_release(&rec);
	return 0;
}

void recover_done(struct recovery *rc)
{
	for (struct run *r = rc->st->runs, *next; r; r = next) {
		next = r->next;
		if (!r->n_durable && !r->expired)
			state_forget_run(rc->st, r);
	}
}

static int is_durable(void *ctx, const char *run, int64_t step)
{
	struct run *r = state_run(ctx, run, 0);
	return r && run_is_durable(r, step);
}

void recover_sweep(struct recovery *rc, const char *storage_dir, int force)
{
	spool_sweep(storage_dir, force, is_durable, rc->st);
}

/* Has run a logged result in study at baseline step step? */
static int is_covered(const struct recovery *rc, const char *study, const char *run, int64_t step)
{
	for (size_t i = 0; i < rc->n_covered; i++)
		if (rc->covered[i].step == step && !strcmp(rc->covered[i].run, run) &&
		    !strcmp(rc->covered[i].study, study))
			return 1;
	return 0;
}

/* Did retention remove run's spool file at step (a "drop" record)? */
static int is_dropped(const struct recovery *rc, const char *run, int64_t step)
{
	for (size_t k = 0; k < rc->n_dropped; k++)
		if (rc->dropped[k].step == step && !strcmp(rc->dropped[k].run, run))
			return 1;
	return 0;
}

/*
 * The baseline's durable step that run's step aligns to (spool_index.h's
 * rule), or -1: none within tol. Steps retention dropped count: the row
 * computed there before the drop covers the run's step (without them, a
 * restart computed it again at another step, or, with tolerance 0, at
 * none, every time).
 */
static int64_t baseline_step(const struct run *base, int64_t step, int64_t tol)
{
	int64_t best = -1, dist = tol + 1;

	for (size_t k = 0; base && k < base->n_durable; k++) {
		int64_t s = base->durable[k], d = s > step ? s - step : step - s;
		if (spool_nearer(s, d, best, dist)) {
			best = s;
			dist = d;
		}
	}
	return best;
}

/*
 * Snapshots the resume sends to the compute thread, of one kind: counted,
 * and the first few named, so that the start-up's line says which.
 */
struct resumed {
	size_t n, named;
	char some[400];
};

static void resumed_add(struct resumed *r, const char *study, const char *run, int64_t step)
{
	size_t at = strlen(r->some);

	r->n++;
	if (r->named == 3 || at >= sizeof(r->some) - 1)
		return;
	snprintf(r->some + at, sizeof(r->some) - at, "%s'%.80s' step %lld (study '%.60s')",
		 r->named ? ", " : "", run, (long long)step, study);
	r->named++;
}

/* "'fa' step 5 (study 'al'), ... and N more" */
static const char *resumed_some(struct resumed *r, char *buf, size_t size)
{
	if (r->n > r->named)
		snprintf(buf, size, "%s, and %zu more", r->some, r->n - r->named);
	else
		snprintf(buf, size, "%s", r->some);
	return buf;
}

/*
 * What the resume does with each durable step of each run: a run in two
 * studies is looked at once a study, but its snapshot is sent to compute
 * once (compute takes every study of the run) and counted once.
 */
enum { MARK_NONE, MARK_WAITS, MARK_REDO };
struct resume_mark {
	struct run *r;
	unsigned char *kind;		/* per durable step: MARK_*; NULL when out of memory */
	const char **study;		/* the study that set it, for the line */
};

static struct resume_mark *mark_of(struct resume_mark *m, size_t n, const struct run *r)
{
	for (size_t i = 0; i < n; i++)
		if (m[i].r == r)
			return &m[i];
	return NULL;
}

/* Step i of m's run needs kind in study: sent to compute the first time any study needs it. */
static void mark(struct compute *c, struct resume_mark *m, size_t i, int kind, const char *study)
{
	if (!m->kind || !m->study) {	/* no memory to remember: sent, as before */
		compute_submit(c, m->r->name, m->r->durable[i]);
		return;
	}
	if (m->kind[i] == MARK_NONE)
		compute_submit(c, m->r->name, m->r->durable[i]);
	if (kind > m->kind[i]) {
		m->kind[i] = (unsigned char)kind;
		m->study[i] = study;
	}
}

/*
 * Marks each of run's durable steps that has no logged result at the
 * baseline step it aligns to (a row within tol of it may be another
 * step's: a new user's trial found one never computed) MARK_REDO. A step
 * with no baseline step within tol is sent too, to wait there as it did:
 * MARK_WAITS, which is no failure to compute and is said as such.
 */
static void resume_run(struct recovery *rc, struct compute *c, const struct wd_config_study *st,
		       const char *run_name, int64_t tol, struct resume_mark *marks, size_t n_marks)
{
	struct run *x = state_run(rc->st, run_name, 0), *base = state_run(rc->st, st->baseline, 0);
	struct resume_mark *m = x ? mark_of(marks, n_marks, x) : NULL;

	for (size_t k = 0; m && k < x->n_durable; k++) {
		if (is_dropped(rc, x->name, x->durable[k]))
			continue;
		int64_t b = baseline_step(base, x->durable[k], tol);
		if (b < 0)
			mark(c, m, k, MARK_WAITS, st->name);
		else if (!is_covered(rc, st->name, x->name, b))
			mark(c, m, k, MARK_REDO, st->name);
	}
}

/*
 * A run with rows in a study, which the config names in no study now (a
 * change before this start took it out; a reload's mark, reconfigure.c, is
 * not kept across a restart): marked with the last such study, so that its
 * next snapshot is told that, not "did you mean" the name that took its
 * place (ingest.c), which may be the typo.
 */
static void runs_left(struct recovery *rc)
{
	for (size_t i = 0; i < rc->n_covered; i++) {
		const struct recovered *x = &rc->covered[i];
		struct run *r = x->study ? state_run(rc->st, x->run, 0) : NULL;
		if (!r || wd_config_study_naming(rc->cfg, r->name) ||
		    (r->left_study && !strcmp(r->left_study, x->study)))
			continue;
		char *was = strdup(x->study);
		if (!was)
			continue;	/* the plain notice */
		free(r->left_study);
		r->left_study = was;
		r->left_before_start = 1;
	}
}

/* Frees the notes (covered, dropped); the results stay. */
static void notes_release(struct recovery *rc)
{
	for (size_t k = 0; k < rc->n_dropped; k++)
		free(rc->dropped[k].run);
	free(rc->dropped);
	rc->dropped = NULL;
	rc->n_dropped = rc->cap_dropped = 0;
	for (size_t i = 0; i < rc->n_covered; i++) {
		free(rc->covered[i].study);
		free(rc->covered[i].run);
	}
	free(rc->covered);
	rc->covered = NULL;
	rc->n_covered = rc->cap_covered = 0;
}

void recover_resume(struct recovery *rc, struct compute *c)
{
	const struct wd_config *cfg = rc->cfg;
	int64_t tol = cfg->alignment.tolerance;
	struct resumed redo = { 0 }, waits = { 0 };
	char some[600];
	size_t n_marks = 0;
	struct resume_mark *marks = calloc(rc->st->n_runs + 1, sizeof(*marks));

	for (struct run *r = rc->st->runs; marks && r; r = r->next, n_marks++) {
		marks[n_marks].r = r;
		marks[n_marks].kind = calloc(r->n_durable + 1, 1);
		marks[n_marks].study = calloc(r->n_durable + 1, sizeof(*marks[n_marks].study));
	}
	if (!marks)
		log_err("compute: out of memory at start-up: the snapshots without logged results are not "
			"computed until they arrive again");

	for (struct run *r = rc->st->runs; r; r = r->next)
		for (size_t i = 0; i < r->n_durable; i++)
			if (!is_dropped(rc, r->name, r->durable[i]))	/* retention removed its file */
				compute_known(c, r->name, r->durable[i]);
	/* a crash between a "drop" record and its unlink leaves the file: remove it */
	for (size_t k = 0; k < rc->n_dropped; k++) {
		char path[4200];
		spool_path(path, sizeof(path), cfg->storage.dir, rc->dropped[k].run, rc->dropped[k].step);
		if (spool_remove(cfg->storage.dir, rc->dropped[k].run, rc->dropped[k].step) > 0)
			log_notice("retention: removed '%s', dropped before the restart", path);
	}
	/* a dropped snapshot is never computed again: its file is gone */
	for (size_t i = 0; i < cfg->n_studies; i++) {
		const struct wd_config_study *st = &cfg->studies[i];
		for (size_t k = 0; k < st->candidates.n; k++)
			resume_run(rc, c, st, st->candidates.names[k], tol, marks, n_marks);
		for (size_t k = 0; k < st->proxies.n; k++)
			resume_run(rc, c, st, st->proxies.v[k].run, tol, marks, n_marks);
		struct run *base = st->synthetic_proxy != WD_SYNTHETIC_NONE ?
				   state_run(rc->st, st->baseline, 0) : NULL;
		struct resume_mark *m = base ? mark_of(marks, n_marks, base) : NULL;
		const char *label = wd_config_synthetic_label(st->synthetic_proxy);
		for (size_t k = 0; m && k < base->n_durable; k++)
			if (!is_dropped(rc, base->name, base->durable[k]) &&
			    !is_covered(rc, st->name, label, base->durable[k]))
				mark(c, m, k, MARK_REDO, st->name);
	}
	for (size_t i = 0; i < n_marks; i++) {
		for (size_t k = 0; marks[i].kind && marks[i].study && k < marks[i].r->n_durable; k++)
			if (marks[i].kind[k] != MARK_NONE)
				resumed_add(marks[i].kind[k] == MARK_REDO ? &redo : &waits, marks[i].study[k],
					    marks[i].r->name, marks[i].r->durable[k]);
		free(marks[i].kind);
		free(marks[i].study);
	}
	free(marks);
	if (redo.n)
		log_notice("compute: %zu snapshot%s without logged results: computing them again: %s", redo.n,
			   redo.n == 1 ? "" : "s", resumed_some(&redo, some, sizeof(some)));
	if (waits.n)	/* as before the restart: said, since nothing will come of them until then */
		log_notice("compute: %zu snapshot%s with no baseline step within alignment.tolerance (%lld) "
			   "yet, waiting for one: %s", waits.n, waits.n == 1 ? "" : "s", (long long)tol,
			   resumed_some(&waits, some, sizeof(some)));
	runs_left(rc);
	notes_release(rc);
}

struct result_batch **recover_batches(const struct recovery *rc, size_t *n)
{
	struct result_batch **v = calloc(rc->n_results + 1, sizeof(*v));

	*n = 0;
	for (size_t i = 0; v && i < rc->n_results; i++)
		if ((v[*n] = record_result_decode(rc->results[i], strlen(rc->results[i]))))
			(*n)++;
	return v;
}

char **recover_take_results(struct recovery *rc, size_t *n)
{
	char **v = rc->results;

	*n = rc->n_results;
	rc->results = NULL;
	rc->n_results = rc->cap_results = 0;
	return v;
}

void recover_release(struct recovery *rc)
{
	for (size_t i = 0; i < rc->n_results; i++)
		free(rc->results[i]);
	free(rc->results);
	rc->results = NULL;
	rc->n_results = rc->cap_results = 0;
	notes_release(rc);
}
