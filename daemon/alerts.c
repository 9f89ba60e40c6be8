/*
 * alerts.c: alert rules and their lifecycle (see alerts.h and the
 * "Alerts" section of docs/config.md, whose semantics this follows).
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "alerts.h"
#include "alert_instances.h"
#include "compute.h"
#include "config.h"
#include "drift.h"
#include "logging.h"
#include "records.h"

struct rule {
	struct wd_config_alert a;	/* strings below are our own copies */
	char **cands;			/* the study's candidates (stalled times them; the rest skip former ones) */
	char *proxy_run;		/* a ratio rule's: the run of its proxy's rows (wd_study_proxy_run); NULL */
	size_t n_cands;
	int cands_short;		/* out of memory: cands lacks some (then no row is skipped) */
	struct instances set;
	double last_command;		/* Unix seconds */
	/*
	 * scope: tensors whose glob matched none of a candidate's tensors at
	 * its latest step (a typo in it: the rule can never fire), said once
	 * in the log, and by alerts_json until that candidate has a tensor it
	 * matches: why, and the candidate
	 */
	char *unmatched, *unmatched_run;
	int64_t unmatched_step;		/* the step it was said at: an older one computed again says nothing */
	int held_said;			/* the hold of the changes owed now is in the log */
	int busy_said;			/* the hold for a run still running is in the log */
	uint64_t def;			/* def_hash: what its instances mean */
	int stale;			/* restore: state of another definition dropped */
	/*
	 * Its command since the start (kept by a reload that keeps its name):
	 * runs started, and runs that failed (not started, a non-zero exit, a
	 * signal), with the latest failure said; a pager that fails was in the
	 * log alone (an ops trial).
	 */
	uint64_t commands_run, commands_failed;
	char command_failure[160];
	/*
	 * Lines its command owes of instances gone since (resolved by runs rm
	 * or a reload, then dropped) while a run was held: they go first in
	 * the next run (a review: they were lost with the instances). NULL:
	 * none. In memory only.
	 */
	char *owed_lines;
	int child_ended;		/* a run of it was reaped: what it held goes now */
};

/* A run of a rule's command, until it is reaped. */
struct child {
	pid_t pid;			/* its session's and process group's too (setsid) */
	char *rule;			/* NULL: out of memory (not counted, not waited for) */
	double started;			/* monotonic seconds */
	int64_t timeout;		/* its rule's command_timeout then */
	int killed;			/* past its timeout: killed, and counted failed then */
	struct child *next;
};

struct alerts {
	alert_sink sink;
	void *ctx;
	struct rule *rules;
	size_t n_rules;
	struct child *children;
	alert_store store;		/* NULL: state not kept */
	void *store_ctx;
	int store_failed;		/* logged once until a record goes through again */
	char **unknown;			/* restore: rules with state but not in the config */
	size_t n_unknown;
};

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Has the rule's command yet to hear some instance's state (firing or not), or a gone one's? */
static int command_owed(const struct rule *r)
{
	if (r->a.command && r->owed_lines)
		return 1;
	for (const struct instance *i = r->set.head; r->a.command && i; i = i->next)
		if ((i->state == FIRING) != i->told)
			return 1;
	return 0;
}

static void rules_free(struct alerts *a)
{
	for (size_t i = 0; i < a->n_rules; i++) {
		struct rule *r = &a->rules[i];
		free((char *)r->a.name);
		free((char *)r->a.study);
		free((char *)r->a.proxy);
		free((char *)r->a.tensors);
		free((char *)r->a.command);
		free(r->unmatched);
		free(r->unmatched_run);
		free(r->owed_lines);
		for (size_t c = 0; c < r->n_cands; c++)
			free(r->cands[c]);
		free(r->cands);
		free(r->proxy_run);
		instances_drop(&r->set, NULL, NULL);
	}
	free(a->rules);
	a->rules = NULL;
	a->n_rules = 0;
}

struct alerts *alerts_new(alert_sink sink, void *ctx)
{
	struct alerts *a = calloc(1, sizeof(*a));
	if (a) {
		a->sink = sink;
		a->ctx = ctx;
	}
	return a;
}

/* FNV-1a over a string and its terminating NUL, on top of h. */
static uint64_t fnv(uint64_t h, const char *s)
{
	for (const char *p = s ? s : ""; ; p++) {
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
		if (!*p)
			return h;
	}
}

/*
 * What a rule's instances mean: its study, metric, scope, glob and proxy.
 * Its threshold, for, severity and command are how they are judged and
 * told: a change to those keeps the instances (docs/reliability.md).
 */
static uint64_t def_hash(const struct wd_config_alert *c)
{
	char scope[32];
	uint64_t h = fnv(1469598103934665603ull, c->study);

	snprintf(scope, sizeof(scope), "%d", c->metric == WD_METRIC_STALLED ? -1 : c->scope);
	h = fnv(h, wd_config_metric_name(c->metric));
	h = fnv(h, scope);
	h = fnv(h, c->tensors);
	return fnv(h, c->proxy);
}

static void save_reset(struct alerts *a, const struct rule *r);

/*
 * Instances go with a rule's name and definition (def_hash). Those of a
 * rule that changed meaning or left the config are dropped, said once in
 * the log, and a "reset" record keeps a restart from bringing them back.
 */
static int is_candidate(const struct rule *r, const char *run);
static json_t *alert_json(const struct rule *r, const struct instance *i, const char *state);
static void command_due(struct alerts *a, struct rule *r);
static void save(struct alerts *a, struct rule *r);

/* i's transition is now, as judged by r: its event and its command's line say it so. */
static void transition(const struct rule *r, struct instance *i)
{
	i->since = now_wall();
	i->has_trans = 1;
	i->trans_value = i->value;
	i->trans_step = i->step;
	i->trans_threshold = r->a.threshold;
}

