/*
 * reconfigure.c: what changes a running wdriftd's configuration or runs,
 * on the main loop's thread: loading the config, SIGHUP and `wdrift
 * reload` (validate all, then swap, or keep the old: docs/config.md,
 * "Reload"), and `wdrift runs rm`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "config_diff.h"
#include "daemon.h"
#include "ingest_internal.h"
#include "logging.h"
#include "notify.h"
#include "study_waiting.h"

int daemon_load_config(const char *path, struct wd_config *cfg, uint64_t *hash, char *err, size_t errlen)
{
	if (hash && (!path || config_file_hash(path, hash) < 0))
		*hash = 0;
	if (path)	/* relative ipc:// paths against the file's directory, as the CLI reads them */
		return wd_config_load_file(path, cfg, err, errlen);
	return wd_config_load_string("(built-in)", wd_config_default_yaml, cfg, err, errlen);
}

/* A daemon with no study stores what it is sent and compares nothing: say so, once per load. */
void daemon_note_no_study(const struct wd_config *cfg)
{
	if (!cfg->n_studies)
		log_notice("'%s' has no study: snapshots are received and stored, but nothing is "
			   "compared; add a study (docs/config.md, \"Studies\") and run wdrift reload",
			   cfg->source);
}

/*
 * Each run's part after a reload from old to next: a run next puts in no
 * study that old had in one is marked with that study, and its no-study
 * notice is said at its next snapshot (ingest.c), which says a reload took
 * it out, not "did you mean" the name that took its place, which may be
 * the typo. A run in no study before and after is not said again.
 */
static void runs_after_reload(const struct wd_config *old, const struct wd_config *next, struct state *st)
{
	for (struct run *r = st->runs; r; r = r->next) {
		const struct wd_config_study *before = wd_config_study_naming(old, r->name);
		if (wd_config_study_naming(next, r->name)) {
			free(r->left_study);
			r->left_study = NULL;
		} else if (before && !r->left_study) {
			r->left_study = strdup(before->name);	/* no memory: the plain notice */
			r->left_before_start = 0;
			r->study_checked = 0;
		}
	}
}

/*
 * The studies next adds (no study of that name in old) that can compare
 * nothing the daemon holds, each with why, as `wdrift studies` says it: a
 * reload's reply said only "studies added" for one whose runs had never
 * sent. Logged at notice too, for SIGHUP, whose reply nobody reads.
 * Returns an object study -> why, or NULL when there is none.
 */
static json_t *added_waiting(const struct wd_config *old, const struct wd_config *next, struct state *st)
{
	json_t *out = NULL;
	char why[1400];

	for (size_t i = 0; i < next->n_studies; i++) {
		const struct wd_config_study *s = &next->studies[i];
		int had = 0;
		for (size_t k = 0; k < old->n_studies && !had; k++)
			had = !strcmp(old->studies[k].name, s->name);
		if (had || !study_waiting(next, st, s, why, sizeof(why)) || !why[0])
			continue;
		log_notice("reload: study '%s' added, and it compares nothing yet%s", s->name, why);
		if (!out)
			out = json_object();
		json_object_set_new(out, s->name, json_string(why + 2));
	}
	return out;
}

int daemon_reload_check(void *ctx, uint64_t *hash, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	struct wd_config next;

	wd_config_defaults(&next);
	if (daemon_load_config(d->config_path, &next, hash, err, errlen) < 0)
		return -1;
	int r = wd_config_reload_check(&d->cfg, &next, err, errlen) < 0 ||
		auth_reload_check(d->auth, &next, err, errlen) < 0 ? -1 : 0;
	wd_config_release(&next);
	return r;
}

/*
 * SIGHUP and the reload command: validate all, then swap, or keep the old.
 * changes (NULL for SIGHUP) gets what changed, for the reply.
 */
