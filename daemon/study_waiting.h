/*
 * study_waiting.h: why a study has no results yet, from the snapshots the
 * daemon holds and the config. A new user's trial got only "no results
 * for study 'al' yet" for a candidate whose steps (5, 15, 25) never met the
 * baseline's (0, 10, 20) under alignment.tolerance 0, and for a baseline
 * whose name a reload had mistyped: both said now, where the user asks.
 * Depends on the config and the main thread's state (state.h).
 */
#ifndef WD_STUDY_WAITING_H
#define WD_STUDY_WAITING_H

#include <stddef.h>

#include <jansson.h>

#include "config.h"
#include "result_batch.h"
#include "state.h"

/*
 * Into buf, to follow "no results for study 'S' yet": "; " and what
 * holds it up (the baseline has no snapshot, with the name of a run that
 * has some when it looks like a typo of it; a run whose snapshots are
 * none of them within alignment.tolerance of the baseline's; aligned
 * snapshots waiting for the compute thread), or "" when nothing is held.
 * Returns 1 when nothing held can be compared (the study waits for its
 * runs to send), 0 when aligned snapshots are held.
 */
int study_waiting(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		  char *buf, size_t len);

/*
 * Into buf, as "; " and a clause each: the study's runs (baseline,
 * candidates, trained proxies) that have no snapshot at all, each with the
 * run of a near name that has some (a typo in a reload, often); the first
 * three said, the rest counted. Returns how many; buf "" when none. For a
 * study that has results, whose rows then are not its runs' now: `drift`
 * and `studies` say it beside them. shown (NULL: none): the step's results
 * beside which it is said: a near run with rows there that the study no
 * longer names was its own before a reload, and is named so.
 */
size_t study_silent(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		    const struct result_batch *shown, char *buf, size_t len);

/*
 * Into buf: why rows of run r may not be its job's now, when snapshots of r
 * were refused as conflicts (a re-run under the same name; the WAL's
 * "conflict" records and those since): "'fa' (candidate): 2 snapshots
 * refused as conflicts (other content at a step it has, or a re-run's
 * later step), the latest step
 * 10 at ... UTC: a re-run under the same name? ...". The role is r's in st, or (st NULL) in the first
 * study of cfg naming it. Returns 0 and buf "" when r has no conflict.
 */
int run_refused(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
		char *buf, size_t len);

/* The same for each of study s's runs that has conflicts, joined by "; "; how many. */
size_t study_refused(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		     char *buf, size_t len);

/*
 * Into buf: why rows of run r are of two jobs, when two published it at
 * once, each as its only rank (peers.c, run_note_mixed; the WAL's "mixed" record):
 * "'mix' (candidate): 2 jobs published it at once, each as its only rank,
 * from step 5 at ... UTC (ipc pid 4242 and ipc pid 4300): ...". Kept after
 * the jobs end, until runs rm. Returns 0 and buf "" when none did.
 */
int run_mixed(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
	      char *buf, size_t len);

/* The same for each of study s's runs that two jobs published, joined by "; "; how many. */
size_t study_mixed(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   char *buf, size_t len);

/*
 * Into buf: the steps of r refused incomplete (the WAL's "expired"
 * records, and those since), never durable (a rank that died): "'fa'
 * (candidate): 1 step expired incomplete, never durable, the latest step
 * 20 at ... UTC (expired after 600 s waiting for the other ranks: rank 2
 * of 4 never committed; ...)". Returns 0 and buf "" when none was.
 */
int run_expired(const struct wd_config *cfg, const struct wd_config_study *st, const struct run *r,
		char *buf, size_t len);

/*
 * Into buf, each of study s's compared runs with snapshots past its
 * baseline's latest step (beyond alignment.tolerance), which no row can
 * hold until the baseline sends those steps: "'fa' (candidate) has 3
 * snapshots past baseline 'base''s latest step 60 (steps 70 to 90)", joined
 * by "; ", then when the baseline last sent; how many runs (len 0, buf
 * NULL: only counted). A stopped baseline had every view say all was
 * well at its last step (a trial).
 */
size_t study_ahead(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   char *buf, size_t len);
/*
 * Into buf, each of study s's runs with snapshots none of which aligns to
 * a baseline step (a proxy saved at steps 5, 15, ... beside a baseline at
 * 0, 10, ...), which no row will ever hold: what study_waiting says of a
 * study with no results, said under the rows of one that has some, where
 * `drift` said only "not compared at this step yet" (a trial); how many.
 */
size_t study_unaligned(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		       char *buf, size_t len);
/*
 * The same for each of study s's runs whose latest news that is (no step
 * of it durable after the one that expired), joined by "; "; how many.
 */
size_t study_expired(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		     char *buf, size_t len);