/* j's line, resolved, kept on r for its command's next run (owed_lines): 0, or -1 out of memory (said). */
static int owe_line(struct rule *r, const struct instance *j)
{
	json_t *o = alert_json(r, j, "resolved");
	char *json = o ? json_dumps(o, JSON_COMPACT) : NULL, *more = NULL;

	json_decref(o);
	if (!json || asprintf(&more, "%s%s\n", r->owed_lines ? r->owed_lines : "", json) < 0) {
		log_err("alert '%s': out of memory keeping the resolve of run '%s' for its command", r->a.name,
			j->run);
		free(json);
		return -1;
	}
	free(json);
	free(r->owed_lines);
	r->owed_lines = more;
	return 0;
}

/*
 * Resolves r's firing instances of run (NULL: every one), which are about
 * to go, saying reason in each one's event, log line and command line: a
 * pager waits to hear it (a trial's alert went on firing for a run the
 * study no longer had, and runs rm sent nothing). The command hears it
 * when its command_min_interval allows; else it goes with the rest. With
 * record, an "alert" record says so, so that a restart does not bring one
 * back firing; runs rm's "forget" record does that itself, and one written
 * after it would bring them back. How many it resolved.
 */
static size_t resolve_going(struct alerts *a, struct rule *r, const char *run, const char *reason, int record)
{
	size_t n = 0;

	for (struct instance *j = r->set.head; j; j = j->next) {
		if ((run && strcmp(j->run, run)) || j->state != FIRING)
			continue;
		j->state = INACTIVE;
		transition(r, j);
		j->dirty = 1;
		j->reason = reason;	/* for its event here and its command's line (command_due) */
		json_t *o = alert_json(r, j, "resolved");
		char *json = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		log_notice("alert '%s' resolved: study '%s' run '%s'%s%s%s: %s", r->a.name, r->a.study, j->run,
			   j->tensor ? " tensor '" : "", j->tensor ? j->tensor : "", j->tensor ? "'" : "", reason);
		if (json) {
			char topic[256];
			snprintf(topic, sizeof(topic), "alert.%.200s", r->a.name);
			a->sink(a->ctx, topic, json);
		}
		free(json);
		n++;
	}
	if (n)
		command_due(a, r);
	/* held (the interval, a run still going): kept as lines, since the instances go */
	for (struct instance *j = r->set.head; r->a.command && j; j = j->next)
		if (j->reason && j->told && owe_line(r, j) == 0)
			j->told = 0;
	if (n && record)
		save(a, r);
	for (struct instance *j = r->set.head; j; j = j->next)
		j->reason = NULL;	/* the caller's buffer */
	return n;
}

/*
 * Drops the instances of runs that are no candidates of the rule's study
 * now (a reload took them out; at a start, the config changed while the
 * daemon was down), the firing ones resolved first (resolve_going).
 */
static void unmatched_clear(struct rule *r, const char *run);

static void drop_former(struct alerts *a, struct rule *r, const char *when)
{
	struct instance *i;
	char reason[400];

	while (1) {
		for (i = r->set.head; i && is_candidate(r, i->run); i = i->next)
			;
		if (!i)
			break;
		char *run = strdup(i->run);
		if (!run)
			return;	/* kept: judged no more, but not lost */
		snprintf(reason, sizeof(reason), "'%.200s' is no longer a candidate of study '%.100s' (%s)", run,
			 r->a.study, when);
		resolve_going(a, r, run, reason, 1);
		instances_drop(&r->set, run, NULL);
		free(run);
	}
	/* the glob's sentence about a run no longer a candidate goes too (a trial saw it stay) */
	if (r->unmatched_run && !is_candidate(r, r->unmatched_run))
		unmatched_clear(r, r->unmatched_run);
}

void alerts_set_config(struct alerts *a, const struct wd_config *cfg)
{
	struct rule *old = a->rules;
	size_t n_old = a->n_rules;
	struct rule *v = calloc(cfg->n_alerts + 1, sizeof(*v));

	if (!v)
		return;
	for (size_t i = 0; i < cfg->n_alerts; i++) {
		const struct wd_config_alert *c = &cfg->alerts[i];
		v[i].a = *c;
		v[i].a.name = dup_or_null(c->name);
		v[i].a.study = dup_or_null(c->study);
		v[i].a.proxy = dup_or_null(c->proxy);
		v[i].a.tensors = dup_or_null(c->tensors);
		v[i].a.command = dup_or_null(c->command);
		v[i].def = def_hash(c);
		const struct wd_config_study *st = &cfg->studies[c->study_index];
		v[i].cands = calloc(st->candidates.n + 1, sizeof(char *));
		v[i].cands_short = !v[i].cands;
		const char *proxy_run = c->proxy ? wd_study_proxy_run(st, c->proxy) : NULL;
		v[i].proxy_run = proxy_run ? strdup(proxy_run) : NULL;
		for (size_t k = 0; v[i].cands && k < st->candidates.n; k++) {
			char *name = strdup(st->candidates.names[k]);
			if (name)
				v[i].cands[v[i].n_cands++] = name;
			else
				v[i].cands_short = 1;
		}
		if (v[i].cands_short)
			log_warning("alert '%s': out of memory for its study's candidates: it judges every "
				    "candidate row of a step, a former candidate's too", c->name);
		for (size_t k = 0; k < n_old; k++) {
			if (strcmp(old[k].a.name, c->name))
				continue;
			v[i].commands_run = old[k].commands_run;	/* counters: they only go up */
			v[i].commands_failed = old[k].commands_failed;
			memcpy(v[i].command_failure, old[k].command_failure, sizeof(v[i].command_failure));
			v[i].owed_lines = old[k].owed_lines;	/* the same command, if it still has one */
			old[k].owed_lines = NULL;
			v[i].busy_said = old[k].busy_said;
			if (old[k].def != v[i].def) {
				if (!old[k].set.head)
					continue;	/* nothing to drop or say */
				log_notice("alert '%s': its study, metric, scope, tensors or proxy changed: "
					   "its %zu instances start afresh (%zu were firing; no 'resolved' "
					   "is sent for them)", c->name, old[k].set.n,
					   instances_count(&old[k].set, FIRING));
				continue;	/* freed below, with a reset record */
			}
			v[i].set = old[k].set;
			v[i].last_command = old[k].last_command;
			v[i].held_said = old[k].held_said;
			/* the same glob: said already (unless of a former candidate: drop_former) */
			v[i].unmatched = old[k].unmatched;
			v[i].unmatched_run = old[k].unmatched_run;
			v[i].unmatched_step = old[k].unmatched_step;
			old[k].unmatched = old[k].unmatched_run = NULL;
			drop_former(a, &v[i], "a reload");
			old[k].set = (struct instances){ 0 };
		}
	}
	for (size_t k = 0; k < n_old; k++) {
		if (!old[k].set.head)
			continue;
		size_t still = 0;
		for (size_t i = 0; i < cfg->n_alerts; i++)
			still |= !strcmp(cfg->alerts[i].name, old[k].a.name);
		if (!still)
			log_notice("alert '%s' is no longer in the config: its %zu instances are dropped "
				   "(%zu were firing; no 'resolved' is sent for them)", old[k].a.name,
				   old[k].set.n, instances_count(&old[k].set, FIRING));
		save_reset(a, &old[k]);
	}
	a->n_rules = n_old;
	a->rules = old;
	rules_free(a);
	a->rules = v;
	a->n_rules = cfg->n_alerts;
}

