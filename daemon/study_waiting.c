/* study_waiting.c: why a study has no results yet (see study_waiting.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commit_ranks.h"
#include "identity.h"
#include "ingest.h"
#include "logging.h"
#include "spool_index.h"
#include "study_waiting.h"
#include "utf8.h"

/* How far apart two steps are. */
static inline int64_t gap(int64_t a, int64_t b)
{
	return a > b ? a - b : b - a;
}

/* step + tol (tol >= 0), INT64_MAX past it: a step near the top would overflow (a review) */
static inline int64_t upto(int64_t step, int64_t tol)
{
	return step > INT64_MAX - tol ? INT64_MAX : step + tol;
}

/* Has any step of a one within tol of a step of b? Both ascending: one merge-like walk. */
static int any_aligned(const int64_t *a, size_t na, const int64_t *b, size_t nb, int64_t tol)
{
	for (size_t i = 0, j = 0; i < na && j < nb;) {
		if (gap(a[i], b[j]) <= tol)
			return 1;
		if (a[i] < b[j])
			i++;
		else
			j++;
	}
	return 0;
}

/* Appends to buf, whose length is *at; what does not fit is cut. */
__attribute__((format(printf, 4, 5)))
static void add(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
	va_list ap;

	if (*at >= len)
		return;
	va_start(ap, fmt);
	int w = vsnprintf(buf + *at, len - *at, fmt, ap);
	va_end(ap);
	*at += w < 0 ? 0 : (size_t)w;
}

int study_near_run(const struct wd_config *cfg, struct state *st, const char *run, char *best,
		   size_t size, const char **owner)
{
	const char *tie, *near = state_run_suggest(st, run, &tie);

	*owner = NULL;
	if (!near)
		return 0;
	/*
	 * Of two as near, the run in no study: the likelier typo (a trial's
	 * proxy 'st2-bf', published as 'st2-fb', was said near 'st-bf', another
	 * study's proxy, as near in edits).
	 */
	if (tie && wd_config_study_naming(cfg, near) && !wd_config_study_naming(cfg, tie))
		near = tie;
	snprintf(best, size, "%s", near);
	for (size_t i = 0; i < cfg->n_studies && !*owner; i++)
		if (wd_study_role(&cfg->studies[i], best, NULL))
			*owner = cfg->studies[i].name;
	return 1;
}

/*
 * "; WHO 'run' has no snapshot yet", with the run of a near name that has
 * some: a typo's likelier target when no study names it (field: the key
 * of the study that would hold the typo), else a question, since that run
 * may be another study's and this one not started yet.
 */
static void say_silent(const struct wd_config *cfg, struct state *st, const char *who, const char *run,
		       const char *field, const struct wd_config_study *s, const struct result_batch *shown,
		       char *buf, size_t len, size_t *at)
{
	char best[512];	/* a longer name is cut: it is only said */
	const char *owner;
	const struct run *r = state_run(st, run, 0);
	const struct run_expiry *e = r ? run_last_expiry(r) : NULL;

	if (state_removed(st, run))	/* on purpose: no typo to guess at */
		add(buf, len, at, "; %s '%s' has no snapshot since `wdrift runs rm %s` forgot its own: it "
		    "sends again, or a reload takes it out of the study", who, run, run);
	else if (e)
		/*
		 * it sent, and was refused: no typo (a trial's dead rank's run was
		 * offered another name). Said whole: this is also said where no
		 * expired line is (drift's "no results yet")
		 */
		add(buf, len, at, "; %s '%s' has no snapshot stored: what it sent was refused, %llu step%s that "
		    "expired incomplete (the latest, step %lld: a rank that died?)", who, run,
		    (unsigned long long)r->n_expiries, r->n_expiries == 1 ? "" : "s",
		    (long long)e->step);
	else if (r && r->conflicts)
		add(buf, len, at, "; %s '%s' has no snapshot stored: what it sent was refused, %llu snapshot%s "
		    "as conflicts (the latest, step %lld)", who, run, (unsigned long long)r->conflicts,
		    r->conflicts == 1 ? "" : "s", (long long)r->conflict_step);
	else if (!study_near_run(cfg, st, run, best, sizeof(best), &owner) || (s && wd_study_role(s, best, NULL)))
		/* a run of this study is no typo of another of its runs (a trial's candidate, of its baseline) */
		add(buf, len, at, "; %s '%s' has no snapshot yet", who, run);
	else if (shown && s && !wd_study_role(s, best, NULL) && result_batch_has_run(shown, best))
		/* its rows beside: this study's own before a reload, whoever else names it (as the reload said) */
		add(buf, len, at, "; %s '%s' has no snapshot: did you mean '%s', its %s before a reload, "
		    "which has some (a typo in the study's %s)?", who, run, best, who, field);
	else if (owner)
		add(buf, len, at, "; %s '%s' has no snapshot yet, and '%s' (a run of study '%s') has some: "
		    "a typo, or has '%s' not sent yet?", who, run, best, owner, run);
	else
		add(buf, len, at, "; %s '%s' has no snapshot: did you mean '%s', which has some (a typo in "
		    "the study's %s)?", who, run, best, field);
}

