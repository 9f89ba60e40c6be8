/* control.c: control requests to JSON replies, through jansson (see control.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "alerts.h"
#include "commit_ranks.h"
#include "control.h"
#include "control_internal.h"
#include "logging.h"
#include "query.h"
#include "config_file.h"
#include "study_waiting.h"
#include "result_batch.h"
#include "spool.h"
#include "ingest.h"
#include "rm_wait.h"
#include "state.h"
#include "utf8.h"

#define STR_(x) #x
#define STR(x) STR_(x)

char *control_dump(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s ? s : strdup("{\"v\":1,\"ok\":false,\"error\":\"out of memory\"}");
}

char *control_fail(const char *fmt, const char *arg)
{
	char msg[4096];	/* a drift error with its storage note */
	snprintf(msg, sizeof(msg), fmt, arg);
	return control_dump(json_pack("{s:i,s:b,s:s}", "v", 1, "ok", 0, "error", msg));
}

/*
 * Has study s results against its baseline now? Newest first: a study
 * that is compared finds one among the last few batches, so that only a
 * stuck one costs a scan of them all.
 */
int control_has_current_results(const struct control *c, const struct wd_config_study *s)
{
	for (size_t k = c->n_results; k-- > 0;)
		if (!strcmp(c->results[k]->study, s->name) && !strcmp(c->results[k]->baseline, s->baseline))
			return 1;
	return 0;
}

/*
 * The studies with no results against their baseline now (stuck, or not
 * yet sent to), and those with results of which a run now named has sent
 * nothing at all: a candidate a reload mistyped, whose study shows the old
 * candidate's rows.
 */
static json_t *studies_waiting(const struct control *c)
{
	json_t *none = json_array(), *silent = json_array();

	for (size_t i = 0; i < c->cfg->n_studies; i++) {
		const struct wd_config_study *s = &c->cfg->studies[i];
		if (!control_has_current_results(c, s))
			json_array_append_new(none, json_string(s->name));
		else if (study_silent_count(c->st, s))
			json_array_append_new(silent, json_string(s->name));
	}
	return json_pack("{s:I,s:o,s:o}", "configured", (json_int_t)c->cfg->n_studies, "no_results", none,
			 "runs_silent", silent);
}

/* The alert rules by state, for status (alerts_summary). */
struct alert_tally {
	json_t *firing, *pending;	/* {RULE: instances} */
	json_t *commands_failed;	/* {RULE: runs that failed since the start} */
	size_t rules;
	const struct wd_config_alert *last;
};

static void tally_one(void *ctx, const struct alert_view *v)
{
	struct alert_tally *t = ctx;

	if (v->rule != t->last) {
		t->rules++;
		t->last = v->rule;
		if (v->rule->command && v->commands_failed)	/* a pager that fails: alerts that reach no one */
			json_object_set_new(t->commands_failed, v->rule->name,
					    json_integer((json_int_t)v->commands_failed));
	}
	json_t *into = v->state == 2 ? t->firing : v->state == 1 ? t->pending : NULL;
	if (!into || !v->run)
		return;
	json_int_t n = json_integer_value(json_object_get(into, v->rule->name));
	json_object_set_new(into, v->rule->name, json_integer(n + 1));
}

/*
 * The alert rules, and those firing or pending with how many instances:
 * status is the daemon's view, and said nothing of alerts (two trials).
 */
static json_t *alerts_summary(const struct control *c)
{
	struct alert_tally t = { json_object(), json_object(), json_object(), 0, NULL };

	if (c->alerts && t.firing && t.pending && t.commands_failed)
		alerts_each(c->alerts, tally_one, &t);
	return json_pack("{s:I,s:o,s:o,s:o}", "rules", (json_int_t)t.rules, "firing", t.firing ? t.firing : json_object(),
			 "pending", t.pending ? t.pending : json_object(), "commands_failed",
			 t.commands_failed ? t.commands_failed : json_object());
}

#define STATUS_PENDING_MAX 8	/* snapshots named in status: the longest waiting */

/*
 * The snapshots being received, the longest idle first (at most
 * STATUS_PENDING_MAX; "more" counts the rest): run, step, seconds since
 * its last message, commits waiting (ranks, or a rank again on a new
 * connection), how many of those connections have closed since (a rank
 * that died, or one that reconnected and committed again: an ops trial
 * read a dead rank's commit as a connection waiting), and what it lacks.
 * A trial's job waited on a dead rank while status said only "1 pending".
 */