/* The JSON of i's latest transition, to state: an event's, or a line of the command's input. */
static json_t *alert_json(const struct rule *r, const struct instance *i, const char *state)
{
	double value = i->has_trans ? i->trans_value : i->value;
	json_t *o = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:f,s:I,s:f}",
		"v", 1, "alert", r->a.name, "state", state,
		"severity", wd_config_severity_name(r->a.severity), "study", r->a.study,
		"run", i->run, "metric", wd_config_metric_name(r->a.metric),
		"value", isfinite(value) ? json_real(value) : json_null(),
		"threshold", i->has_trans ? i->trans_threshold : r->a.threshold,
		"step", (json_int_t)(i->has_trans ? i->trans_step : i->step), "since", i->since);
	if (i->tensor)
		json_object_set_new(o, "tensor", json_string(i->tensor));
	if (r->a.proxy)
		json_object_set_new(o, "proxy", json_string(r->a.proxy));
	if (i->reason)
		json_object_set_new(o, "reason", json_string(i->reason));
	return o;
}

/*
 * A run of r's command failed: counted, and what kept with when, and a
 * hint after it: "exit 127 at 2026-12-01 16:00:00 UTC (sh: command not
 * found?)". On the daemon's clock (now_wall), as the events' "since".
 */
static void command_failed(struct rule *r, const char *what, const char *hint)
{
	char when[48];

	r->commands_failed++;
	wall_said(now_wall(), when, sizeof(when));
	snprintf(r->command_failure, sizeof(r->command_failure), "%s%s%s", what, when, hint);
}

/*
 * Runs the rule's command with text (JSON lines) on its stdin; never waits
 * for it. The text goes through a memory file, not a pipe: a command that
 * reads nothing, or not yet, holds up nothing, and the lines of a hundred
 * instances held together fit whole (a pipe's 64 KiB would cut one). 0, or
 * -1 when it could not be started (said).
 */
static int run_command(struct alerts *a, struct rule *r, const char *text)
{
	size_t len = strlen(text), at = 0;
	int fd = memfd_create("wdrift-alert", MFD_CLOEXEC);
	char why[112];

	r->commands_run++;	/* each one tried: those not started fail too */
	while (fd >= 0 && at < len) {
		ssize_t w = write(fd, text + at, len - at);
		if (w <= 0)
			break;
		at += (size_t)w;
	}
	if (fd < 0 || at < len || lseek(fd, 0, SEEK_SET) < 0) {
		snprintf(why, sizeof(why), "not started: its input (%zu bytes): %s", len, strerror(errno));
		log_err("alert '%s': its command %s", r->a.name, why);
		command_failed(r, why, "");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char zero[160];	/* made before the fork: the child only execs */
	snprintf(zero, sizeof(zero), "wdrift alert '%s' command", r->a.name);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(why, sizeof(why), "not started: fork: %s", strerror(errno));
		log_err("alert '%s': its command %s", r->a.name, why);
		command_failed(r, why, "");
		close(fd);
		return -1;
	}
	if (pid == 0) {	/* the child: its own session, the JSON on stdin */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);	/* the daemon blocks some */
		setsid();
		dup2(fd, 0);
		/* nothing of the daemon's but stdout and stderr: HDF5 opens its
		 * files without O_CLOEXEC, and a command may outlive us */
		close_range(3, ~0u, 0);
		signal(SIGPIPE, SIG_DFL);	/* ignored by the daemon; exec keeps that */
		/* $0, which the shell's own errors begin with: its rule's, in the journal (an ops trial's "sh: 1: ...") */
		execl("/bin/sh", "sh", "-c", r->a.command, zero, (char *)NULL);
		_exit(127);
	}
	close(fd);
	struct child *c = calloc(1, sizeof(*c));
	if (c) {
		c->pid = pid;
		c->rule = strdup(r->a.name);
		c->started = now_mono();
		c->timeout = r->a.command_timeout;
		c->next = a->children;
		a->children = c;
	}
	return 0;
}

/* The run of rule's command still running (not reaped yet), or NULL. */
static const struct child *running(const struct alerts *a, const char *rule)
{
	for (const struct child *c = a->children; c; c = c->next)
		if (c->rule && !strcmp(c->rule, rule))
			return c;
	return NULL;
}