int study_run_silent(struct state *st, const char *run)
{
	struct run *r = state_run(st, run, 0);

	return !r || !r->n_durable;
}

size_t study_silent(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		    const struct result_batch *shown, char *buf, size_t len)
{
	size_t at = 0, n = 0;

	buf[0] = 0;
	if (study_run_silent(st, s->baseline) && ++n)
		say_silent(cfg, st, "its baseline", s->baseline, "baseline", s, NULL, buf, len, &at);
	for (size_t k = 0; k < s->candidates.n + s->proxies.n; k++) {
		int cand = k < s->candidates.n;
		const char *name = cand ? s->candidates.names[k] : s->proxies.v[k - s->candidates.n].run;
		if (!study_run_silent(st, name) || ++n > 3)	/* the fourth and later only counted: it must fit */
			continue;
		say_silent(cfg, st, cand ? "candidate" : "proxy", name, cand ? "candidates" : "proxies", s,
			   shown, buf, len, &at);
	}
	if (n > 3)
		add(buf, len, &at, "; and %zu more runs with none", n - 3);
	return n;
}

/* r's role, said: "candidate", "proxy fp16", "in no study" (st NULL: the first study naming it). */
static void run_role(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
		     char *buf, size_t len)
{
	const char *label = NULL, *role;

	if (!st)
		st = wd_config_study_naming(cfg, r->name);
	role = st ? wd_study_role(st, r->name, &label) : NULL;
	snprintf(buf, len, "%s%s%s", role ? role : "in no study", label ? " " : "", label ? label : "");
}

int run_refused(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
		char *buf, size_t len)
{
	char when[48], role[512];
	size_t at = 0;

	buf[0] = 0;
	if (!r->conflicts)
		return 0;
	run_role(cfg, st, r, role, sizeof(role));
	wall_said(r->conflict_wall, when, sizeof(when));
	if (r->mixed) {	/* not a re-run: each step holds the job that sent it first */
		add(buf, len, &at, "'%s' (%s): %llu snapshot%s refused as conflicts (other "
		    "content at a step it has), the latest step %lld%s: two jobs published it at once (the mixed "
		    "line), and each step holds what the first of them to send it sent", r->name, role,
		    (unsigned long long)r->conflicts, r->conflicts == 1 ? "" : "s", (long long)r->conflict_step,
		    when);
		return 1;
	}
	if (r->conflicts_own == r->conflicts) {	/* not a re-run: the job's step count went back */
		add(buf, len, &at, "'%s' (%s): %llu snapshot%s refused as conflicts (other content at a step it "
		    "has), the latest step %lld%s, from the job that had published it before: does its step "
		    "count go back, an epoch's reset? Give each snapshot the global step. Its rows are of the "
		    "snapshots stored first", r->name, role, (unsigned long long)r->conflicts,
		    r->conflicts == 1 ? "" : "s", (long long)r->conflict_step, when);
		return 1;
	}
	add(buf, len, &at, "'%s' (%s): %llu snapshot%s refused as conflicts (other content at a step it "
	    "has, or a re-run's later step), the latest step %lld%s: a re-run under the same name? Its rows are of "
	    "the snapshots stored first (the first job's, which runs rm protects while it runs); for the "
	    "re-run's instead, stop every job still publishing it (`wdrift runs` counts them), `wdrift runs rm "
	    "%s`, and start the re-run again", r->name,
	    role, (unsigned long long)r->conflicts, r->conflicts == 1 ? "" : "s",
	    (long long)r->conflict_step, when, r->name);
	return 1;
}

int run_mixed(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
	      char *buf, size_t len)
{
	char when[48], role[512], times[64] = "";
	size_t at = 0;

	buf[0] = 0;
	if (!r->mixed)
		return 0;
	run_role(cfg, st, r, role, sizeof(role));
	wall_said(r->mixed_wall, when, sizeof(when));
	/* a job beside another seen again: a reconnect, or a third job; the first may be a replayed record's */
	uint64_t seen = r->mixed - (r->mixed_replayed ? 1 : 0);
	if (seen > (r->mixed_replayed ? 0 : 1))
		snprintf(times, sizeof(times), "; seen %llu time%s since this start", (unsigned long long)seen,
			 seen == 1 ? "" : "s");
	add(buf, len, &at, "'%s' (%s): 2 jobs published it at once, each as its only rank, from step %lld%s "
	    "(%s%s): its steps since are both jobs', which nothing tells apart. To keep one job's: stop the "
	    "other, `wdrift runs rm %s`, and start the run again (or under another name)",
	    r->name, role, (long long)r->mixed_step, when, r->mixed_who, times, r->name);
	return 1;
}