static json_t *pending_snapshots(const struct control *c)
{
	const struct state *s = c->st;
	const struct snapshot *top[STATUS_PENDING_MAX];
	size_t n = 0, more = 0;
	double t = now_mono();

	for (const struct snapshot *p = s->pending; p; p = p->next) {
		if (!snapshot_pending(p))
			continue;
		size_t at = n;	/* insertion by idle time, longest first */
		while (at > 0 && top[at - 1]->last_seen > p->last_seen)
			at--;
		if (at == STATUS_PENDING_MAX) {
			more++;
			continue;
		}
		if (n == STATUS_PENDING_MAX)
			more++;
		else
			n++;
		memmove(&top[at + 1], &top[at], (n - 1 - at) * sizeof(*top));
		top[at] = p;
	}
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct snapshot *p = top[i];
		char why[400];
		if (p->committing)
			snprintf(why, sizeof(why), "complete, being stored");
		else if (!p->want)
			snprintf(why, sizeof(why), "no commit yet: %zu tensors begun", p->n_tensors);
		else if (ingest_snapshot_complete(p, p->want, why, sizeof(why)))
			snprintf(why, sizeof(why), "complete, being stored");
		char ranks[440];
		json_t *o = json_pack("{s:s,s:I,s:f,s:I,s:s}", "run", p->run->name, "step", (json_int_t)p->step,
				      "idle", t - p->last_seen, "commits", (json_int_t)p->n_waiters, "waiting", why);
		/* the ranks that committed and those not yet, when their commits gave them */
		if (o && commit_ranks_seen(p, ranks, sizeof(ranks)))
			json_object_set_new(o, "ranks", json_string(ranks));
		size_t closed = 0;
		for (size_t w = 0; c->connected && w < p->n_waiters; w++)
			closed += !c->connected(c->reload_ctx, p->waiters[w].id, p->waiters[w].len);
		if (o && c->connected)
			json_object_set_new(o, "commits_closed", json_integer((json_int_t)closed));
		json_array_append_new(list, o);
	}
	return json_pack("{s:o,s:I}", "snapshots", list, "more", (json_int_t)more);
}

static json_t *status(struct control *c)
{
	struct state *s = c->st;
	json_t *errors = json_object();
	size_t pending = state_pending(s);

	for (int k = 1; k < WIRE_CODE_COUNT; k++)
		json_object_set_new(errors, wire_code_name((enum wire_code)k),
				    json_integer((json_int_t)s->count.errors[k]));
	const struct auth_counters *au = &s->count.auth;
	json_t *auth = json_pack("{s:s,s:I,s:I,s:{s:I,s:I,s:I,s:I}}",
		"mechanism", c->cfg->auth.server_key ? "curve" : "null",
		"clients", (json_int_t)c->cfg->auth.clients.n,
		"accepted", (json_int_t)au->accepted,
		"refused", "unknown_key", (json_int_t)au->unknown_key,
			   "no_curve", (json_int_t)au->no_curve,
			   "bad_server_key", (json_int_t)au->bad_server_key,
			   "other", (json_int_t)au->other);
	json_t *out = json_pack("{s:i,s:b,s:s,s:f,s:s,s:s,s:s,s:I,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I},s:o,"
			 "s:{s:I,s:I},s:{s:I,s:I,s:I,s:I,s:I,s:I},s:I,s:o}",
		"v", 1, "ok", 1, "version", WDRIFT_VERSION, "uptime", now_mono() - s->started,
		"engine", c->engine, "config", c->cfg->source,
		"storage", c->storage ? c->storage : c->cfg->storage.dir,
		"runs", (json_int_t)s->n_runs,
		"snapshots", "received", (json_int_t)s->count.commits,
			     "dropped", (json_int_t)s->count.dropped,
			     "dropped_for_room", (json_int_t)s->count.dropped_for_room,
			     "conflicts", (json_int_t)s->count.conflicts,
			     "pending", (json_int_t)pending,
			     "durable", (json_int_t)s->count.snapshots_durable,
			     "duplicates", (json_int_t)s->count.duplicates,
			     "duplicate_tensors", (json_int_t)s->count.duplicate_tensors,
			     "tensors", (json_int_t)s->count.tensors,
			     "messages", (json_int_t)s->count.messages,
			     "bytes", (json_int_t)s->count.bytes_received,
		"errors", errors,
		"queues", "spool", (json_int_t)(c->spool ? spool_depth(c->spool) : 0),
			  "compute", (json_int_t)c->compute_depth,
		"memory", "reserved", (json_int_t)s->reserved, "budget", (json_int_t)s->budget,
			  "kept", (json_int_t)s->kept.bytes, "kept_reused", (json_int_t)s->kept.reused,
			  "kept_freed", (json_int_t)s->kept.freed,
			  "engine_spares", (json_int_t)wd_engine_spare_bytes(),
		"spool_failures", (json_int_t)s->count.spool_failures,
		"auth", auth);
	if (c->storage_note)
		json_object_set_new(out, "storage_note", json_string(c->storage_note));
	json_object_set_new(out, "studies", studies_waiting(c));
	json_object_set_new(out, "alerts", alerts_summary(c));
	json_object_set_new(out, "pending_snapshots", pending_snapshots(c));
	/* what "durable" does not say: retention may have removed a durable snapshot's file since */
	json_object_set_new(out, "spool", json_pack("{s:I,s:I,s:I,s:I}",
		"bytes", (json_int_t)c->spool_usage.bytes, "files", (json_int_t)c->spool_usage.files,
		"disk_budget", (json_int_t)c->cfg->spool.retention.disk_budget,
		"dropped_by_retention", (json_int_t)c->spool_usage.dropped));
	char why[1400];
	const char *differs = c->config_file ? config_file_pending(c->config_file, why, sizeof(why)) : NULL;
	json_object_set_new(out, "config_pending", differs ? json_string(differs) : json_null());
	return out;
}

