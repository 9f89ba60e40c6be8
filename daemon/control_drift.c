/* control_drift.c: the `drift` request, checked and handed to the query thread (see control_internal.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "control.h"
#include "control_internal.h"
#include "identity.h"
#include "logging.h"
#include "query.h"
#include "result_batch.h"
#include "state.h"
#include "study_waiting.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/*
 * {RUN: STEP} as JSON: the step of each run with rows in b that its rows
 * compared, where alignment.tolerance took another than b's (the rule on
 * the snapshots held: study_run_step); NULL when none did.
 */
static char *run_steps(struct control *c, const struct drift_query *q, const struct result_batch *b)
{
	struct run *base = state_run(c->st, b->baseline, 0);
	json_t *o = c->cfg->alignment.tolerance > 0 && base ? json_object() : NULL;
	char *s = NULL;

	for (size_t k = 0; o && k < q->n_runs; k++) {
		struct run *r = result_batch_has_run(b, q->runs[k]) ? state_run(c->st, q->runs[k], 0) : NULL;
		int64_t x = r ? study_run_step(r, base, b->step, (int64_t)c->cfg->alignment.tolerance) : -1;
		if (x >= 0 && x != b->step)
			json_object_set_new(o, q->runs[k], json_integer((json_int_t)x));
	}
	if (o && json_object_size(o))
		s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return s;
}

/*
 * For each of q's candidates with rows in b, its tensors at its step there
 * that the baseline has in another shape (from the snapshots' identities):
 * their layers say it, where the unmatched line only counted them (a
 * trial's transposed weight read as a huge max|d|). 0, or -ENOMEM.
 */
static int reshaped(struct control *c, struct drift_query *q, const struct result_batch *b)
{
	struct run *base = state_run(c->st, b->baseline, 0);
	const struct snap_id *bid = base ? run_identity(base, b->step) : NULL;

	for (size_t k = 0; bid && k < q->n_candidates; k++) {
		struct run *r = result_batch_has_run(b, q->runs[k]) ? state_run(c->st, q->runs[k], 0) : NULL;
		int64_t x = r ? study_run_step(r, base, b->step, (int64_t)c->cfg->alignment.tolerance) : -1;
		const struct snap_id *id = x >= 0 ? run_identity(r, x) : NULL;
		if (!id || !id->n)
			continue;
		if (!q->reshaped && (!(q->reshaped = calloc(q->n_runs + 1, sizeof(*q->reshaped))) ||
				     !(q->n_reshaped = calloc(q->n_runs + 1, sizeof(*q->n_reshaped)))))
			return -ENOMEM;
		/* room for every tensor of it, and one walk: a second only to count cost as much */
		size_t extra;
		if (!(q->reshaped[k] = malloc(id->n * sizeof(uint64_t))))
			return -ENOMEM;
		if (!(q->n_reshaped[k] = identity_apart(bid, id, &extra, q->reshaped[k]))) {
			free(q->reshaped[k]);
			q->reshaped[k] = NULL;
		}
	}
	return 0;
}

/*
 * q's runs whose row at b's step never comes (study_never), as JSON into
 * q->never; where each was compared last is then no step to ask for (a
 * trial's expired step read as lagging). 0, or -ENOMEM.
 */
static int never(struct control *c, struct drift_query *q, const struct wd_config_study *st,
		 const struct result_batch *b)
{
	json_t *o = json_object();

	if (!o)
		return -ENOMEM;
	if (study_never(c->cfg, c->st, st, b, o, c->publishers, c->reload_ctx)) {
		for (size_t k = 0; q->latest && k < q->n_runs; k++)
			if (json_object_get(o, q->runs[k]))
				q->latest[k] = -1;
		q->never = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	}
	int failed = json_object_size(o) && !q->never;
	json_decref(o);
	return failed ? -ENOMEM : 0;
}