int run_expired(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
		char *buf, size_t len)
{
	const struct run_expiry *e = run_last_expiry(r);
	char when[48], role[512];
	size_t at = 0;

	buf[0] = 0;
	/* a re-send of that step made it durable since: "never durable" would be false */
	if (!e || run_is_durable(r, e->step))
		return 0;
	run_role(cfg, st, r, role, sizeof(role));
	wall_said(e->wall, when, sizeof(when));
	add(buf, len, &at, "'%s' (%s): %llu step%s expired incomplete, never durable, the "
	    "latest step %lld%s (%s)", r->name, role, (unsigned long long)r->expired, r->expired == 1 ? "" : "s",
	    (long long)e->step, when, e->why);
	return 1;
}

/* run_expired while it is r's latest news: no step of r durable after the one that expired. */
static int expired_now(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
		       char *buf, size_t len)
{
	const struct run_expiry *e = run_last_expiry(r);

	buf[0] = 0;
	if (e && run_durable_upto(r, e->step) < r->n_durable)
		return 0;
	return run_expired(cfg, st, r, buf, len);
}

/*
 * "'fa' (candidate): its step 8 expired incomplete at ..., never durable
 * (why), and it has a later step (9): no row of it at this step unless its
 * job sends that step again": expiry e of r, at a step asked for.
 */
static void expiry_at_step(const struct wd_config *cfg, const struct wd_config_study *s, const struct run *r,
			   const struct run_expiry *e, const char *later, char *buf, size_t len)
{
	char role[512], when[48];

	run_role(cfg, s, r, role, sizeof(role));
	wall_said(e->wall, when, sizeof(when));
	snprintf(buf, len, "'%s' (%s): its step %lld expired incomplete%s, never durable (%s)%s: no row of it at "
		 "this step unless its job sends that step again", r->name, role, (long long)e->step, when, e->why,
		 later);
}

/* "3 snapshots (steps 0 to 20)", "1 snapshot (step 40)": a run's durable steps, for a hint. */
static const char *snapshots_of(const struct run *r, char *out, size_t size)
{
	if (r->n_durable == 1)
		snprintf(out, size, "1 snapshot (step %lld)", (long long)r->durable[0]);
	else
		snprintf(out, size, "%zu snapshots (steps %lld to %lld)", r->n_durable, (long long)r->durable[0],
			 (long long)r->durable[r->n_durable - 1]);
	return out;
}

/* Each of study s's runs (its baseline, then those a step compares) that say(...) says, joined by "; ". */
static size_t study_runs_said(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
			      int (*say)(const struct wd_config *, const struct wd_config_study *,
					 const struct run *, char *, size_t),
			      char *buf, size_t len)
{
	const char *names[1 + WD_STUDY_STEP_RUNS_MAX];
	char one[2048];
	size_t at = 0, n = 0;

	/* the baseline, then the runs a step compares (the synthetic proxy's label is no run) */
	names[0] = s->baseline;
	size_t k = 1 + wd_study_step_runs(s, names + 1, WD_STUDY_STEP_RUNS_MAX);
	buf[0] = 0;
	for (size_t i = 0; i < k; i++) {
		struct run *r = state_run(st, names[i], 0);
		if (r && say(cfg, s, r, one, sizeof(one)))
			add(buf, len, &at, "%s%s", n++ ? "; " : "", one);
	}
	wd_utf8_scrub(buf);	/* a name cut at the end: JSON takes only whole characters (a review's) */
	return n;
}

size_t study_refused(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		     char *buf, size_t len)
{
	return study_runs_said(cfg, st, s, run_refused, buf, len);
}

size_t study_mixed(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   char *buf, size_t len)
{
	return study_runs_said(cfg, st, s, run_mixed, buf, len);
}

size_t study_expired(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		     char *buf, size_t len)
{
	return study_runs_said(cfg, st, s, expired_now, buf, len);
}

size_t study_ahead(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   char *buf, size_t len)
{
	const char *names[WD_STUDY_STEP_RUNS_MAX];
	struct run *base = state_run(st, s->baseline, 0);
	size_t at = 0, n = 0;
	char role[512];

	if (len)
		buf[0] = 0;
	if (!base || !base->n_durable)
		return 0;	/* study_waiting says that */
	int64_t last = base->durable[base->n_durable - 1], until = upto(last, cfg->alignment.tolerance);
	size_t k = wd_study_step_runs(s, names, WD_STUDY_STEP_RUNS_MAX);
	for (size_t i = 0; i < k; i++) {
		struct run *r = state_run(st, names[i], 0);	/* NULL: the synthetic proxy's label */
		if (!r || !r->n_durable || r->durable[r->n_durable - 1] <= until)
			continue;
		size_t first = run_durable_upto(r, until), past = r->n_durable - first;
		n++;
		if (!len)
			continue;	/* only counted */
		run_role(cfg, s, r, role, sizeof(role));
		if (past == 1)
			add(buf, len, &at, "%s'%s' (%s) has 1 snapshot past the latest step of baseline '%s', %lld "
			    "(step %lld)", n > 1 ? "; " : "", r->name, role, base->name, (long long)last,
			    (long long)r->durable[first]);
		else
			add(buf, len, &at, "%s'%s' (%s) has %zu snapshots past the latest step of baseline '%s', %lld "
			    "(steps %lld to %lld)", n > 1 ? "; " : "", r->name, role, past, base->name, (long long)last,
			    (long long)r->durable[first], (long long)r->durable[r->n_durable - 1]);
	}
	if (!n || !len)
		return n;
	/* the baseline's, named: "its" read as the candidate's (two trials) */
	if (base->durable_mono > 0)
		add(buf, len, &at, ": compared when the baseline sends those steps; the baseline's last snapshot "
		    "came %.0f s ago", now_mono() - base->durable_mono);
	else
		add(buf, len, &at, ": compared when the baseline sends those steps; the baseline has sent none "
		    "since this start");
	return n;
}