/*
 * The rule's command gets its owed changes when command_min_interval has
 * passed since it last ran: one run, one JSON line per instance whose
 * state (firing or not) differs from what the command last heard, as it
 * is now. So a change inside the interval is held, not lost (a trial: a
 * second tensor firing at the same step, and a resolve, never reached a
 * pager), and one that flapped back tells it nothing. A command that a
 * reload adds hears the instances firing then, and what a restart left
 * held (the WAL's "held") goes too. Called after each evaluation and each
 * second.
 */
static void command_due(struct alerts *a, struct rule *r)
{
	double t = now_wall();

	if (!command_owed(r))
		return;
	/*
	 * One run at a time: a second beside a slow one (a pager's retries)
	 * could deliver a resolve before its firing (an ops trial's did). The
	 * changes wait for it to end, or for command_timeout to end it.
	 */
	const struct child *c = running(a, r->a.name);
	if (c) {
		if (!r->busy_said)
			log_notice("alert '%s': its command started %.0f s ago still runs: the changes since are "
				   "held until it ends (command_timeout %lld s)", r->a.name, now_mono() - c->started,
				   (long long)c->timeout);
		r->busy_said = 1;
		return;
	}
	r->busy_said = 0;
	if (r->last_command && t - r->last_command < (double)r->a.command_min_interval) {
		if (!r->held_said)
			log_notice("alert '%s': its command ran %.0f s ago (command_min_interval %lld): the "
				   "changes since are held, and go to it in %.0f s, each instance's latest state",
				   r->a.name, t - r->last_command, (long long)r->a.command_min_interval,
				   r->last_command + (double)r->a.command_min_interval - t);
		r->held_said = 1;
		return;
	}
	char *text = NULL;
	size_t len = 0, skipped = 0;
	FILE *f = open_memstream(&text, &len);
	if (f && r->owed_lines)	/* gone instances' first: they changed before these */
		fputs(r->owed_lines, f);
	for (struct instance *i = r->set.head; f && i; i = i->next) {
		int firing = i->state == FIRING;
		if (firing == i->told)
			continue;
		json_t *o = alert_json(r, i, firing ? "firing" : "resolved");
		char *json = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		if (json)
			fprintf(f, "%s\n", json);
		else
			skipped++;
		free(json);
	}
	if (!f || fclose(f) != 0 || skipped) {	/* told nothing: the whole of it next second */
		log_err("alert '%s': out of memory for its command's input", r->a.name);
		free(f ? text : NULL);
		return;
	}
	if (run_command(a, r, text) == 0) {	/* not started (said): tried again next second */
		r->last_command = t;
		r->held_said = 0;
		free(r->owed_lines);
		r->owed_lines = NULL;
		/* heard now: the instances on its lines (the same walk, the same test) */
		for (struct instance *i = r->set.head; i; i = i->next)
			if ((i->state == FIRING) != i->told) {
				i->told = i->state == FIRING;
				i->dirty = 1;	/* the record that keeps last_command */
			}
	}
	free(text);
}

/* One record through the store; a failure is logged once until one works again. */
static void store(struct alerts *a, const char *rule, const struct alert_state *s)
{
	char *p = record_alert(s);
	int rc = p ? a->store(a->store_ctx, p) : -ENOMEM;

	free(p);
	if (rc < 0 && !a->store_failed)
		log_err("alert '%s': its state cannot be written to the write-ahead log: %s; a "
			"restart now may lose it (said once, until a write works again)", rule,
			strerror(-rc));
	else if (rc >= 0 && a->store_failed)
		log_notice("alerts: their state is written to the write-ahead log again");
	a->store_failed = rc < 0;
}

/*
 * The rule's instances changed by the evaluation just done, as one "alert"
 * record. Written after their events and commands: a crash between the two
 * repeats a transition after the restart rather than losing it.
 */
static void save(struct alerts *a, struct rule *r)
{
	size_t n = 0;

	if (!a->store)
		return;
	for (struct instance *i = r->set.head; i; i = i->next)
		n += i->dirty;
	if (!n)
		return;
	struct alert_inst *v = calloc(n, sizeof(*v));
	if (!v) {
		log_err("alert '%s': out of memory writing its state", r->a.name);
		return;	/* still dirty: the next record has them */
	}
	n = 0;
	for (struct instance *i = r->set.head; i; i = i->next)
		if (i->dirty)
			v[n++] = (struct alert_inst){ i->run, i->tensor, i->state, i->prev_state,
				i->above, i->prev_above, i->step, i->value, i->since,
				(i->state == FIRING) != i->told, i->has_trans, i->trans_value,
				i->trans_threshold, i->trans_step };
	struct alert_state s = { r->a.name, r->def, 0, r->last_command, v, n };
	store(a, r->a.name, &s);
	if (!a->store_failed)
		for (struct instance *i = r->set.head; i; i = i->next)
			i->dirty = 0;
	free(v);
}

/* A "reset" record: the instances of rule name (def) are dropped. */
static void save_reset_of(struct alerts *a, const char *name, uint64_t def)
{
	struct alert_state s = { name, def, 1, 0, NULL, 0 };
	if (a->store)
		store(a, name, &s);
}

static void save_reset(struct alerts *a, const struct rule *r)
{
	save_reset_of(a, r->a.name, r->def);
}