int daemon_reload(void *ctx, json_t **changes, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	struct wd_config next;
	char what[2048];	/* the summary: every key changed, from and to */
	uint64_t hash;
	int r;

	notify_reloading();
	wd_config_defaults(&next);
	r = daemon_load_config(d->config_path, &next, &hash, err, errlen);
	if (r == 0 && ((r = wd_config_reload_check(&d->cfg, &next, err, errlen)) < 0 ||
		       (r = auth_reload_check(d->auth, &next, err, errlen)) < 0))
		wd_config_release(&next);
	if (r == 0) {
		json_t *diff = wd_config_diff(&d->cfg, &next), *warnings = json_array();
		wd_config_diff_summary(diff, what, sizeof(what));
		study_waiting_reload(&d->cfg, &next, &d->st, warnings);	/* logged, and in the reply */
		json_t *waiting = added_waiting(&d->cfg, &next, &d->st);
		runs_after_reload(&d->cfg, &next, &d->st);
		if (json_array_size(warnings))
			json_object_set_new(diff, "warnings", warnings);
		else
			json_decref(warnings);
		if (waiting)
			json_object_set_new(diff, "waiting", waiting);
		if (changes)
			*changes = diff;
		else
			json_decref(diff);
		wd_config_release(&d->cfg);
		d->cfg = next;	/* the arena moves with the struct */
		d->ix.cfg = d->ctl.cfg = &d->cfg;
		d->ix.no_study_said[0] = 0;	/* the studies changed: a run in none is told again */
		if (d->compute)
			compute_set_config(d->compute, &d->cfg);
		if (d->alerts)
			alerts_set_config(d->alerts, &d->cfg);
		control_alerts_catch_up(&d->ctl, 0);	/* a rule added is judged at once */
		auth_set_config(d->auth, &d->cfg);
		log_level = d->cfg.log.level;
		wd_log_set(log_level, daemon_lib_log);	/* libwdrift's level follows too */
		log_notice("reloaded '%s': %zu stud%s, %zu alert%s: %s", d->cfg.source, d->cfg.n_studies,
			   d->cfg.n_studies == 1 ? "y" : "ies", d->cfg.n_alerts, d->cfg.n_alerts == 1 ? "" : "s", what);
		daemon_note_no_study(&d->cfg);
		config_file_ran(&d->cfile, hash);
	} else {
		log_err("reload refused, the old config stays: %s", err);
		config_file_refused(&d->cfile, hash, err);	/* status says it while the file stays so */
	}
	notify_ready("serving");	/* always, even when the reload failed */
	return r;
}

/*
 * runs rm (control.c): refused for a run unknown, with a publisher still
 * connected (a live job's snapshots would be deleted under it: a trial
 * did that, told by a conflict to free the name while its first job ran;
 * unless FORGET_FORCE), or with a snapshot being received or stored;
 * otherwise (and not FORGET_CHECK) the compute thread forgets it on disk
 * and this thread in memory: its durable steps, identities, kept results
 * and alert instances (a firing alert of a forgotten run would be stale).
 */