#define UNMATCHED_SAID_MAX 3	/* runs said by study_unmatched; the rest counted */

size_t study_unmatched(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		       const struct result_batch *b, char *buf, size_t len)
{
	const char *names[WD_STUDY_STEP_RUNS_MAX];
	struct run *base = state_run(st, b->baseline, 0);
	const struct snap_id *bid = base ? run_identity(base, b->step) : NULL;
	size_t at = 0, n = 0, k = wd_study_step_runs(s, names, WD_STUDY_STEP_RUNS_MAX);
	char role[512];
	int log_names = 0;	/* a run said without the compute thread's sentence: the log has it */

	buf[0] = 0;
	for (size_t i = 0; bid && i < k; i++) {
		struct run *r = result_batch_has_run(b, names[i]) ? state_run(st, names[i], 0) : NULL;
		int64_t x = r ? study_run_step(r, base, b->step, (int64_t)cfg->alignment.tolerance) : -1;
		const struct snap_id *id = x >= 0 ? run_identity(r, x) : NULL;
		size_t extra, reshaped;
		if (!id)
			continue;	/* written before identities were kept: nothing to tell */
		reshaped = identity_apart(bid, id, &extra, NULL);
		if ((!extra && !reshaped) || ++n > UNMATCHED_SAID_MAX)
			continue;	/* the fourth and later only counted: it must fit */
		run_role(cfg, s, r, role, sizeof(role));
		const char *note = result_batch_note_of(b, r->name);
		if (note && extra) {	/* the compute thread's words: the first names, a prefix ("module.") */
			add(buf, len, &at, "%s'%s' (%s) at its step %lld %s%s", n > 1 ? "; " : "", r->name, role,
			    (long long)x, note, reshaped ? "; and " : "");
			if (reshaped)
				add(buf, len, &at, "%zu tensor%s in another shape than the baseline's", reshaped,
				    reshaped == 1 ? "" : "s");
			continue;
		}
		log_names = 1;
		add(buf, len, &at, "%s'%s' (%s) at its step %lld has ", n > 1 ? "; " : "", r->name, role, (long long)x);
		if (extra)
			add(buf, len, &at, "%zu tensor%s that the baseline lacks, not compared%s", extra,
			    extra == 1 ? "" : "s", reshaped ? ", and " : "");
		if (reshaped)
			add(buf, len, &at, "%zu tensor%s in another shape than the baseline's: W1 compares the "
			    "values, but max|d| and rel L2 pair the elements in storage order (meaningless for "
			    "another layout, a transpose; empty for another count)", reshaped,
			    reshaped == 1 ? "" : "s");
	}
	if (n > UNMATCHED_SAID_MAX)
		add(buf, len, &at, "; and %zu more runs", n - UNMATCHED_SAID_MAX);
	if (log_names || n > UNMATCHED_SAID_MAX)
		add(buf, len, &at, "; the daemon's log names the first of each (compute: study '%s')", s->name);
	wd_utf8_scrub(buf);	/* a name cut at the end: JSON takes only whole characters */
	return n;
}

#define STUCK_SAID_MAX 3	/* snapshots said by study_stuck; the rest counted */
#define STUCK_LAG_QUIET_S 5.0	/* a lagging rank's step with no new element for this long is stuck */