/* Moves an instance along its lifecycle after one evaluation. */
static void evaluate(struct alerts *a, struct rule *r, struct instance *i, double value,
		     int64_t step)
{
	int above = isfinite(value) && value > r->a.threshold;
	int stalled = r->a.metric == WD_METRIC_STALLED;	/* a clock, not snapshots */
	int64_t count = i->above;
	int state = i->state;
	const char *to = NULL;
	int was_state = i->state;
	int64_t was_above = i->above;

	/*
	 * NaN is no value yet (a ratio before its proxy's snapshot arrives):
	 * neither above nor at or below the threshold. The step is computed
	 * again when the missing run arrives, and evaluated then.
	 */
	if (!stalled && isnan(value))
		return;
	if (!stalled && i->evaluated) {
		if (step < i->step)
			return;	/* an older snapshot, computed late: not the latest one */
		if (step == i->step) {	/* the same snapshot again: redo its evaluation */
			count = i->prev_above;
			state = i->prev_state;
		}
	}
	if (!stalled && (!i->evaluated || step != i->step)) {
		i->prev_above = i->above;
		i->prev_state = i->state;
	}
	i->evaluated = 1;
	i->value = value;
	i->step = step;
	if (above) {
		count++;
		if (count >= (stalled ? 1 : r->a.for_count))
			state = FIRING;
		else if (state == INACTIVE)
			state = PENDING;
	} else {
		count = 0;
		state = INACTIVE;
	}
	if (state == FIRING && i->state != FIRING)
		to = "firing";
	else if (state != FIRING && i->state == FIRING)
		to = "resolved";
	i->above = count;
	i->state = state;
	/*
	 * What the next "alert" record holds. A per-candidate rule has few
	 * instances: each evaluation is kept. A per-tensor or stalled one may
	 * have thousands, evaluated each batch or second: only what the
	 * lifecycle needs, a new state or a pending count.
	 */
	if ((r->a.scope != WD_SCOPE_TENSORS && !stalled) || state != was_state ||
	    (state == PENDING && count != was_above))
		i->dirty = 1;
	if (!to) {
		/*
		 * its transition's step judged again (another run arrived at it),
		 * to the same state; not stalled's, judged each second at its run's
		 * last step, whose value is the time since
		 */
		if (!stalled && i->has_trans && i->trans_step == step) {
			i->trans_value = value;
			i->trans_threshold = r->a.threshold;
		}
		return;
	}
	transition(r, i);
	json_t *o = alert_json(r, i, to);
	char *json = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!json)
		return;
	int prio = !strcmp(to, "resolved") ? LOG_NOTICE
		   : r->a.severity == WD_SEVERITY_CRITICAL ? LOG_CRIT
		   : r->a.severity == WD_SEVERITY_WARNING ? LOG_WARNING : LOG_NOTICE;
	log_at(prio, "alert '%s' %s: study '%s' run '%s'%s%s%s step %lld: %s = %g (threshold %g)",
	       r->a.name, to, r->a.study, i->run, i->tensor ? " tensor '" : "",
	       i->tensor ? i->tensor : "", i->tensor ? "'" : "", (long long)step,
	       wd_config_metric_name(r->a.metric), value, r->a.threshold);
	char topic[256];
	snprintf(topic, sizeof(topic), "alert.%.200s", r->a.name);
	a->sink(a->ctx, topic, json);
	free(json);	/* the command hears it once the rule's evaluation is done (command_due) */
}

/* The rule's "matched none" sentence goes when it named run's snapshot. */
static void unmatched_clear(struct rule *r, const char *run)
{
	if (r->unmatched_run && !strcmp(r->unmatched_run, run)) {
		free(r->unmatched);
		free(r->unmatched_run);
		r->unmatched = r->unmatched_run = NULL;
	}
}

/*
 * A rule judged a candidate's n tensors at step (example: one of them):
 * `matched` of them its glob's (all, for a summary's scope), `compared` of
 * those with an element compared. None matched: said once, at warning, as
 * drift --layer GLOB says a glob that matches nothing, until one matches
 * again (a trial's typo kept a rule inactive for ever, in silence). None
 * compared (the run's names differ from the baseline's: a "module."
 * prefix): the same, since the rule has no value to judge (a later trial's
 * rules sat "inactive" at an old step, and nothing said why).
 */
static void glob_matched(struct rule *r, const char *run, int64_t step, size_t n, size_t matched,
			 size_t compared, const char *example)
{
	/* a late proxy's step computed again is not the run's latest: it neither says nor unsays */
	if (r->unmatched && r->unmatched_run && !strcmp(r->unmatched_run, run) && step < r->unmatched_step)
		return;
	if ((matched && compared) || !n) {	/* said for this run: no longer so */
		unmatched_clear(r, run);
		return;
	}
	if (r->unmatched)
		return;	/* said, for this run or another: once for the rule */
	char *why;
	int w = matched ? asprintf(&why, "%s%s%s %zu of the %zu tensors of run '%s' at step %lld, none of them with "
				   "an element compared (named otherwise than the baseline's? `wdrift drift` says): it "
				   "has no value to judge, and cannot fire on that run",
				   r->a.tensors ? "tensors '" : "its scope takes", r->a.tensors ? r->a.tensors : "",
				   r->a.tensors ? "' matched" : "", matched, n, run, (long long)step)
		: asprintf(&why, "tensors '%s' matched none of the %zu tensors of run '%s' at step %lld (such as "
			   "'%s'): it can never fire; a typo in the glob? ('*' matches '.' too)", r->a.tensors, n, run,
			   (long long)step, example);
	if (w < 0)
		return;
	if (!(r->unmatched_run = strdup(run))) {
		free(why);
		return;
	}
	r->unmatched = why;
	r->unmatched_step = step;
	log_warning("alert '%s': %s", r->a.name, r->unmatched);
}

/*
 * The metric of one tensor row. proxy_gone: a ratio rule's proxy has no
 * rows in b (runs rm forgot its run): the ratios the candidate's rows kept
 * are of a run the daemon no longer has, and no value (a trial's restart
 * judged them again, and the rule fired on them; drift shows none).
 */
