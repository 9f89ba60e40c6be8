/*
 * alerts.h: alert rules over drift (docs/config.md, "alerts"), with the
 * lifecycle of Prometheus alerting: a rule's instance (one per candidate,
 * and per tensor for scope: tensors) goes pending when its value is above
 * the threshold, firing after `for` consecutive snapshots above it, and
 * resolved when it drops back. Each transition to firing or resolved goes
 * to the log (at the rule's priority), to the events socket (by the
 * caller), and to the rule's command, run with the alert JSON on stdin
 * (one line per instance), at most once per command_min_interval with the
 * changes meanwhile held, never waited for. Runs in the main thread.
 *
 * The instances are kept through restarts (docs/reliability.md, "Alert
 * state"): each evaluation that changes them hands an "alert" record
 * (records.h) to the store, and a start-up gives the replayed records back
 * to alerts_restore.
 */
#ifndef WD_ALERTS_H
#define WD_ALERTS_H

#include <stddef.h>

#include "config.h"
#include "state.h"

struct alerts;
struct alert_state;
struct result_batch;

/* Called for each transition with the alert's JSON (topic "alert.NAME"). */
typedef void (*alert_sink)(void *ctx, const char *topic, const char *json);

/* Keeps one "alert" record (a NUL-terminated payload): 0, or -errno. */
typedef int (*alert_store)(void *ctx, const char *payload);

struct alerts *alerts_new(alert_sink sink, void *ctx);
/*
 * A new config: instances of rules that keep their name and what their
 * instances mean (study, metric, scope, tensors, proxy) keep their state;
 * the others start afresh, said in the log, with a reset record stored.
 */
void alerts_set_config(struct alerts *a, const struct wd_config *cfg);
/* Evaluates the rules of the batch's study on its candidates. */
void alerts_on_results(struct alerts *a, const struct result_batch *b);
/*
 * The same, for the instances never evaluated only (a start's, whose
 * inactive instances are not kept; a rule or a candidate new): the
 * catch-up judges each on its candidate's newest results first.
 */
void alerts_on_results_fresh(struct alerts *a, const struct result_batch *b);
/*
 * Each second: evaluates "stalled" rules (seconds since each run's last
 * snapshot), and gives each command the changes held for it once its
 * command_min_interval has passed.
 */
void alerts_tick(struct alerts *a, const struct state *st);
/* Reaps finished alert commands and logs their failures. */
void alerts_reap(struct alerts *a);
/* Where the records go from now on (the WAL); NULL: nowhere. Not during restore. */
void alerts_set_store(struct alerts *a, alert_store fn, void *ctx);
/*
 * runs rm: drops the instances of run, and all those of the rules of a
 * study whose baseline run is, and of the ratio rules whose proxy's run it
 * is (each was judged against it; stalled rules aside, which time each
 * candidate on its own). With live, the firing ones are resolved first,
 * their event, log line and command saying the run was removed (a pager
 * waited for ever: a trial's); *firing (may be NULL): how many. The replay
 * calls it (live 0: silent) at the "forget" record, so that the instances
 * restored before it do not come back.
 */
size_t alerts_forget_run(struct alerts *a, const char *run, const struct wd_config *cfg, int live,
			 size_t *firing);
/* One replayed "alert" record, in log order, after alerts_set_config. No event, no command. */
void alerts_restore(struct alerts *a, const struct alert_state *s);
/* After the replay (and alerts_set_store): logs what was restored and what was dropped. */
void alerts_restore_done(struct alerts *a);
/*
 * Drops the restored instances of runs the config read at this start no
 * longer names as candidates, a firing one resolved first with its reason
 * (event, log, command). At the start's catch-up, once subscribers can be
 * there to hear it: a reload does the same as it sets the rules.
 */
void alerts_drop_former(struct alerts *a);
/*
 * {"alerts": [...]}: every rule (name, study, metric, scope, tensors, proxy,
 * threshold, for, severity) and its instances, for the control socket.
 */
char *alerts_json(const struct alerts *a);
void alerts_free(struct alerts **a);

/* One alert instance, read-only, as alerts_each shows it (metrics.c). */
struct alert_view {
	const struct wd_config_alert *rule;
	const char *run, *tensor;	/* run NULL: the rule has no instance yet;
					   tensor NULL unless scope: tensors */
	int state;			/* 0 inactive (resolved or never above), 1 pending, 2 firing */
	double value;			/* the last value evaluated */
	long long step;
	int unmatched;			/* the rule's glob matched none of a candidate's tensors (its sentence) */
	uint64_t commands_run;		/* the rule's command since the start: runs started, */
	uint64_t commands_failed;	/* and runs that failed (not started, exit not 0, a signal) */
};
/* Calls fn for each instance of each rule, rules in config order; once with run NULL for a rule
 * with none. The pointers are valid during the call only. */
void alerts_each(const struct alerts *a, void (*fn)(void *ctx, const struct alert_view *v),
		 void *ctx);

#endif