size_t study_stuck(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   char *buf, size_t len)
{
	double t = now_mono(), timeout = (double)cfg->limits.pending_timeout;
	double after = ingest_lag_after(timeout);	/* as the lag line's */
	size_t at = 0, n = 0;
	char role[512], lag[240];

	if (len)
		buf[0] = 0;
	for (const struct snapshot *p = st->pending; p; p = p->next) {
		double idle = snapshot_idle(p, t);	/* what its expiry counts */
		/* one being stored, or refused, is no longer held up by its senders */
		if (!snapshot_pending(p) || p->committing)
			continue;
		/*
		 * Still arriving, or not long enough to be news. A rank said dead
		 * or lagging is news at once, unless elements of the step still
		 * come (a replacement rank streaming its part).
		 */
		if (idle < after && !(p->lag_said && idle >= STUCK_LAG_QUIET_S))
			continue;
		if (!wd_study_role(s, p->run->name, NULL))
			continue;
		if (++n > STUCK_SAID_MAX || !len)
			continue;	/* only counted */
		run_role(cfg, s, p->run, role, sizeof(role));
		add(buf, len, &at, "%s'%s' (%s) step %lld ", n > 1 ? "; " : "", p->run->name, role, (long long)p->step);
		char twice[96];
		if (commit_ranks_twice(p, twice, sizeof(twice)))	/* the likelier cause than a dead rank */
			add(buf, len, &at, "has %s (the same rank= given twice?), and ", twice);
		if (commit_ranks_not_yet(p, lag, sizeof(lag)))
			/* the log's word only once it is there (a trial's short pending_timeout expired first) */
			add(buf, len, &at, "waits for %s, %.0f s after the first commit of the %llu rank%s that did (a "
			    "rank that died or is stuck?%s)", lag, t - p->first_ranked, (unsigned long long)p->n_ranked,
			    p->n_ranked == 1 ? "" : "s", p->lag_said ? " the daemon's log says which" : "");
		else if (!p->n_waiters)
			add(buf, len, &at, "has had no commit, and no message for %.0f s (%zu tensor%s begun: a job "
			    "stopped or stuck in the middle of it?)", idle, p->n_tensors, p->n_tensors == 1 ? "" : "s");
		else
			add(buf, len, &at, "is incomplete, committed by %zu connection%s, and no element of it has "
			    "come for %.0f s (a rank stopped or stuck?)", p->n_waiters, p->n_waiters == 1 ? "" : "s",
			    idle);
		double left = timeout - idle;
		add(buf, len, &at, ": no row holds it until it is whole; it expires, never durable, in %.0f s "
		    "unless %s comes (limits.pending_timeout, %.0f s)", left > 0 ? left : 0,
		    p->n_waiters ? "a new element of it" : "a message of it", timeout);
	}
	if (n > STUCK_SAID_MAX && len)
		add(buf, len, &at, "; and %zu more (wdrift status: pending)", n - STUCK_SAID_MAX);
	if (len)
		wd_utf8_scrub(buf);	/* a name cut at the end: JSON takes only whole characters */
	return n;
}

size_t study_silent_count(struct state *st, const struct wd_config_study *s)
{
	size_t n = study_run_silent(st, s->baseline);

	for (size_t k = 0; k < s->candidates.n; k++)
		n += study_run_silent(st, s->candidates.names[k]);
	for (size_t k = 0; k < s->proxies.n; k++)
		n += study_run_silent(st, s->proxies.v[k].run);
	return n;
}

/*
 * "; candidate 'x' has 3 snapshots (...), none within alignment.tolerance
 * (0) of a step of the baseline's ..." for each run of s with snapshots of
 * which none aligns to a baseline step, the first two; the runs with
 * snapshots into *held; how many such runs. With reached, only the run's
 * steps up to the baseline's latest (and tolerance) count, and a run with
 * none there is left to study_ahead: the baseline may yet send its steps
 * (a review's run only ahead was told to need alignment.tolerance).
 */
static size_t say_apart(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
			const struct run *base, int reached, char *buf, size_t len, size_t *at, size_t *held)
{
	size_t apart = 0;
	int64_t tol = cfg->alignment.tolerance, until = upto(base->durable[base->n_durable - 1], tol);

	for (size_t k = 0; k < s->candidates.n + s->proxies.n; k++) {
		int cand = k < s->candidates.n;
		const char *name = cand ? s->candidates.names[k] : s->proxies.v[k - s->candidates.n].run;
		struct run *r = state_run(st, name, 0);
		if (!r || !r->n_durable)
			continue;
		(*held)++;
		size_t n = reached ? run_durable_upto(r, until) : r->n_durable;
		if ((reached && !n) || any_aligned(r->durable, n, base->durable, base->n_durable, tol))
			continue;
		if (++apart > 2)	/* the third and later only counted: the hint must fit */
			continue;
		char have[96], base_have[96];
		add(buf, len, at, "; %s '%s' has %s, none within alignment.tolerance (%lld) of a step of "
		    "the baseline's %s", cand ? "candidate" : "proxy", name, snapshots_of(r, have, sizeof(have)),
		    (long long)tol, snapshots_of(base, base_have, sizeof(base_have)));
	}
	if (apart > 2)
		add(buf, len, at, "; and %zu more runs", apart - 2);
	return apart;
}