int daemon_forget_run(void *ctx, const char *run, unsigned how, struct forgotten *gone, char *err,
		      size_t errlen)
{
	struct daemon *d = ctx;
	int force = (how & FORGET_FORCE) != 0;
	struct run *r = state_run(&d->st, run, 0);
	char who[400];
	size_t live, rerun;
	long files;
	int rc;

	if (!r && state_removed(&d->st, run))	/* a second rm, not a typo */
		return snprintf(err, errlen, "no run '%.200s': runs rm forgot it already, and nothing was "
				"published under the name since", run), -ENOENT;
	int study = 0;
	for (size_t i = 0; !r && i < d->cfg.n_studies; i++)
		study |= !strcmp(d->cfg.studies[i].name, run);
	if (study)	/* the study's name, for one of its runs */
		return snprintf(err, errlen, "no run '%.200s': that is a study's name; runs rm takes a run's "
				"(wdrift runs lists them, and their studies)", run), -ENOENT;
	if (!r) {	/* a typo: the nearest names the daemon has */
		const char *tie, *best = state_run_suggest(&d->st, run, &tie);
		return snprintf(err, errlen, "no run '%.200s'%s%.200s%s%.200s%s (wdrift runs lists them)", run,
				best ? "; did you mean '" : "", best ? best : "", tie ? "' or '" : "",
				tie ? tie : "", best ? "'?" : ""), -ENOENT;
	}
	/* -EAGAIN, -EBUSY: the control loop asks again while the request's wait lasts (rm_wait.h) */
	live = peers_publishing(d->peers, run, &rerun, who, sizeof(who));
	if (live && live == rerun && !force)	/* a re-run alone: nothing of its own would go */
		return snprintf(err, errlen, "run '%.200s' has %zu publisher%s connected whose snapshots were "
				"all refused as conflicts (%s): a re-run under the name. Its refused steps are "
				"not sent again: stop it, rm, then start it again for a whole run (--force "
				"removes the run now, and its later steps are stored without those)", run, live,
				live == 1 ? "" : "s", who), -EAGAIN;
	if (live && !force)
		return snprintf(err, errlen, "run '%.200s' has %zu publisher%s connected (%s): a job still "
				"publishing it, whose snapshots this would delete. Stop the run's jobs first, "
				"then rm, and start a re-run again (the steps refused to it are not sent again), "
				"or publish the re-run under another name. --force removes it anyway, and the "
				"run then holds what every job still connected sends next", run, live,
				live == 1 ? "" : "s", who), -EAGAIN;
	for (struct snapshot *p = d->st.pending; p; p = p->next)
		if (p->run == r && snapshot_pending(p)) {
			if (p->committing)
				return snprintf(err, errlen, "run '%.200s' has step %lld being stored: wait for its "
						"ack, then try again", run, (long long)p->step), -EBUSY;
			double idle = snapshot_idle(p, now_mono());	/* as ingest_expire times it */
			/*
			 * dropped below, its ranks told: a step a dead rank holds up, said
			 * (peers.c, ingest_lag_tick) or silent; not one a job still streams
			 * (a review's: a live job's step was lost to --force)
			 */
			if (force && (p->lag_said || idle >= RM_FORCE_IDLE_S))
				continue;
			double left = (double)d->cfg.limits.pending_timeout - idle;
			char ranks[96] = "";
			if (p->ranks_said > 1)	/* a dead rank never commits: the wait is the timeout's */
				snprintf(ranks, sizeof(ranks), ", %llu of its %llu ranks committed",
					 (unsigned long long)(p->ranked ? p->n_ranked : p->n_waiters < p->ranks_said ?
							      p->n_waiters : p->ranks_said - 1),
					 (unsigned long long)p->ranks_said);
			return snprintf(err, errlen, "run '%.200s' has step %lld being received (nothing new for "
					"%.0f s%s): it is dropped %.0f s from now (limits.pending_timeout, %llu s, "
					"with nothing new), or stored when whole; then try again. A rank that died "
					"never sends the rest: --force drops the step once nothing new has come for "
					"%d s or the daemon has said the rank's death (or a shorter "
					"limits.pending_timeout and `wdrift reload` end the wait sooner)", run,
					(long long)p->step, idle, ranks, left > 0 ? left : 0,
					(unsigned long long)d->cfg.limits.pending_timeout, RM_FORCE_IDLE_S), -EBUSY;
		}
	if (how & FORGET_CHECK)
		return 0;
	if ((rc = compute_forget(d->compute, run, &gone->results, &files)) < 0)
		return snprintf(err, errlen, "write-ahead log: %s: nothing was removed", strerror(-rc)), rc;
	for (struct snapshot *p = d->st.pending, *n; p; p = n) {	/* re-sends being checked, refused ones */
		n = p->next;
		if (p->run != r)
			continue;
		int received = snapshot_pending(p);	/* being received (--force), not a re-send checked */
		/* ranks that committed: told, not left waiting */
		/*
		 * "ranks", as the step's expiry says it: a refusal the rank's
		 * publisher says and does not send again ("tensors" is push-back it
		 * retries: a trial's rank re-sent the step dropped, stuck anew)
		 */
		if (p->n_waiters)
			ingest_fail_waiters(&d->ix, p, WIRE_INCOMPLETE, received ? "ranks" : "tensors", received ?
					    "the run was removed (wdrift runs rm --force) while this step was being "
					    "received: its parts are dropped; send it again, to be stored anew" :
					    "the run was removed (wdrift runs rm) while this re-send was checked: send "
					    "it again, to be stored anew");
		if (received) {
			log_notice("runs rm --force: run '%s' step %lld: dropped while being received (%zu tensor%s, "
				   "%zu commit%s waited)", run, (long long)p->step, p->n_tensors,
				   p->n_tensors == 1 ? "" : "s", p->n_waiters, p->n_waiters == 1 ? "" : "s");
			d->st.count.dropped++;
			gone->received++;
		}
		ingest_unlink_snapshot(&d->st, p);
		snapshot_free(&d->st, p);
	}
	gone->steps = r->n_durable;
	d->st.count.snapshots_durable -= r->n_durable < d->st.count.snapshots_durable ?
					 r->n_durable : d->st.count.snapshots_durable;
	state_forget_run(&d->st, r);
	state_note_removed(&d->st, run);
	kept_shed(&d->st.kept, 0);	/* its tensors' sizes need not come again */
	ingest_forget_expired(&d->ix, run);
	control_forget(&d->ctl, run);
	gone->alerts = alerts_forget_run(d->alerts, run, &d->cfg, 1, &gone->firing);
	peers_forget_run(d->peers, run);	/* two jobs still sending it (--force) are said again */
	gone->publishers = live;
	snprintf(gone->publishers_who, sizeof(gone->publishers_who), "%s", live ? who : "");
	if (live)
		log_warning("runs rm --force: run '%s' forgotten with %zu publisher%s still connected (%s): "
			    "their next snapshots are stored under the name afresh%s", run, live,
			    live == 1 ? "" : "s", who, live - rerun && rerun ? ", each job's beside the "
			    "other's" : "");
	log_notice("runs rm: run '%s': %zu durable step%s and %zu result record%s forgotten, %ld spool "
		   "file%s removed, %zu alert instance%s dropped (%zu were firing: resolved, saying the run "
		   "was removed)", run, gone->steps, gone->steps == 1 ? "" : "s", gone->results,
		   gone->results == 1 ? "" : "s", files > 0 ? files : 0, files == 1 ? "" : "s", gone->alerts,
		   gone->alerts == 1 ? "" : "s", gone->firing);
	return 0;
}

size_t daemon_publishers(void *ctx, const char *run)
{
	struct daemon *d = ctx;
	return peers_publishing(d->peers, run, NULL, NULL, 0);
}

size_t daemon_jobs(void *ctx, const char *run, char *who, size_t len)
{
	struct daemon *d = ctx;
	return peers_jobs(d->peers, run, who, len);
}

int daemon_connected(void *ctx, const void *rid, size_t len)
{
	struct daemon *d = ctx;
	return peers_open(d->peers, rid, len);
}

/* libwdrift's log lines, through ours (journal prefixes included). */
void daemon_lib_log(int level, const char *msg)
{
	log_at(level, "%s", msg);
}