/*
 * The run's part in each study of the config: [{"study", "role"}], role
 * "baseline", "candidate" or "proxy LABEL"; an empty list when none.
 */
static json_t *run_studies(const struct wd_config *cfg, const char *run)
{
	json_t *list = json_array();
	char role[300];

	for (size_t i = 0; i < cfg->n_studies; i++) {
		const char *label = NULL, *part = wd_study_role(&cfg->studies[i], run, &label);
		if (!part)
			continue;
		snprintf(role, sizeof(role), "%s%s%s", part, label ? " " : "", label ? label : "");
		json_array_append_new(list, json_pack("{s:s,s:s}", "study", cfg->studies[i].name, "role", role));
	}
	return list;
}

/*
 * A reply that lists what the daemon holds, with the storage note (main.c:
 * started in another directory, its relative storage.dir new here) when
 * there is one: an empty list there read as every run lost (a trial's
 * `runs` and `studies` said nothing of it, where status and drift did).
 */
static json_t *with_storage_note(const struct control *c, json_t *reply)
{
	if (reply && c->storage_note)
		json_object_set_new(reply, "storage_note", json_string(c->storage_note));
	return reply;
}

static json_t *runs(struct control *c)
{
	json_t *list = json_array();
	double t = now_mono();

	for (struct run *r = c->st->runs; r; r = r->next) {
		json_t *in = run_studies(c->cfg, r->name);
		json_t *first = json_array_get(in, 0);
		char refused[2048];
		/* last_seen 0: known from the WAL alone, not heard from since the start */
		json_t *o = json_pack("{s:s,s:I,s:o,s:o,s:I,s:s,s:o,s:I}",
			"name", r->name, "durable", (json_int_t)r->n_durable,
			"last_step", r->n_durable ? json_integer(r->durable[r->n_durable - 1]) : json_null(),
			"idle", r->last_seen ? json_real(t - r->last_seen) : json_null(),
			"bytes_pending", (json_int_t)r->bytes_pending,
			"role", first ? json_string_value(json_object_get(first, "role")) : "none",
			"studies", in, "conflicts", (json_int_t)r->conflicts);
		/* in no study: stored, never compared; the near name, as its job's welcome said (a trial) */
		if (o && !first && ingest_no_study(c->cfg, c->st, r->name, refused, sizeof(refused))) {
			wd_utf8_scrub(refused);
			json_object_set_new(o, "no_study", json_string(refused));
		}
		/* a live job's: what runs rm refuses for */
		if (o && c->publishers)
			json_object_set_new(o, "publishers", json_integer((json_int_t)c->publishers(c->reload_ctx,
												      r->name)));
		/* two jobs at once, each as the only rank: their steps interleave (peers.h) */
		char who[400];
		size_t jobs = o && c->jobs ? c->jobs(c->reload_ctx, r->name, who, sizeof(who)) : 0;
		if (jobs > 1) {
			char mixed[800];
			snprintf(mixed, sizeof(mixed), "'%.200s': %zu jobs publish it at once, each as its only "
				 "rank (%s): their steps interleave in the run; stop the one started by mistake",
				 r->name, jobs, who);
			json_object_set_new(o, "jobs", json_integer((json_int_t)jobs));
			json_object_set_new(o, "mixed", json_string(mixed));
		} else if (o && run_mixed(c->cfg, NULL, r, refused, sizeof(refused))) {
			/* they ended, and the run still holds both jobs' steps */
			json_object_set_new(o, "mixed", json_string(refused));
		}
		if (o && r->mixed)	/* the first time: its steps since are both jobs' */
			json_object_set_new(o, "mixed_at", json_real(r->mixed_wall));
		if (o && run_refused(c->cfg, NULL, r, refused, sizeof(refused))) {
			json_object_set_new(o, "refused", json_string(refused));
			json_object_set_new(o, "conflict_at", json_real(r->conflict_wall));
		}
		/* steps refused incomplete: a rank that died (the study's drift says it while current) */
		if (o && run_expired(c->cfg, NULL, r, refused, sizeof(refused))) {
			json_object_set_new(o, "expired", json_string(refused));
			json_object_set_new(o, "expired_steps", json_integer((json_int_t)r->expired));
			json_object_set_new(o, "expired_step", json_integer((json_int_t)run_last_expiry(r)->step));
			json_object_set_new(o, "expired_at", json_real(run_last_expiry(r)->wall));
		}
		json_array_append_new(list, o);
	}
	return with_storage_note(c, json_pack("{s:i,s:b,s:o}", "v", 1, "ok", 1, "runs", list));
}