size_t study_unaligned(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		       char *buf, size_t len)
{
	struct run *base = state_run(st, s->baseline, 0);
	size_t at = 0, held = 0, apart;

	buf[0] = 0;
	if (!base || !base->n_durable || !(apart = say_apart(cfg, st, s, base, 1, buf, len, &at, &held)))
		return 0;
	add(buf, len, &at, ": compared at no step until one is; runs saved at other steps than the "
	    "baseline's need alignment.tolerance (docs/daemon.md, \"Alignment\")");
	memmove(buf, buf + 2, strlen(buf + 2) + 1);	/* the first "; " */
	return apart;
}

int study_waiting(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		  char *buf, size_t len)
{
	struct run *base = state_run(st, s->baseline, 0);
	size_t at = 0, held = 0, apart = 0;

	buf[0] = 0;
	if (!base || !base->n_durable) {
		say_silent(cfg, st, "its baseline", s->baseline, "baseline", s, NULL, buf, len, &at);
		return 1;
	}
	apart = say_apart(cfg, st, s, base, 0, buf, len, &at, &held);
	if (apart)
		add(buf, len, &at, ": they wait for baseline steps near theirs; runs saved at other steps "
		    "need alignment.tolerance (docs/daemon.md, \"Alignment\")");
	else if (held)
		add(buf, len, &at, "; snapshots aligned to the baseline's are held: being compared (wdrift "
		    "status: queues)");
	else {	/* each of them, with the near name that has snapshots: a typo in a reload? */
		char each[1024];
		study_silent(cfg, st, s, NULL, each, sizeof(each));
		add(buf, len, &at, "; the baseline has %zu snapshot%s, and no candidate or proxy has any "
		    "yet%s", base->n_durable, base->n_durable == 1 ? "" : "s", each);
	}
	/* no run aligned to the baseline, and no synthetic proxy made from it: nothing to compare */
	return held == apart && s->synthetic_proxy == WD_SYNTHETIC_NONE;
}

/* Is bstep the baseline step that the run's step x belongs to (the alignment rule: spool_nearer)? */
static int belongs(const struct run *base, int64_t x, int64_t bstep)
{
	for (size_t i = 0; i < base->n_durable; i++) {
		int64_t b = base->durable[i];
		if (b != bstep && spool_nearer(b, gap(x, b), bstep, gap(x, bstep)))
			return 0;
	}
	return 1;
}

int64_t study_run_step(const struct run *r, const struct run *base, int64_t bstep, int64_t tol)
{
	int64_t best = -1, dist = INT64_MAX;

	for (size_t i = 0; r && i < r->n_durable; i++) {
		int64_t x = r->durable[i];
		if (gap(x, bstep) <= tol && spool_nearer(x, gap(x, bstep), best, dist) && belongs(base, x, bstep)) {
			best = x;
			dist = gap(x, bstep);
		}
	}
	return best;
}

int study_run_aligned(const struct run *r, const struct run *base, int64_t bstep, int64_t tol)
{
	return study_run_step(r, base, bstep, tol) >= 0;
}

/* The latest expiry kept of r at a step within tol of step, or NULL. */
static const struct run_expiry *expired_near(const struct run *r, int64_t step, int64_t tol)
{
	uint64_t kept = r->n_expiries < RUN_EXPIRED_KEPT ? r->n_expiries : RUN_EXPIRED_KEPT;

	for (uint64_t i = 0; r->expiries && i < kept; i++) {	/* the latest first */
		const struct run_expiry *e = &r->expiries[(r->n_expiries - 1 - i) % RUN_EXPIRED_KEPT];
		if (gap(e->step, step) <= tol)
			return e;
	}
	return NULL;
}

/* Has r a snapshot within tol of step held in intake (stuck says it, and it may yet come)? */
static int held_near(struct state *st, const struct run *r, int64_t step, int64_t tol)
{
	for (const struct snapshot *p = st->pending; p; p = p->next)
		if (p->run == r && snapshot_pending(p) && gap(p->step, step) <= tol)
			return 1;
	return 0;
}

/* ", and it has later steps (20 to 40)", ", and it has a later step (20)", or "": r's durable steps after `after`. */
static void later_steps(const struct run *r, int64_t after, char *out, size_t size)
{
	size_t first = run_durable_upto(r, after);

	if (first == r->n_durable)
		snprintf(out, size, "%s", "");
	else if (r->n_durable - first == 1)
		snprintf(out, size, ", and it has a later step (%lld)", (long long)r->durable[first]);
	else
		snprintf(out, size, ", and it has %zu later steps (%lld to %lld)", r->n_durable - first,
			 (long long)r->durable[first], (long long)r->durable[r->n_durable - 1]);
}

/* r's durable step within tol of step (which aligns to another baseline step, nearer), or -1. */
static int64_t near_elsewhere(const struct run *r, int64_t step, int64_t tol)
{
	for (size_t i = 0; tol > 0 && i < r->n_durable; i++)
		if (gap(r->durable[i], step) <= tol)
			return r->durable[i];
	return -1;
}