/*
 * Into buf, each of study s's compared runs whose snapshot at the step of
 * b (its aligned step) has tensors the baseline's lacks, which no row
 * holds, or tensors in another shape than the baseline's, whose max|d|
 * and rel L2 mean nothing: "'fa' (candidate) at its step 10 has 1 tensor
 * that the baseline lacks, not compared, and 2 tensors in another shape
 * ...", from the snapshots' identities (names hashed: the daemon's log
 * names the first), joined by "; "; how many. Said only in the log
 * before, while `wdrift compare` says both (a trial's).
 */
size_t study_unmatched(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		       const struct result_batch *b, char *buf, size_t len);

/*
 * Into buf, each snapshot of study s's runs held up in intake: a step that
 * waits for a rank whose lag or death the daemon has logged, or one idle
 * (snapshot_idle) for INGEST_LAG_SECONDS (half of limits.pending_timeout
 * when less): "'fa' (candidate) step 20 waits for rank 2 of 4, ...: no row
 * holds it until it is whole; it expires, never durable, in 480 s unless
 * a new element of it comes (limits.pending_timeout, 600 s)", the first
 * three said, joined by "; ", the rest counted; how many (len 0, buf
 * NULL: only counted, for /metrics). A trial's drift showed the last
 * complete step as all there was, while a later one waited on a dead rank.
 */
size_t study_stuck(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   char *buf, size_t len);

/*
 * Into never ({run: why}), each of study s's runs that b has no rows of
 * and none on their way: none of its snapshots aligns to b's step, none
 * near it is held in intake, and either its step there expired incomplete
 * (when and why, from the latest RUN_EXPIRED_KEPT expiries: until its job
 * sends the step again), or it has durable steps after it (it sent none
 * there, or one nearer another baseline step), or none of its steps up to
 * the baseline's latest aligns to one of the baseline's (study_unaligned's
 * runs). How many. A trial's
 * `drift --step 1`, whose candidate step 1 expired after a rank died, read
 * "not compared at this step yet" and "lagging", as if it were to come.
 * Also a run whose latest step is before b's and that no publisher is
 * connected for now (publishers(ctx, run), when given, is 0): its job
 * ended or has not reconnected, and nothing of it is on its way (a later
 * trial's finished jobs were "lagging ... yet").
 * Nothing for stale rows (another baseline than s's now).
 */
size_t study_never(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
		   const struct result_batch *b, json_t *never, size_t (*publishers)(void *ctx, const char *run),
		   void *ctx);

/* Has run no durable snapshot at all (never sent, or all of it removed by runs rm)? */
int study_run_silent(struct state *st, const char *run);
/* How many of the study's runs have no snapshot at all: no name looked up near them (status). */
size_t study_silent_count(struct state *st, const struct wd_config_study *s);

/*
 * The same for one step, to follow "no results for study 'S' at step N":
 * the baseline has no snapshot there (rows are made at its steps), or no
 * candidate or proxy has one within alignment.tolerance of it, or some
 * have, not compared yet; study_waiting's words when the baseline has no
 * snapshot at all.
 */
void study_waiting_step(const struct wd_config *cfg, struct state *st, const struct wd_config_study *s,
			int64_t step, char *buf, size_t len);

/*
 * Has run r (NULL: none) a durable step within tol of the baseline's step
 * bstep that belongs to it by the alignment rule (the nearest baseline
 * step, the earlier of two as near: spool_nearer)? base must not be NULL.
 */
int study_run_aligned(const struct run *r, const struct run *base, int64_t bstep, int64_t tol);
/*
 * Which: r's durable step that belongs to bstep, the nearest (the exact
 * step, then the lower of two as near): the step its row at bstep
 * compared, as spool_index_aligned finds it on the compute thread. -1: none.
 */
int64_t study_run_step(const struct run *r, const struct run *base, int64_t bstep, int64_t tol);

/*
 * The run with snapshots whose name is nearest run (state_run_suggest),
 * into best; *owner the first study of cfg that names it, or NULL (a run
 * no study names: a typo's likelier target). 0 when no run has snapshots.
 */
int study_near_run(const struct wd_config *cfg, struct state *st, const char *run, char *best,
		   size_t size, const char **owner);

/*
 * For a reload: the runs that next's studies name anew (not in old's
 * study of the same name) which have no snapshot while a run with a near
 * name has some (a typo: the study would wait for ever, and `drift` go
 * on showing the old rows), each as a warning appended to list and
 * logged; when a study of next names that near run, the warning asks
 * whether the new one has not sent yet, and a study new in next is not
 * warned of it.
 */
void study_waiting_reload(const struct wd_config *old, const struct wd_config *next, struct state *st,
			  json_t *list);

#endif
