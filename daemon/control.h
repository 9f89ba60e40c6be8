/*
 * control.h: the control socket's requests (docs/protocol.md, "Control"):
 * one JSON request in, one JSON reply out. Never blocks on a client:
 * everything it reports is the main thread's own state, except the reply
 * to `drift`, whose size grows with the study's (the query thread,
 * query.h, builds it and the main loop sends it when done), and a `runs
 * rm` that waits for a run to be free (rm_wait.h). No sockets here.
 */
#ifndef WD_CONTROL_H
#define WD_CONTROL_H

#include <stddef.h>

#include "config.h"
#include "compute.h"
#include "state.h"
#include "rm_wait.h"

struct config_file;

struct spool;
struct result_batch;
struct alerts;
struct query;
struct query_envelope;
struct query_job;
struct json_t;

/* forget's how: remove even with publishers connected; only say whether it would remove now */
#define FORGET_FORCE 1u
#define FORGET_CHECK 2u
/*
 * FORGET_FORCE also drops a snapshot being received once a rank's death or
 * lag is said for it, or once nothing new of it has come for this many
 * seconds: a dead rank's, not a step a job still streams.
 */
#define RM_FORCE_IDLE_S 10

/* What runs rm forgot of a run (the "runs_rm" reply). */
struct forgotten {
	size_t steps, results;	/* durable steps; result records with its rows */
	size_t alerts, firing;	/* alert instances dropped, and how many of them were firing */
	size_t publishers;	/* still connected (FORGET_FORCE): their next snapshots start it afresh */
	size_t received;	/* steps being received dropped (FORGET_FORCE: a rank that died) */
	char publishers_who[400];	/* peers_publishing's list of them */
};

struct control {
	struct state *st;
	const struct wd_config *cfg;	/* the running config; reload swaps it */
	const char *engine;		/* wd_engine_describe() */
	const char *storage;		/* storage.dir, absolute (a relative one follows the cwd) */
	const char *storage_note;	/* a warning about it, or NULL (main.c's storage_elsewhere) */
	struct spool *spool;
	/*
	 * SIGHUP's work: 0, with *changes (when changes is not NULL) what
	 * changed (config_diff.h), or -1 with err (the old config stays)
	 */
	int (*reload)(void *ctx, struct json_t **changes, char *err, size_t errlen);
	void *reload_ctx;
	/*
	 * runs rm, with reload_ctx: 0 (*gone: what was forgotten), or -errno
	 * with err: -EAGAIN while a publisher of the run is connected (unless
	 * FORGET_FORCE), -EBUSY while a snapshot of it is being received or
	 * stored, either of which a wait may end. With FORGET_CHECK only the
	 * answer: 0 when it would forget it now, and nothing done.
	 */
	int (*forget)(void *ctx, const char *run, unsigned how, struct forgotten *gone, char *err, size_t errlen);
	/* with reload_ctx: the publishers of run connected now (peers.h); NULL: not known */
	size_t (*publishers)(void *ctx, const char *run);
	/* with reload_ctx: the jobs publishing run as its only rank now, in who (peers_jobs) */
	size_t (*jobs)(void *ctx, const char *run, char *who, size_t len);
	/* with reload_ctx: whether the ingest connection of routing id rid is open (peers.h); NULL: not known */
	int (*connected)(void *ctx, const void *rid, size_t len);
	size_t compute_depth;			/* updated by the loop */
	struct spool_usage spool_usage;		/* updated by the loop (compute_spool) */
	struct alerts *alerts;
	/* the latest results per (study, step), for "drift"; each indexed by (run, tensor) */
	struct result_batch **results;
	size_t n_results, cap_results;
	struct query *query;		/* the query thread; NULL: drift replies built inline */
	struct config_file *config_file;	/* does the file say what runs? NULL: not asked */
	struct rm_waiting rm_waiting;	/* runs rm requests waiting for publishers to disconnect */
};

/*
 * Whether b has rows of every run of study st (each candidate, each proxy,
 * the synthetic proxy) against st's baseline (not one a reload replaced):
 * the step is complete, every run compared. A candidate or trained proxy
 * that has sent no snapshot at all (in state s; NULL: none is) is not
 * waited for: a proxy a reload adds took every ratio series and the
 * alerts' catch-up with it until its job started, and a typo for ever
 * (wdrift_study_runs_silent says it). Metrics and the alerts' catch-up
 * read only such steps.
 */
int control_step_complete(struct state *s, const struct wd_config_study *st, const struct result_batch *b);
/*
 * Has study s results against its baseline now? Newest first: only a stuck
 * study costs a scan of the kept results.
 */
int control_has_current_results(const struct control *c, const struct wd_config_study *s);

/* The kept result of study at its latest complete step; NULL when none is complete. */
struct result_batch *control_latest_complete(const struct control *c, const char *study);
/*
 * Evaluates every alert rule against the latest complete step of its study
 * (docs/config.md, "Alerts"): at start-up and after a reload, so that a rule
 * added then does not wait for the next results. An instance that has
 * evaluated that step gets the same state again (its evaluation redone);
 * one that has evaluated a later step is left as it is. start: the
 * start-up's, where instances the WAL did not keep (inactive ones; a rule
 * new while the daemon was down) are first judged on their candidate's
 * newest results, as they were live before the stop.
 */
void control_alerts_catch_up(struct control *c, int start);
/* Keeps b (taking it) as the latest result of its study and step. */
void control_add_result(struct control *c, struct result_batch *b);
/* Stops the query thread, then drops the kept results. */
void control_release(struct control *c);
/*
 * Takes run out of the kept results (runs rm): its rows, and batches it was
 * baseline of. A batch a query is reading is replaced by a copy, not changed.
 */
void control_forget(struct control *c, const char *run);

/* Starts the query thread. Returns 0 or -errno (drift replies are then built inline). */
int control_start(struct control *c);
/* Readable when a reply of the query thread waits for control_take; -1 without one. */
int control_fd(const struct control *c);
/* A finished drift query: its reply and whom it goes to; the caller frees it. NULL: none. */
struct query_job *control_take(struct control *c);

/*
 * A runs rm request that waited (rm_wait.h) and is due now: its run could
 * be removed now ("again": the client asks again), its wait is up
 * (refused), or stopping (the daemon stops: each is refused). *to is its
 * client, and the return its reply (malloc'd JSON; NULL when out of
 * memory): the caller sends the reply there, then frees both. *to NULL:
 * none is due.
 */
char *control_rm_due(struct control *c, int stopping, struct query_waiter **to);
/* When the first waiting runs rm request's wait is up (now_mono()), or 0 when none waits. */
double control_rm_deadline(const struct control *c);

/*
 * Handles one request from the client of env (its routing envelope).
 * Returns the reply (malloc'd JSON), or NULL when the query thread will
 * build it (a drift query; the reply then comes through control_take),
 * or when a runs rm waits for the run's publishers (control_rm_due).
 */
char *control_request(struct control *c, const void *req, size_t len,
		      const struct query_envelope *env);
/* Handles one request here and now; returns the reply (malloc'd JSON). Never NULL. */
char *control_handle(struct control *c, const void *req, size_t len);

#endif