size_t study_never(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   const struct result_batch *b, json_t *never, size_t (*publishers)(void *ctx, const char *run),
		   void *ctx)
{
	const char *names[WD_STUDY_STEP_RUNS_MAX];
	struct run *base = state_run(st, b->baseline, 0);
	int64_t tol = (int64_t)cfg->alignment.tolerance, step = b->step;
	size_t n = 0, k = wd_study_step_runs(s, names, WD_STUDY_STEP_RUNS_MAX);
	char role[512], later[96], why[2048];

	if (!base || strcmp(b->baseline, s->baseline))
		return 0;	/* stale rows: nothing of the study's now is compared at them */
	for (size_t i = 0; i < k; i++) {
		struct run *r = result_batch_has_run(b, names[i]) ? NULL : state_run(st, names[i], 0);
		/* no snapshot (silent says it), one aligned (being compared), one held in intake (stuck) */
		if (!r || study_run_aligned(r, base, step, tol) || held_near(st, r, step, tol))
			continue;
		const struct run_expiry *e = expired_near(r, step, tol);
		if (!r->n_durable && !e)
			continue;	/* never sent (silent says it); one whose only step expired is said */
		int64_t x;
		later_steps(r, upto(step, tol), later, sizeof(later));
		/*
		 * None of its steps up to the baseline's latest aligns to one of
		 * the baseline's: it sends at other steps (as unaligned says; those
		 * past the baseline's latest are ahead's, and may yet align)
		 */
		size_t reached = run_durable_upto(r, upto(base->durable[base->n_durable - 1], tol));
		int apart = reached && !any_aligned(r->durable, reached, base->durable, base->n_durable, tol);
		/* none after it: it may lag, and come (lagging says where it is), unless its job is gone */
		int gone = !e && !later[0] && !apart && publishers && r->n_durable && r->durable[r->n_durable - 1] < step &&
			   !publishers(ctx, r->name);
		if (!e && !later[0] && !apart && !gone)
			continue;
		run_role(cfg, s, r, role, sizeof(role));
		if (gone) {
			snprintf(why, sizeof(why), "'%s' (%s): its latest snapshot is of step %lld, and no publisher of "
				 "it is connected now (its job has ended, or has not reconnected): nothing of it is on "
				 "its way to this step", r->name, role, (long long)r->durable[r->n_durable - 1]);
		} else if (e) {
			expiry_at_step(cfg, s, r, e, later, why, sizeof(why));
		} else if (apart) {
			snprintf(why, sizeof(why), "'%s' (%s): sends at other steps than the baseline's, none of its "
				 "snapshots at or within alignment.tolerance (%lld) of one (the unaligned line)%s: no row "
				 "of it at this step unless it sends one there", r->name, role, (long long)tol, later);
		} else if ((x = near_elsewhere(r, step, tol)) >= 0) {
			snprintf(why, sizeof(why), "'%s' (%s): its step %lld, within alignment.tolerance (%lld) of step "
				 "%lld, is compared at a nearer baseline step (docs/daemon.md, \"Alignment\")%s: no row "
				 "of it at this step unless it sends one nearer", r->name, role, (long long)x,
				 (long long)tol, (long long)step, later);
		} else {
			snprintf(why, sizeof(why), "'%s' (%s): sent no snapshot at or within alignment.tolerance (%lld) "
				 "of step %lld that became durable%s: no row of it at this step unless it sends one",
				 r->name, role, (long long)tol, (long long)step, later);
		}
		wd_utf8_scrub(why);	/* a name cut at the end: JSON takes only whole characters */
		json_object_set_new(never, r->name, json_string(why));
		n++;
	}
	return n;
}