/* Whether b has rows of one of the study's candidates now. */
/*
 * Why the candidates have no rows at a later step, as far as the daemon
 * can tell: for each, whether a publisher of it is connected now (a job
 * that lags, or whose step is held up) or none is (its job ended, or has
 * not reconnected). "; 'fa' has ...", or ": the candidates lag, are held
 * up or ended" when the publishers are not known. A trial's could not
 * tell a candidate that lagged from one whose job had ended.
 */
static void later_why(const struct control *c, const struct wd_config_study *st, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	if (!c->publishers) {
		snprintf(buf, len, ": the candidates lag, are held up or ended");
		return;
	}
	for (size_t i = 0; i < st->candidates.n && at < len; i++) {
		const char *run = st->candidates.names[i];
		size_t n = c->publishers(c->reload_ctx, run);
		int k = n ? snprintf(buf + at, len - at, "; '%.100s' has %zu publisher%s connected: it lags, or its "
				     "step is held up", run, n, n == 1 ? "" : "s")
			  : snprintf(buf + at, len - at, "; '%.100s' has no publisher connected: its job ended, or has "
				     "not reconnected", run);
		if (k < 0)
			break;
		at += (size_t)k;
	}
}

static int has_candidate(const struct result_batch *b, const struct wd_config_study *st)
{
	for (size_t k = 0; k < st->candidates.n; k++)
		if (result_batch_has_run(b, st->candidates.names[k]))
			return 1;
	return 0;
}

/*
 * control_internal.h's: NULL when b has a candidate's rows; else the latest
 * kept batch before b's step, of its study and baseline, with a
 * candidate's rows, or NULL. With a synthetic proxy every baseline step has
 * results of its own, so that the latest one is often the baseline's alone
 * while its candidates lag (a trial's default view was "no candidate
 * compared at this step"). O(results x candidates), as drift_query_find_latest.
 */
struct result_batch *control_latest_compared(const struct control *c, const struct wd_config_study *st,
					      const struct result_batch *b)
{
	struct result_batch *best = NULL;

	if (has_candidate(b, st))
		return NULL;
	for (size_t i = c->n_results; i-- > 0;) {	/* the newest first: the rows are looked at once, mostly */
		struct result_batch *o = c->results[i];
		if (o->step < b->step && (!best || o->step > best->step) && !strcmp(o->study, b->study) &&
		    !strcmp(o->baseline, b->baseline) && has_candidate(o, st))
			best = o;
	}
	return best;
}

/*
 * drift: {"study", "step" or "latest"}. Checked and looked up here, on the
 * main thread, in time independent of the study's size but for the walks
 * over its runs' tensor identities (study_unmatched, reshaped: a
 * millisecond each at tens of thousands of tensors) and over their durable
 * steps and pending snapshots (study_never), and, with no step asked and
 * a latest step of the proxies' rows alone, over the kept results for a
 * candidate's (control_latest_compared); the reply, which
 * is not, is built by the query thread when there is one (env: whom it
 * goes to; NULL: build it here). Returns the reply, or NULL when the query
 * thread has it.
 */