/*
 * The reply to runs rm of run, forget's result r, after waiting wait
 * seconds for its publishers (0: none). A refusal is logged here, once per
 * request, however often a waiting one was asked again.
 */
static char *rm_reply(const char *run, int r, const struct forgotten *gone, const char *err, double wait)
{
	char msg[1400];

	if (r >= 0) {
		json_t *o = json_pack("{s:i,s:b,s:s,s:I,s:I,s:I,s:I,s:I}", "v", 1, "ok", 1, "run", run,
				      "steps", (json_int_t)gone->steps, "results", (json_int_t)gone->results,
				      "alerts", (json_int_t)gone->alerts, "alerts_firing", (json_int_t)gone->firing,
				      "publishers", (json_int_t)gone->publishers);
		if (o && gone->received)	/* --force: steps a dead rank held up, dropped */
			json_object_set_new(o, "received_dropped", json_integer((json_int_t)gone->received));
		if (o && gone->publishers)	/* --force under live jobs: who goes on sending */
			json_object_set_new(o, "publishers_who", json_string(gone->publishers_who));
		return control_dump(o);
	}
	snprintf(msg, sizeof(msg), "%s", err);
	if (wait > 0 && r == -EAGAIN)	/* a job exiting may take longer */
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (still so after %.3g s of waiting; "
			 "--wait SECONDS waits longer for a job that is exiting)", wait);
	else if (wait > 0 && r == -EBUSY)	/* a step: its own words say what ends the wait */
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (still so after %.3g s of waiting)", wait);
	log_notice("runs rm: refused: %s", msg);	/* what the operator was told, for the record */
	return control_fail("%s", msg);
}

/*
 * runs_rm: {"run", "force", "wait"}: the run forgotten, so that its name is
 * free again. While a publisher of it is connected (unless force), or a
 * snapshot of it is being received or stored, the request waits up to
 * "wait" seconds, then is answered "again" once that has ended, or refused
 * (rm_wait.h).
 */