void study_waiting_step(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
			int64_t step, char *buf, size_t len)
{
	struct run *base = state_run(st, s->baseline, 0);
	int64_t tol = cfg->alignment.tolerance;
	size_t at = 0, near = 0;

	buf[0] = 0;
	if (!base || !base->n_durable) {
		study_waiting(cfg, st, s, buf, len);
		return;
	}
	if (!run_is_durable(base, step)) {
		char have[96];
		add(buf, len, &at, "; the baseline '%s' has no snapshot at step %lld: it has %s, and rows are "
		    "made at the baseline's steps", s->baseline, (long long)step, snapshots_of(base, have, sizeof(have)));
		return;
	}
	/* durable, its file removed since: what waits for it waits for nothing (a trial was told "not compared yet") */
	char path[4200];
	if (spool_path(path, sizeof(path), cfg->storage.dir, s->baseline, step) == 0 &&
	    access(path, F_OK) != 0 && errno == ENOENT) {
		add(buf, len, &at, "; the baseline's snapshot at step %lld was removed by spool.retention "
		    "before it was compared with what came after ('%s' is gone; the daemon's log says "
		    "why): nothing is compared at this step now", (long long)step, path);
		return;
	}
	const char *runs[WD_STUDY_STEP_RUNS_MAX];
	size_t n = wd_study_step_runs(s, runs, WD_STUDY_STEP_RUNS_MAX), expired = 0;
	for (size_t k = 0; k < n; k++)	/* the synthetic proxy's label is no run: skipped */
		near += study_run_aligned(state_run(st, runs[k], 0), base, step, tol);
	/*
	 * A run whose step there expired (a rank that died): said, not blamed
	 * on alignment (a trial's study with no proxy had no row at the step)
	 */
	for (size_t k = 0; !near && k < n; k++) {
		struct run *r = state_run(st, runs[k], 0);
		const struct run_expiry *e = r ? expired_near(r, step, tol) : NULL;
		char one[2048];
		if (!e)
			continue;
		expiry_at_step(cfg, s, r, e, "", one, sizeof(one));
		add(buf, len, &at, "; %s", one);
		expired++;
	}
	if (expired)
		wd_utf8_scrub(buf);	/* a name cut at the end: the error goes as JSON */
	else if (near)
		add(buf, len, &at, "; the baseline and %zu of the study's runs have snapshots at or within "
		    "alignment.tolerance (%lld) of step %lld, not compared yet (wdrift status: queues)",
		    near, (long long)tol, (long long)step);
	else
		add(buf, len, &at, "; the baseline has a snapshot at step %lld, and no candidate or proxy "
		    "has one within alignment.tolerance (%lld) of it that aligns to it (a step aligns to the "
		    "nearest baseline step, and to the earlier of two as near: docs/daemon.md, "
		    "\"Alignment\")", (long long)step, (long long)tol);
}


/* run's role in old's study of that name, or NULL. */
static const char *role_before(const struct wd_config *old, const char *study, const char *run)
{
	for (size_t i = 0; i < old->n_studies; i++)
		if (!strcmp(old->studies[i].name, study))
			return wd_study_role(&old->studies[i], run, NULL);
	return NULL;
}

/* Is there a study of that name in cfg? */
static int has_study(const struct wd_config *cfg, const char *study)
{
	for (size_t i = 0; i < cfg->n_studies; i++)
		if (!strcmp(cfg->studies[i].name, study))
			return 1;
	return 0;
}

static void check_new_name(const struct wd_config *old, const struct wd_config *next,
			   const char *study, const char *role, const char *run, struct state *st,
			   json_t *list)
{
	struct run *r = state_run(st, run, 0);
	char msg[1400], best[512];
	const char *owner;

	if ((r && r->n_durable) || role_before(old, study, run) ||
	    !study_near_run(next, st, run, best, sizeof(best), &owner))
		return;
	/*
	 * The near run held this very part before and the study names it no
	 * more: the typo is plain, whoever else names it. (One still named, as
	 * a candidate added beside it, is no typo of it: asked, below.)
	 */
	const char *was = role_before(old, study, best);
	int same_part = was && !strcmp(was, role) && !role_before(next, study, best);
	/*
	 * A study added beside another, whose runs have not sent yet, has
	 * names near the other's ("al2-base", "al-base"): not said here, where
	 * each would be a line; `wdrift studies` and `drift` say it.
	 */
	if (owner && !same_part && !has_study(old, study))
		return;
	/* what the user sees meanwhile */
	const char *until = !strcmp(role, "baseline") ? "the study is not compared against it, and `wdrift "
			    "drift` shows its old rows as stale" : same_part && !strcmp(role, "candidate") ?
			    "the study has no rows of it, and `wdrift drift` shows the old candidate's rows as "
			    "former" : "the study has no rows of it";
	if (same_part)
		snprintf(msg, sizeof(msg), "study '%s': %s '%s' has no snapshot, and '%s', its %s before this "
			 "reload, has some: a typo? (until a run of that name sends, %s)", study, role, run, best,
			 role, until);
	else if (owner)
		snprintf(msg, sizeof(msg), "study '%s': %s '%s' has no snapshot, and '%s' (a run of study "
			 "'%s') has some: a typo, or has '%s' not sent yet? (until a run of that name "
			 "sends, %s)", study, role, run, best, owner, run, until);
	else
		snprintf(msg, sizeof(msg), "study '%s': %s '%s' has no snapshot, and '%s' has some: a "
			 "typo? (until a run of that name sends, %s)", study, role, run, best, until);
	log_warning("reload: %s", msg);
	json_array_append_new(list, json_string(msg));
}

void study_waiting_reload(const struct wd_config *old, const struct wd_config *next, struct state *st,
			  json_t *list)
{
	for (size_t i = 0; i < next->n_studies; i++) {
		const struct wd_config_study *s = &next->studies[i];
		check_new_name(old, next, s->name, "baseline", s->baseline, st, list);
		for (size_t k = 0; k < s->candidates.n; k++)
			check_new_name(old, next, s->name, "candidate", s->candidates.names[k], st, list);
		for (size_t k = 0; k < s->proxies.n; k++)
			check_new_name(old, next, s->name, "proxy", s->proxies.v[k].run, st, list);
	}
}