static double metric_of(const struct rule *r, const struct result_batch *b, const struct drift_row *row,
			int proxy_gone)
{
	switch (r->a.metric) {
	case WD_METRIC_W1: return row->w1;
	case WD_METRIC_MAX_ABS_DIFF: return row->max_abs_diff;
	case WD_METRIC_REL_L2: return row->rel_l2;
	case WD_METRIC_NONFINITE: return (double)(row->nan + row->posinf + row->neginf);
	case WD_METRIC_RATIO:
		for (size_t k = 0; !proxy_gone && k < b->n_proxies; k++)
			if (!strcmp(b->proxies[k], r->a.proxy))
				return row->ratio[k];
		return NAN;
	}
	return NAN;
}

/* Is run a candidate of the rule's study now (the config the rules were set from)? */
static int is_candidate(const struct rule *r, const char *run)
{
	if (r->cands_short)
		return 1;
	for (size_t k = 0; k < r->n_cands; k++)
		if (!strcmp(r->cands[k], run))
			return 1;
	return 0;
}

static void judge(struct alerts *a, const struct result_batch *b, int fresh_only);

void alerts_on_results(struct alerts *a, const struct result_batch *b)
{
	judge(a, b, 0);
}

void alerts_on_results_fresh(struct alerts *a, const struct result_batch *b)
{
	judge(a, b, 1);
}

/* Evaluates the rules of b's study on its candidates; fresh_only: only instances never evaluated. */
static void judge(struct alerts *a, const struct result_batch *b, int fresh_only)
{
	double *vals = calloc(b->n_rows + 1, sizeof(double));
	uint64_t *numel = calloc(b->n_rows + 1, sizeof(uint64_t));

	for (size_t k = 0; vals && numel && k < a->n_rules; k++) {
		struct rule *r = &a->rules[k];
		if (r->a.metric == WD_METRIC_STALLED || strcmp(r->a.study, b->study))
			continue;
		/*
		 * each candidate in the batch, once: their names gathered first,
		 * not a scan per row; a former one (its rows kept beside a step
		 * computed again, control.c) is no candidate of the study now
		 */
		const char *runs[CONFIG_MAX_CANDIDATES], *last = NULL;
		size_t n_runs = 0;
		for (size_t i = 0; i < b->n_rows; i++) {
			const struct drift_row *row = &b->rows[i];
			if (row->kind != ROW_TENSOR || row->role != ROLE_CANDIDATE ||
			    (last && !strcmp(last, row->run)))
				continue;
			last = row->run;
			size_t c = n_runs;
			while (c > 0 && strcmp(runs[c - 1], row->run))
				c--;
			if (c == 0 && n_runs < sizeof(runs) / sizeof(runs[0]) && is_candidate(r, row->run))
				runs[n_runs++] = row->run;
		}
		int proxy_gone = r->a.metric == WD_METRIC_RATIO && r->proxy_run &&
				 !result_batch_has_run(b, r->proxy_run);
		for (size_t c = 0; c < n_runs; c++) {
			const char *run = runs[c], *example = NULL;
			size_t n = 0, n_tensors = 0, matched = 0, compared = 0;
			for (size_t j = 0; j < b->n_rows; j++) {
				const struct drift_row *row = &b->rows[j];
				if (row->kind != ROW_TENSOR || row->role != ROLE_CANDIDATE || strcmp(row->run, run))
					continue;
				double v = metric_of(r, b, row, proxy_gone);
				if (r->a.scope == WD_SCOPE_TENSORS) {
					n_tensors++;
					example = example ? example : row->tensor;
					if (r->a.tensors && !fnmatch(r->a.tensors, row->tensor, 0)) {
						matched++;
						compared += row->numel > 0;
						struct instance *in = instances_get(&r->set, row->run, row->tensor);
						if (in && !(fresh_only && in->evaluated))
							evaluate(a, r, in, v, b->step);
					}
					continue;
				}
				vals[n] = v;
				compared += row->numel > 0;
				numel[n++] = row->numel;
			}
			if (r->a.scope == WD_SCOPE_TENSORS) {
				glob_matched(r, run, b->step, n_tensors, matched, compared, example);
				continue;
			}
			glob_matched(r, run, b->step, n, n, compared, NULL);	/* none compared: said */
			/* the summary rows' own definition (lib/drift.h), as the drift log has them */
			struct wd_drift_summary d;
			if (wd_drift_summarize(vals, numel, n, &d) < 0)
				log_err("alerts: rule '%s': out of memory; its value is NaN", r->a.name);
			double value = r->a.scope == WD_SCOPE_MAX ? d.max
				     : r->a.scope == WD_SCOPE_MEAN ? d.weighted : d.median;
			struct instance *in = instances_get(&r->set, run, NULL);
			if (in && !(fresh_only && in->evaluated))
				evaluate(a, r, in, value, b->step);
		}
		command_due(a, r);
		save(a, r);
	}
	free(vals);
	free(numel);
}

void alerts_tick(struct alerts *a, const struct state *st)
{
	double t = now_mono();

	for (size_t k = 0; k < a->n_rules; k++) {
		struct rule *r = &a->rules[k];
		/*
		 * Each candidate of the study, since its last snapshot made
		 * durable: this start's, or the WAL's. A run with none is timed
		 * from its last message; a run never seen has no clock to run out.
		 * Messages that make nothing durable (a snapshot its job died in,
		 * a re-run's refused conflicts) do not wind the clock back.
		 */
		for (size_t c = 0; r->a.metric == WD_METRIC_STALLED && c < r->n_cands; c++) {
			const struct run *run;
			for (run = st->runs; run && strcmp(run->name, r->cands[c]); run = run->next)
				;
			double idle;
			if (run && run->durable_mono > 0)
				idle = t - run->durable_mono;
			else if (run && run->durable_wall > 0)	/* from the WAL: since its last durable one */
				idle = now_wall() - run->durable_wall;
			else if (run && run->last_seen)
				idle = t - run->last_seen;
			else
				continue;
			struct instance *in = instances_get(&r->set, run->name, NULL);
			if (in)
				evaluate(a, r, in, idle, run->n_durable ? run->durable[run->n_durable - 1] : -1);
		}
		command_due(a, r);	/* changes held by command_min_interval, when it has passed */
		save(a, r);
	}
}