static char *runs_rm(struct control *c, json_t *req, const struct query_envelope *env)
{
	json_t *jrun = json_object_get(req, "run"), *jforce = json_object_get(req, "force");
	json_t *jwait = json_object_get(req, "wait");
	const char *run = json_string_value(jrun);
	double wait = 0;	/* none: a client that knows no "again" (an older wdrift) is answered at once */
	char err[1200];
	struct forgotten gone = { 0 };

	if (!jrun)
		return control_fail("'runs_rm' needs 'run'%s", "");
	if (!run || !run[0])
		return control_fail("'run' must be a run name (a non-empty string)%s", "");
	if (jforce && !json_is_boolean(jforce))
		return control_fail("'force' must be true or false%s", "");
	if (jwait && (!json_is_number(jwait) || !((wait = json_number_value(jwait)) >= 0 && wait <= RM_WAIT_MAX_S)))
		return control_fail("'wait' must be seconds from 0 to " STR(RM_WAIT_MAX_S) ": how long to wait for "
			    "the run's publishers to disconnect%s", "");
	if (!c->forget)
		return control_fail("'runs_rm' is not available%s", "");
	unsigned how = json_is_true(jforce) ? FORGET_FORCE : 0;
	int r = c->forget(c->reload_ctx, run, how, &gone, err, sizeof(err));
	if ((r == -EAGAIN || r == -EBUSY) && wait > 0) {
		int w = env ? rm_wait_add(&c->rm_waiting, run, how, wait, now_mono(), env) : -ENOTSUP;
		if (!w) {
			log_debug("runs rm: run '%s': waiting up to %g s for it to be free", run, wait);
			return NULL;	/* answered by control_rm_due */
		}
		if (w != -ENOTSUP)
			snprintf(err + strlen(err), sizeof(err) - strlen(err), " (not waited for: %s)",
				 w == -EBUSY ? STR(RM_WAITING_MAX) " runs rm requests wait already" :
				 "out of memory");
		wait = 0;
	}
	return rm_reply(run, r, &gone, err, wait);
}

char *control_rm_due(struct control *c, int stopping, struct query_waiter **to)
{
	double now = now_mono();
	char err[1200];
	struct forgotten gone = { 0 };

	*to = NULL;
	for (struct rm_wait *w = c->rm_waiting.head; w; w = w->next) {
		char *reply;
		int r = -ESHUTDOWN;
		if (stopping) {
			snprintf(err, sizeof(err), "wdriftd is stopping: run '%.200s' was not removed", w->run);
		} else {
			r = c->forget(c->reload_ctx, w->run, w->how | FORGET_CHECK, &gone, err, sizeof(err));
			if ((r == -EAGAIN || r == -EBUSY) && now < w->deadline)
				continue;
		}
		if (!r) {	/* free now: the client, if it is still there, removes it */
			log_debug("runs rm: run '%s' is free now: its client is told to ask again", w->run);
			reply = control_dump(json_pack("{s:i,s:b,s:b,s:s}", "v", 1, "ok", 0, "again", 1, "error",
					       "the run can be removed now: send the request again"));
		} else {
			reply = rm_reply(w->run, r, &gone, err, stopping ? 0 : w->wait);
		}
		rm_wait_remove(&c->rm_waiting, w);
		*to = w->client;
		w->client = NULL;
		rm_wait_free(&w);
		return reply;
	}
	return NULL;
}

double control_rm_deadline(const struct control *c)
{
	return rm_wait_next_deadline(&c->rm_waiting);
}

