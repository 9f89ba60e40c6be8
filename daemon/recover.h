/*
 * recover.h: start-up after a crash or a stop (docs/storage.md, docs/daemon.md
 * "Start-up"): the WAL's records replayed into the main thread's state (the
 * durable steps and their identities) and into notes of what was computed
 * and dropped; the spool swept of files no record names; then every
 * durable snapshot handed to the compute thread, and those whose results
 * are missing computed again. records.h decodes; this only dispatches on
 * the kind. Alert records go to alerts_restore, in log order. Depends on
 * libc, state.h, config.h, compute.h, records.h, spool_index.h, alerts.h.
 */
#ifndef WD_RECOVER_H
#define WD_RECOVER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "state.h"

struct alerts;
struct compute;
struct result_batch;

/* A (study, run, step) the replay saw: a result's rows, or a drop (study NULL). */
struct recovered {
	char *study, *run;
	int64_t step;
};

struct recovery {
	struct state *st;		/* the durable steps go here */
	const struct wd_config *cfg;
	struct alerts *alerts;		/* "alert" records go here; NULL: skipped */
	char **results;			/* the result records' payloads, in order */
	size_t n_results, cap_results;
	struct recovered *covered;	/* runs with a logged result, per study and baseline step */
	size_t n_covered, cap_covered;
	struct recovered *dropped;	/* spool files retention removed */
	size_t n_dropped, cap_dropped;
};

/* One record of the replay (a wal_replay_fn, ctx a struct recovery): never stops it. */
int recover_record(void *ctx, const char *payload, size_t len);
/*
 * After the replay: a run that holds nothing, no durable step and none
 * expired (only "conflict" or "mixed" records: each snapshot of it was
 * refused whole), is forgotten, as it was when its last snapshot went
 * (ingest_drop_snapshot); the replay made it again (a review's came back
 * from a restart, with a conflict and a slot of limits.max_runs).
 */
void recover_done(struct recovery *rc);
/* The spool's start-up sweep (spool_sweep) against the replayed durable steps. */
void recover_sweep(struct recovery *rc, const char *storage_dir, int force);
/*
 * Hands the compute thread every durable snapshot whose file is kept, and
 * resubmits those without a logged result in a study (a candidate's or a
 * proxy's, or a baseline step without its synthetic proxy's row); removes
 * the files of drops a crash kept from going; marks each run that has rows
 * in a study and is named in none now with that study (run->left_study).
 * Then frees the notes.
 */
void recover_resume(struct recovery *rc, struct compute *c);
/* The result records decoded, in order, for the kept results ("drift"); *n of them. */
struct result_batch **recover_batches(const struct recovery *rc, size_t *n);
/* Takes the result payloads (for the compute thread); rc forgets them. */
char **recover_take_results(struct recovery *rc, size_t *n);
/* Frees what is left: the results not taken, the notes. */
void recover_release(struct recovery *rc);

#endif