/*
 * c ran past its command_timeout: killed, with what it started (its own
 * process group), and counted failed now, once. A hung pager held every
 * later change of its rule, unsaid (an ops trial's `sleep` ran on).
 */
static void kill_late(struct child *c, struct rule *rule)
{
	char what[64];

	if (kill(-c->pid, SIGKILL) < 0)	/* not its group's leader yet: before its setsid */
		kill(c->pid, SIGKILL);
	c->killed = 1;
	log_warning("alert '%s': its command ran past command_timeout (%lld s): killed, with what it started",
		    c->rule ? c->rule : "?", (long long)c->timeout);
	snprintf(what, sizeof(what), "timed out after %lld s, killed", (long long)c->timeout);
	if (rule)
		command_failed(rule, what, "");
}

void alerts_reap(struct alerts *a)
{
	int ended = 0;

	for (struct child **p = &a->children; *p;) {
		struct child *c = *p;
		int status;
		pid_t r = waitpid(c->pid, &status, WNOHANG);
		struct rule *rule = NULL;	/* its rule now: a reload since keeps one of that name */
		for (size_t k = 0; c->rule && k < a->n_rules && !rule; k++)
			if (!strcmp(a->rules[k].a.name, c->rule))
				rule = &a->rules[k];
		if (r == 0) {
			/* the timeout now: a reload that lowers it ends a hung run (a review) */
			c->timeout = rule ? rule->a.command_timeout : c->timeout;
			if (!c->killed && now_mono() - c->started > (double)c->timeout)
				kill_late(c, rule);
			p = &c->next;
			continue;
		}
		ended = 1;
		if (rule) {
			rule->child_ended = 1;
			rule->busy_said = 0;	/* a later hold is news again */
		}
		if (r > 0 && !c->killed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
			char what[32];
			const char *hint = WIFEXITED(status) && WEXITSTATUS(status) == 127 ?
					   " (sh: command not found?)" : "";
			snprintf(what, sizeof(what), "%s %d", WIFEXITED(status) ? "exit" : "signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			/* the hint here too: the log is where an operator looks first (a trial) */
			log_warning("alert '%s': its command failed (%s)%s", c->rule ? c->rule : "?", what, hint);
			if (rule)	/* a reload since keeps the counters of a rule it keeps */
				command_failed(rule, what, hint);
		}
		*p = c->next;
		free(c->rule);
		free(c);
	}
	/* what waited for a run of its rule to end goes now, not at the next second's tick */
	for (size_t k = 0; ended && k < a->n_rules; k++) {
		struct rule *r = &a->rules[k];
		if (!r->child_ended)
			continue;
		r->child_ended = 0;
		command_due(a, r);
		save(a, r);
	}
}

void alerts_set_store(struct alerts *a, alert_store fn, void *ctx)
{
	a->store = fn;
	a->store_ctx = ctx;
}

size_t alerts_forget_run(struct alerts *a, const char *run, const struct wd_config *cfg, int live,
			 size_t *firing)
{
	size_t n = 0, f = 0, fk;

	for (size_t k = 0; k < a->n_rules; k++) {
		struct rule *r = &a->rules[k];
		/* study_index is cfg's: the config the rules were set from */
		const struct wd_config_study *st = r->a.study_index < cfg->n_studies ?
						   &cfg->studies[r->a.study_index] : NULL;
		/*
		 * Every instance of a rule goes with the run its value came from
		 * beside the candidate's: the baseline, or a ratio rule's proxy run
		 * (a trial's ratio alert went on firing with its proxy forgotten);
		 * stalled times each candidate on its own.
		 */
		int all = st && r->a.metric != WD_METRIC_STALLED &&
			  (!strcmp(st->baseline, run) || (r->proxy_run && !strcmp(r->proxy_run, run)));
		char reason[400];
		snprintf(reason, sizeof(reason), "run '%.200s' was removed (wdrift runs rm)%s: forgotten, not "
			 "recovered", run, all ? ", which this rule's value was judged against" : "");
		if (live)
			f += resolve_going(a, r, all ? NULL : run, reason, 0);
		n += instances_drop(&r->set, all ? NULL : run, &fk);
		f += fk;	/* firing still: the replay's */
		unmatched_clear(r, run);	/* it named a forgotten snapshot */
	}
	if (firing)
		*firing = f;
	return n;
}

void alerts_restore(struct alerts *a, const struct alert_state *s)
{
	struct rule *r = NULL;

	for (size_t k = 0; k < a->n_rules && !r; k++)
		if (!strcmp(a->rules[k].a.name, s->rule))
			r = &a->rules[k];
	if (!r) {	/* said once, at alerts_restore_done */
		for (size_t k = 0; k < a->n_unknown; k++)
			if (!strcmp(a->unknown[k], s->rule))
				return;
		char **v = realloc(a->unknown, (a->n_unknown + 1) * sizeof(*v));
		if (v && (v[a->n_unknown] = strdup(s->rule)))
			a->n_unknown++;
		if (v)
			a->unknown = v;
		return;
	}
	/*
	 * A reset: a reload dropped the instances (and said so then). Another
	 * definition: the config changed while the daemon was down; what the
	 * rule meant then is not what it means now.
	 */
	if (s->reset || s->def != r->def) {
		instances_drop(&r->set, NULL, NULL);
		r->stale = !s->reset;
		return;
	}
	r->stale = 0;
	r->last_command = s->last_command;
	for (size_t k = 0; k < s->n_inst; k++) {
		const struct alert_inst *x = &s->inst[k];
		struct instance *i = instances_get(&r->set, x->run, x->tensor);
		if (!i) {
			log_err("alert '%s': out of memory restoring its state", r->a.name);
			return;
		}
		i->state = x->state;
		i->prev_state = x->prev_state;
		i->above = x->above;
		i->prev_above = x->prev_above;
		i->step = x->step;
		i->value = x->value;
		i->since = x->since;
		i->has_trans = x->held && x->has_trans;	/* what the held line says */
		i->trans_value = x->trans_value;
		i->trans_step = x->trans_step;
		i->trans_threshold = x->trans_threshold;
		/* a firing one fires no second time (no event, no command); one held is owed still */
		i->told = (x->state == FIRING) != x->held;
		i->evaluated = 1;
		i->dirty = 0;
	}
}

void alerts_drop_former(struct alerts *a)
{
	for (size_t k = 0; k < a->n_rules; k++)
		drop_former(a, &a->rules[k], "the config read at this start");
}

void alerts_restore_done(struct alerts *a)
{
	size_t n = 0, firing = 0, pending = 0;

	for (size_t k = 0; k < a->n_rules; k++) {
		struct rule *r = &a->rules[k];
		if (r->stale) {
			log_notice("alert '%s': its study, metric, scope, tensors or proxy changed since "
				   "its state was written: it starts afresh", r->a.name);
			save_reset(a, r);	/* so that the next start does not say it again */
			r->stale = 0;
		}
		n += r->set.n;
		firing += instances_count(&r->set, FIRING);
		pending += instances_count(&r->set, PENDING);
	}
	for (size_t k = 0; k < a->n_unknown; k++) {
		log_notice("alert '%s' is no longer in the config: its state from before the restart "
			   "is dropped", a->unknown[k]);
		save_reset_of(a, a->unknown[k], 0);
		free(a->unknown[k]);
	}
	free(a->unknown);
	a->unknown = NULL;
	a->n_unknown = 0;
	if (n)
		log_notice("alerts: %zu instance%s restored from the write-ahead log (%zu firing, "
			   "%zu pending)", n, n == 1 ? "" : "s", firing, pending);
}

char *alerts_json(const struct alerts *a)
{
	static const char *const names[] = { "inactive", "pending", "firing" };
	json_t *list = json_array();

	for (size_t k = 0; k < a->n_rules; k++) {
		const struct rule *r = &a->rules[k];
		json_t *inst = json_array();
		for (const struct instance *i = r->set.head; i; i = i->next) {
			json_t *o = json_pack("{s:s,s:s,s:o,s:o,s:I}", "run", i->run,
				"state", names[i->state], "value",
				isfinite(i->value) ? json_real(i->value) : json_null(),
				"step", i->step >= 0 ? json_integer((json_int_t)i->step) : json_null(),
				"above", (json_int_t)i->above);
			if (i->tensor)
				json_object_set_new(o, "tensor", json_string(i->tensor));
			if (i->since > 0)
				json_object_set_new(o, "since", json_real(i->since));
			json_array_append_new(inst, o);
		}
		int stalled = r->a.metric == WD_METRIC_STALLED;
		json_t *rule = json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:f,s:o,s:s,s:o}",
			"name", r->a.name, "study", r->a.study, "metric", wd_config_metric_name(r->a.metric),
			"scope", stalled ? json_null() : json_string(wd_config_scope_name(r->a.scope)),
			"tensors", r->a.tensors ? json_string(r->a.tensors) : json_null(),
			"proxy", r->a.proxy ? json_string(r->a.proxy) : json_null(),
			"threshold", r->a.threshold,
			"for", stalled ? json_null() : json_integer((json_int_t)r->a.for_count),
			"severity", wd_config_severity_name(r->a.severity), "instances", inst);
		if (rule && r->unmatched)	/* only then */
			json_object_set_new(rule, "unmatched", json_string(r->unmatched));
		if (rule && r->a.command) {	/* as /metrics: rules with a command now */
			json_t *cmd = json_pack("{s:I,s:I,s:o,s:I}", "runs", (json_int_t)r->commands_run,
				"failed", (json_int_t)r->commands_failed, "last_failure", r->commands_failed ?
				json_string(r->command_failure) : json_null(), "timeout", (json_int_t)r->a.command_timeout);
			const struct child *c = running(a, r->a.name);
			if (cmd && c)	/* only then: its later changes wait for it */
				json_object_set_new(cmd, "running_for", json_real(now_mono() - c->started));
			if (cmd && command_owed(r))	/* only then: held, by the interval or a run still running */
				json_object_set_new(cmd, "held", json_true());
			json_object_set_new(rule, "command", cmd);
		}
		json_array_append_new(list, rule);
	}
	json_t *o = json_pack("{s:i,s:b,s:o}", "v", 1, "ok", 1, "alerts", list);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

void alerts_free(struct alerts **pa)
{
	struct alerts *a = *pa;
	if (!a)
		return;
	rules_free(a);
	for (size_t k = 0; k < a->n_unknown; k++)
		free(a->unknown[k]);
	free(a->unknown);
	for (struct child *c = a->children, *n; c; c = n) {
		n = c->next;
		free(c->rule);
		free(c);
	}
	free(a);
	*pa = NULL;
}

void alerts_each(const struct alerts *a, void (*fn)(void *ctx, const struct alert_view *v),
		 void *ctx)
{
	for (size_t k = 0; k < a->n_rules; k++) {
		const struct rule *r = &a->rules[k];
		struct alert_view v = { .rule = &r->a, .unmatched = r->unmatched != NULL,
					.commands_run = r->commands_run, .commands_failed = r->commands_failed };
		if (!r->set.head)
			fn(ctx, &v);
		for (const struct instance *i = r->set.head; i; i = i->next) {
			v.run = i->run;
			v.tensor = i->tensor;
			v.state = i->state;
			v.value = i->value;
			v.step = (long long)i->step;
			fn(ctx, &v);
		}
	}
}