static json_t *studies(struct control *c)
{
	json_t *list = json_array();

	for (size_t i = 0; i < c->cfg->n_studies; i++) {
		const struct wd_config_study *s = &c->cfg->studies[i];
		json_t *cands = json_array(), *proxies = json_object();
		for (size_t k = 0; k < s->candidates.n; k++)
			json_array_append_new(cands, json_string(s->candidates.names[k]));
		for (size_t k = 0; k < s->proxies.n; k++)
			json_object_set_new(proxies, s->proxies.v[k].label, json_string(s->proxies.v[k].run));
		json_t *one = json_pack("{s:s,s:s,s:o,s:o,s:o}", "name", s->name,
			"baseline", s->baseline, "candidates", cands, "proxies", proxies,
			"synthetic_proxy", s->synthetic_proxy != WD_SYNTHETIC_NONE ?
					   json_string(wd_config_synthetic_label(s->synthetic_proxy)) : json_null());
		/*
		 * Its latest step with results against its baseline now, or why it
		 * has none: a study stuck, or whose baseline a reload changed to a
		 * run that has not sent (a typo, often), is seen here.
		 */
		char why[512], wait[1400];
		struct result_batch *b = drift_query_find(c->results, c->n_results, s->name, s->baseline,
							  NULL, why, sizeof(why));
		if (b && strcmp(b->baseline, s->baseline))	/* only stale ones */
			b = NULL;
		json_object_set_new(one, "latest", b ? json_integer((json_int_t)b->step) : json_null());
		/* the latest has the proxies' rows alone: the step drift shows, a candidate's latest */
		const struct result_batch *shown = b ? control_latest_compared(c, s, b) : NULL;
		if (shown)
			json_object_set_new(one, "latest_compared", json_integer((json_int_t)shown->step));
		if (!b) {
			study_waiting(c->cfg, c->st, s, wait, sizeof(wait));
			json_object_set_new(one, "waiting", json_string(wait[0] ? wait + 2 : "nothing held"));
		} else if (study_silent(c->cfg, c->st, s, b, wait, sizeof(wait))) {
			/* its latest rows are not all of its runs now: one of them sent nothing */
			json_object_set_new(one, "silent", json_string(wait + 2));
		}
		/* a step of its runs held up (a dead rank): its latest rows are not all there will be */
		if (study_stuck(c->cfg, c->st, s, wait, sizeof(wait)))
			json_object_set_new(one, "stuck", json_string(wait));
		/* and once it expired: that step has no rows, and will not (drift's expired line) */
		if (study_expired(c->cfg, c->st, s, wait, sizeof(wait)))
			json_object_set_new(one, "expired", json_string(wait));
		/* a run none of whose steps aligns, beside results (waiting says it before any) */
		if (b && study_unaligned(c->cfg, c->st, s, wait, sizeof(wait)))
			json_object_set_new(one, "unaligned", json_string(wait));
		json_array_append_new(list, one);
	}
	return with_storage_note(c, json_pack("{s:i,s:b,s:o}", "v", 1, "ok", 1, "studies", list));
}

/*
 * The step computed again (a reload's backfill, a baseline step that took
 * a run's step from its neighbour, or the record of either replayed at a
 * start): the rows of the runs it did not compute stay shown, a candidate
 * a reload took out (as former) most often, as the drift log keeps them;
 * but not a run the study names whose durable steps no longer align to
 * this step (now another baseline step's): its row here is superseded.
 * Decided from the snapshots held, not the config alone, so that a replay
 * under a later config keeps what the live daemon kept. *b is copied
 * first when another thread holds it.
 */
static void keep_runs(const struct control *c, struct result_batch **b, const struct result_batch *old)
{
	const char *named[WD_STUDY_STEP_RUNS_MAX], *superseded[WD_STUDY_STEP_RUNS_MAX];
	size_t n_named = 0, n_superseded = 0;
	struct run *base = state_run(c->st, (*b)->baseline, 0);

	for (size_t i = 0; i < c->cfg->n_studies; i++)
		if (!strcmp(c->cfg->studies[i].name, (*b)->study))
			n_named = wd_study_step_runs(&c->cfg->studies[i], named, WD_STUDY_STEP_RUNS_MAX);
	for (size_t k = 0; base && k < n_named; k++)
		if (!study_run_aligned(state_run(c->st, named[k], 0), base, (*b)->step,
				       c->cfg->alignment.tolerance))
			superseded[n_superseded++] = named[k];
	if (!result_batch_keeps(*b, old, superseded, n_superseded))
		return;	/* the usual case: nothing to keep, nothing copied */
	struct result_batch *mine = result_batch_shared(*b) ? result_batch_dup(*b) : *b;
	if (mine && mine != *b) {
		result_batch_free(b);
		*b = mine;
	}
	if (!mine || result_batch_keep_runs(mine, old, superseded, n_superseded) < 0)
		log_warning("drift: out of memory: study '%s' step %lld shows only the runs just "
			    "computed; the drift log keeps the others' rows", (*b)->study, (long long)(*b)->step);
}

void control_add_result(struct control *c, struct result_batch *b)
{
	if (!b->index)	/* start-up's replayed batches; the compute thread indexes the rest */
		result_batch_index(b);
	for (size_t i = 0; i < c->n_results; i++)
		if (c->results[i]->step == b->step && !strcmp(c->results[i]->study, b->study)) {
			keep_runs(c, &b, c->results[i]);
			result_batch_free(&c->results[i]);	/* a query building from it keeps its own */
			c->results[i] = b;
			return;
		}
	if (c->n_results == c->cap_results) {
		size_t cap = c->cap_results ? 2 * c->cap_results : 64;
		struct result_batch **v = realloc(c->results, cap * sizeof(*v));
		if (!v) {
			result_batch_free(&b);
			return;
		}
		c->results = v;
		c->cap_results = cap;
	}
	c->results[c->n_results++] = b;
}