char *control_drift(struct control *c, json_t *req, const struct query_envelope *env)
{
	const char *study = json_string_value(json_object_get(req, "study"));
	json_t *jglob = json_object_get(req, "tensors");
	const char *glob = json_string_value(jglob);
	json_t *jstep = json_object_get(req, "step");
	struct result_batch *b = NULL;
	const struct wd_config_study *st = NULL;

	if (!study)
		return control_fail("'drift' needs 'study'%s", "");
	for (size_t i = 0; i < c->cfg->n_studies; i++)
		if (!strcmp(c->cfg->studies[i].name, study))
			st = &c->cfg->studies[i];
	if (!st) {	/* the nearest, and the ones there are: a typo is then plain */
		char msg[600];
		wd_config_no_study(c->cfg, study, msg, sizeof(msg));
		return control_fail("%s", msg);
	}
	if (jstep && !json_is_integer(jstep))
		return control_fail("'step' must be an integer%s", "");
	char why[512];
	int64_t step = jstep ? json_integer_value(jstep) : 0;
	if (!(b = drift_query_find(c->results, c->n_results, study, st->baseline, jstep ? &step : NULL, why,
				   sizeof(why)))) {
		char wait[1400] = "";
		/* why nothing was compared, from the snapshots held */
		if (!jstep)
			study_waiting(c->cfg, c->st, st, wait, sizeof(wait));
		else
			study_waiting_step(c->cfg, c->st, st, step, wait, sizeof(wait));
		char msg[4096];
		/* a daemon started in another directory: its results are in the storage.dir it names (a trial's) */
		snprintf(msg, sizeof(msg), "%s%s%s%.2000s", why, wait, c->storage_note ? "; and " : "",
			 c->storage_note ? c->storage_note : "");
		return control_fail("%s", msg);
	}

	/* no step asked: the latest a candidate was compared at, the later ones said */
	struct result_batch *shown = jstep ? NULL : control_latest_compared(c, st, b);
	int64_t later = shown ? b->step : -1;
	if (shown)
		b = shown;
	struct drift_query q = { 0 };
	int ok = drift_query_init(&q, b, st, glob) == 0 &&
		 drift_query_find_latest(&q, c->results, c->n_results) == 0;
	if (ok && later >= 0) {
		char said[1400], cands[1000];
		later_why(c, st, cands, sizeof(cands));
		/* the command that shows it is the CLI's to add, with the -c it was given (lagging's too) */
		snprintf(said, sizeof(said), "step %lld, the latest with results, has no candidate's (its proxies' "
			 "rows alone%s): this is step %lld, the latest a candidate was compared at", (long long)later,
			 cands, (long long)b->step);
		ok = (q.later = strdup(said)) != NULL;
		q.later_step = later;
	}
	char silent[1400];
	/* the study's runs that sent nothing (a typo?): its rows cannot have them */
	if (ok && study_silent(c->cfg, c->st, st, b, silent, sizeof(silent)))
		ok = (q.silent = strdup(silent + 2)) != NULL;
	if (ok && study_refused(c->cfg, c->st, st, silent, sizeof(silent)))
		ok = (q.refused = strdup(silent)) != NULL;
	if (ok && study_mixed(c->cfg, c->st, st, silent, sizeof(silent)))
		ok = (q.mixed = strdup(silent)) != NULL;
	if (ok && study_expired(c->cfg, c->st, st, silent, sizeof(silent)))
		ok = (q.expired = strdup(silent)) != NULL;
	if (ok && study_ahead(c->cfg, c->st, st, silent, sizeof(silent)))
		ok = (q.ahead = strdup(silent)) != NULL;
	if (ok && study_stuck(c->cfg, c->st, st, silent, sizeof(silent)))
		ok = (q.stuck = strdup(silent)) != NULL;
	if (ok && study_unmatched(c->cfg, c->st, st, b, silent, sizeof(silent)))
		ok = (q.unmatched = strdup(silent)) != NULL;
	if (ok && study_unaligned(c->cfg, c->st, st, silent, sizeof(silent)))
		ok = (q.unaligned = strdup(silent)) != NULL;
	if (ok && (q.run_steps = run_steps(c, &q, b)))
		q.tolerance = (long long)c->cfg->alignment.tolerance;
	if (ok)
		ok = never(c, &q, st, b) == 0 && reshaped(c, &q, b) == 0;
	if (ok && env && c->query) {
		int r = query_submit(c->query, &q, env);
		if (r >= 0) {
			log_debug("control: drift '%s' step %lld: %zu rows: %s", b->study, (long long)b->step,
				  b->n_rows, r ? "joined the same query in progress" : "to the query thread");
			return NULL;
		}
		if (r == -EBUSY) {
			drift_query_release(&q);
			return control_fail("busy: %s drift queries are being answered; try again shortly",
				    STR(QUERY_QUEUE_MAX));
		}
	}
	size_t len;
	char *out = ok ? drift_query_reply(&q, &len) : NULL;
	drift_query_release(&q);
	return out ? out : control_fail("out of memory%s", "");
}