/* Has b rows of run? */
static int has_run(const struct result_batch *b, const char *run);

int control_step_complete(struct state *s, const struct wd_config_study *st, const struct result_batch *b)
{
	const char *runs[WD_STUDY_STEP_RUNS_MAX];
	size_t n = wd_study_step_runs(st, runs, WD_STUDY_STEP_RUNS_MAX);
	size_t trained = st->candidates.n + st->proxies.n;	/* the synthetic proxy's label is last */

	if (strcmp(b->baseline, st->baseline))	/* against the baseline before a reload: stale */
		return 0;
	for (size_t k = 0; k < n; k++)
		if (!has_run(b, runs[k]) && !(s && k < trained && study_run_silent(s, runs[k])))
			return 0;
	return 1;
}

struct result_batch *control_latest_complete(const struct control *c, const char *study)
{
	const struct wd_config_study *st = NULL;
	struct result_batch *best = NULL;

	for (size_t i = 0; i < c->cfg->n_studies; i++)
		if (!strcmp(c->cfg->studies[i].name, study))
			st = &c->cfg->studies[i];
	/*
	 * Newest first (results are kept in arrival order, mostly ascending
	 * steps): the first complete one found ends the costly checks, since
	 * an older step is only looked at when it is later than the best.
	 */
	for (size_t i = c->n_results; st && i-- > 0;) {
		struct result_batch *b = c->results[i];
		if (!strcmp(b->study, study) && (!best || b->step > best->step) &&
		    control_step_complete(c->st, st, b))
			best = b;
	}
	return best;
}

/*
 * The newest results of each candidate of st that has some against its
 * baseline now, into newest[] (one per candidate, NULL: none), newest
 * first from the end of the results (kept in arrival order, mostly
 * ascending steps), stopping once every candidate has its own.
 */
static void newest_of_candidates(const struct control *c, const struct wd_config_study *st,
				 const struct result_batch **newest)
{
	size_t left = st->candidates.n;

	memset(newest, 0, st->candidates.n * sizeof(*newest));
	for (size_t i = c->n_results; left && i-- > 0;) {
		const struct result_batch *b = c->results[i];
		if (strcmp(b->study, st->name) || strcmp(b->baseline, st->baseline))
			continue;
		for (size_t k = 0; k < st->candidates.n; k++) {
			if (newest[k] && newest[k]->step >= b->step)
				continue;
			if (!result_batch_has_run(b, st->candidates.names[k]))
				continue;
			left -= !newest[k];
			newest[k] = b;
		}
	}
}

/*
 * Live, every batch is judged as it comes, so an instance was last judged
 * on its candidate's newest results, complete or not. One not kept across
 * a restart (inactive ones are not) judged on the complete step alone
 * fired on old data when a proxy had stopped there (an ops trial's). So at
 * start-up such instances are judged on their candidates' newest results
 * first, newest step first: evaluate() (alerts.c) then leaves each as it
 * is at the older steps that follow, the complete step's included.
 */
static void judge_newest_first(struct control *c, const struct wd_config_study *st)
{
	const struct result_batch *newest[CONFIG_MAX_CANDIDATES];

	newest_of_candidates(c, st, newest);
	for (;;) {
		const struct result_batch *top = NULL;
		for (size_t k = 0; k < st->candidates.n; k++)
			if (newest[k] && (!top || newest[k]->step > top->step))
				top = newest[k];
		if (!top)
			return;
		alerts_on_results_fresh(c->alerts, top);
		for (size_t k = 0; k < st->candidates.n; k++)	/* a batch several candidates share, once */
			if (newest[k] == top)
				newest[k] = NULL;
	}
}

void control_alerts_catch_up(struct control *c, int start)
{
	for (size_t i = 0; c->alerts && i < c->cfg->n_studies; i++) {
		const struct wd_config_study *st = &c->cfg->studies[i];
		if (start)	/* a reload's rule is judged on the complete step alone (docs/config.md) */
			judge_newest_first(c, st);
		struct result_batch *b = control_latest_complete(c, st->name);
		if (b)	/* an instance past that step already is left as it is */
			alerts_on_results(c->alerts, b);
	}
}

static int has_run(const struct result_batch *b, const char *run)
{
	for (size_t i = 0; i < b->n_rows; i++)
		if (!strcmp(b->rows[i].run, run))
			return 1;
	return 0;
}

void control_forget(struct control *c, const char *run)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n_results; i++) {
		struct result_batch *b = c->results[i];
		/*
		 * a batch a query is reading stays as it is: the query has its own
		 * reference; one with the run's note alone is changed too (its
		 * index made again), so it is copied as well (a review's)
		 */
		if (result_batch_shared(b) && strcmp(b->baseline, run) &&
		    (has_run(b, run) || result_batch_note_of(b, run))) {
			struct result_batch *copy = result_batch_dup(b);
			if (copy) {
				result_batch_free(&c->results[i]);
				b = c->results[i] = copy;
			} else {
				log_err("runs rm: out of memory: results of study '%s' at step %lld kept "
					"until the next restart", b->study, (long long)b->step);
				c->results[k++] = b;
				continue;
			}
		}
		if (!strcmp(b->baseline, run) || result_batch_forget(b, run))
			result_batch_free(&c->results[i]);
		else
			c->results[k++] = b;
	}
	c->n_results = k;
}

int control_start(struct control *c)
{
	return c->query ? 0 : query_start(&c->query);
}

int control_fd(const struct control *c)
{
	return c->query ? query_fd(c->query) : -1;
}

struct query_job *control_take(struct control *c)
{
	return c->query ? query_take(c->query) : NULL;
}

void control_release(struct control *c)
{
	query_stop(&c->query);	/* first: its queries hold references to the results */
	while (c->rm_waiting.head) {	/* answered by the loop when it stops (control_rm_due) */
		struct rm_wait *w = c->rm_waiting.head;
		rm_wait_remove(&c->rm_waiting, w);
		rm_wait_free(&w);
	}
	for (size_t i = 0; i < c->n_results; i++)
		result_batch_free(&c->results[i]);
	free(c->results);
	c->results = NULL;
	c->n_results = c->cap_results = 0;
}

char *control_request(struct control *c, const void *req, size_t len,
		      const struct query_envelope *env)
{
	json_error_t jerr;
	json_t *o = json_loadb(req, len, JSON_REJECT_DUPLICATES, &jerr);
	char *out;

	c->st->count.control_requests++;
	if (!o || !json_is_object(o)) {
		json_decref(o);
		return control_fail("request is not a JSON object: %s", o ? "" : jerr.text);
	}
	json_t *v = json_object_get(o, "v");
	const char *cmd = json_string_value(json_object_get(o, "cmd"));
	if (!json_is_integer(v) || json_integer_value(v) != 1)
		out = control_fail("'v' must be 1%s", "");
	else if (!cmd)
		out = control_fail("'cmd' is missing or not a string%s", "");
	else if (!strcmp(cmd, "status"))
		out = control_dump(status(c));
	else if (!strcmp(cmd, "runs"))
		out = control_dump(runs(c));
	else if (!strcmp(cmd, "studies"))
		out = control_dump(studies(c));
	else if (!strcmp(cmd, "reload")) {
		/* the config file again; the reply says what changed (config_diff.h) */
		char err[WD_CONFIG_ERR_MAX];
		json_t *changes = NULL;
		if (c->reload(c->reload_ctx, &changes, err, sizeof(err)) == 0)
			out = control_dump(json_pack("{s:i,s:b,s:s,s:o}", "v", 1, "ok", 1, "config", c->cfg->source,
					     "changes", changes ? changes : json_null()));
		else
			out = control_fail("reload refused, the old config stays: %s", err);
	} else if (!strcmp(cmd, "drift"))
		out = control_drift(c, o, env);
	else if (!strcmp(cmd, "runs_rm"))
		out = runs_rm(c, o, env);
	else if (!strcmp(cmd, "alerts")) {
		out = c->alerts ? alerts_json(c->alerts) : NULL;
		if (!out)
			out = control_fail("cannot list the alerts%s", "");
	}
	else
		out = control_fail("unknown command '%.64s' (status, runs, runs_rm, studies, drift, alerts, reload)", cmd);
	json_decref(o);
	return out;
}

char *control_handle(struct control *c, const void *req, size_t len)
{
	return control_request(c, req, len, NULL);
}
