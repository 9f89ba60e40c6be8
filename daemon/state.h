/*
 * state.h: what the daemon's main thread knows: runs, snapshots being
 * assembled, counters. Owned and touched by the main thread only; workers
 * get copies through their queues (daemon.md). Depends on libc, wdrift.h,
 * wire.h.
 */
#ifndef WD_STATE_H
#define WD_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "kept_bufs.h"
#include "names.h"
#include "wdrift.h"
#include "wire.h"

#define IDENTITY_MAX 256	/* bytes of a ZeroMQ routing id */

/* One tensor being assembled from shards. */
struct tensor_buf {
	char *name;
	enum wd_dtype dtype;
	int ndims;
	uint64_t shape[WIRE_MAX_DIMS];
	uint64_t total, covered;	/* elements; complete when equal */
	uint64_t (*ranges)[2];		/* received [begin, end), for overlaps */
	uint32_t *crcs;			/* CRC-32 of each range's bytes, as ranges */
	size_t n_ranges;
	void *data;			/* total elements, reserved against the budget;
					   NULL in a re-send being checked (recheck) */
	uint64_t overhead;		/* bytes besides its elements, reserved too (ingest_room.c) */
	uint64_t sender;		/* who sent its first shard: a hash of the routing id */
};

/* A publisher waiting for a snapshot's ack: its routing id. */
struct waiter {
	size_t len;
	unsigned char id[IDENTITY_MAX];
};

#define WAITERS_MAX 1024	/* ranks of one snapshot that may wait for its ack */
#define MIXED_TOLD_MAX 16	/* connections a run two jobs publish tells so, at their ack */

/* A snapshot (run, step) whose tensors are arriving. */
struct snapshot {
	struct run *run;
	int64_t step;
	struct tensor_buf *tensors;
	size_t n_tensors, cap_tensors;
	struct names names;		/* the tensors by name */
	uint64_t bytes;			/* reserved for its elements */
	uint64_t overhead;		/* reserved besides: its tensors' overhead */
	double last_seen;		/* monotonic seconds */
	double last_taken;		/* when a shard of it was last accepted */
	uint64_t taken;			/* bytes of its elements received: bytes - taken are holes */
	double win_start;		/* its intake rate: bytes taken since win_start, */
	uint64_t win_bytes;		/* and the rate of the window before (-1: none yet) */
	double prev_rate;
	int committing;			/* handed to the spool thread */
	int recheck;			/* a re-send of a durable step: only checked */
	int conflict;			/* refused whole, or recheck: it differs; why says how */
	int code;			/* enum wire_code of that refusal: 0 is conflict */
	char why[256], field[32];
	/*
	 * The publisher sessions that sent it shards, before and after it was
	 * refused whole (a job's ranks, a sender that reconnected): they keep
	 * its refusal; a session not among them may take the step anew
	 * (ingest.c: refusal_outlived). told_full: more than fit, so any may be.
	 */
	uint64_t told[8];
	size_t n_told;
	int told_full;
	uint64_t want;			/* tensors its commits said (0: no commit yet) */
	uint64_t ranks_said;		/* ranks its waiting commits said (0: none yet) */
	uint64_t ranks_differ;		/* another count of ranks a commit of it said (0: none) */
	struct waiter *waiters;		/* who committed: each gets the ack */
	size_t n_waiters;
	/* commits that gave "rank": a bit per rank committed (commit_ranks.h); NULL: none did */
	uint8_t *ranked;
	uint64_t ranks_of, n_ranked;	/* the ranks they said; how many distinct committed */
	struct rank_session {		/* a rank noted, and the session of its first commit (0: none) */
		uint64_t rank, session;
	} *rank_sessions;
	size_t n_rank_sessions, cap_rank_sessions;
	int64_t twice_rank;		/* the first rank committed by two sessions, or -1 */
	double first_ranked;		/* monotonic s of its first ranked commit (0: none yet) */
	int lag_said;			/* a rank's lag said (ingest_lag_tick), or its death (peers.c) */
	int overlapped;			/* a piece came over elements it had (the same bytes): sent twice */
	uint64_t n_twice;		/* ranks committed by two sessions (the same rank= given twice?) */
	/*
	 * The sessions that sent it shards or commits, each with whether it has
	 * committed (commit_ranks_part): a publisher that sent parts and has
	 * not committed yet is a rank still to come, whatever count the
	 * commits said; at most COMMIT_PARTS_MAX (parts_full past it).
	 */
	struct part_session { uint64_t session; int committed; } *parts;
	size_t n_parts, cap_parts;
	int parts_full;
	struct snapshot *next;
};

struct snap_id;

#define RUN_EXPIRED_KEPT 16	/* expired steps a run keeps (struct run) */

/* One step of a run refused incomplete (run_note_expired). */
struct run_expiry {
	int64_t step;
	double wall;		/* Unix seconds */
	char why[512];		/* as its ranks were told (ingest_expire's) */
	int replayed;		/* from the WAL's "expired" record: this start's log has not said it */
};
#define WD_RUN_MIXED_WHO 176	/* two peer addresses (peers.c: 80 bytes each) and " and " */

struct run {
	char *name;
	int64_t *durable;		/* durable steps, ascending */
	struct snap_id **ids;		/* each durable step's content (identity.h); NULL: unknown */
	size_t n_durable, cap_durable;
	int study_checked;		/* the no-study notice was considered (again after a reload) */
	char *left_study;		/* the study a reload took it out of, named in no study since; or NULL */
	int left_before_start;		/* left_study: found at start-up (rows there), not seen in a reload */
	int conflict_logged;		/* a conflict at conflict_step was logged */
	/*
	 * What differs in its tensor names from each study's baseline, as its
	 * job is told (ingest_tell_names): per study (a hash of its name), the
	 * latest step seen, the note's hash (0: the names match), and how
	 * often they have matched again (a difference after that is told anew)
	 */
	struct names_told {
		uint64_t study, text;
		int64_t step;
		uint32_t matched;
	} names_told[4];
	size_t n_names_told;
	int ranks_differ_said;		/* commits of a step said two counts of ranks: said (ingest.c) */
	uint64_t dead_rank;		/* 1 + the rank peers.c said died, until it commits again; 0: none */
	int64_t ranks_step;		/* the step of the last commit that said ranks, and how many */
	uint64_t ranks_of_step;
	int64_t conflict_step;		/* the latest step refused as a conflict */
	/*
	 * Snapshots refused as conflicts (a re-run under the same name, most
	 * often), replayed from the WAL's "conflict" records at a start and
	 * noted since, and the Unix seconds of the latest: said beside the
	 * rows they leave standing (study_refused), counted in `runs`.
	 */
	uint64_t conflicts;
	/* of them, from the job that had published the run before (run_conflict_own): its step count went back */
	uint64_t conflicts_own;
	double conflict_wall;
	/*
	 * Steps of it refused incomplete (a rank that never committed its
	 * part: the step expired, or every rank committed and it was not
	 * whole), never durable, replayed from the WAL's "expired" records at
	 * a start and noted since: how many, and the latest
	 * RUN_EXPIRED_KEPT of them, each with its Unix seconds and why (the
	 * i-th of the n_expiries kept at i % RUN_EXPIRED_KEPT; NULL until the
	 * first; run_last_expiry). Said by runs, by its studies' drift while no
	 * later step of it is durable (run_expired), and by `drift --step N`
	 * at such a step, as not to be compared unless its job sends it again
	 * (study_never), not as one on its way.
	 */
	uint64_t expired;
	struct run_expiry *expiries;
	uint64_t n_expiries;
	/* the conflict last logged whole (its way out): monotonic seconds, 0 none; its step */
	double conflict_full_at;
	int64_t conflict_full_step;
	/*
	 * Two jobs published it at once, each as its only rank (peers.c):
	 * how many times a second job was seen beside another, and the step,
	 * Unix seconds and the two of the first time. Its steps are both
	 * jobs' from then on, which nothing tells apart later: said by runs
	 * and by its studies' drift (run_mixed) until runs rm. The first time
	 * is in the WAL (a "mixed" record), and said after a restart too; the
	 * times seen count since the start.
	 */
	uint64_t mixed;
	int mixed_replayed;		/* the first time was before this start: its "mixed" record */
	int64_t mixed_step;
	double mixed_wall;
	char mixed_who[WD_RUN_MIXED_WHO];
	/* the connections (routing ids) whose ack said it already (ingest_spooled), up to MIXED_TOLD_MAX */
	struct waiter *mixed_told;
	size_t n_mixed_told;
	/*
	 * The sessions of the publishers whose commits of r came (wire.h),
	 * at most RUN_SESSIONS_MAX (sessions_full: more came). A commit of a
	 * step just refused from one of them is that job's re-send; one from a
	 * session never seen is a new job's (ingest.c). In memory only.
	 */
	uint64_t *sessions;
	uint32_t n_sessions;
	int sessions_full;
	/*
	 * Those of them with a commit of r not refused as a conflict: the job
	 * that publishes it, whose later conflict is its own step count going
	 * back, not a re-run (ingest_conflict_reason). In memory only.
	 */
	uint64_t *clean_sessions;
	uint32_t n_clean_sessions;
	int clean_sessions_full;
	/*
	 * The sessions whose first commit of r was step 0, which r holds: a
	 * job started over from training's start (a re-run, or a job
	 * restarted from step 0 that sends the same bytes), where a job
	 * resumed from a checkpoint begins later. One of them refused a
	 * conflict at a step it had not sent before (not its own step count
	 * going back), having sent every durable step below it, in a run
	 * that holds a later one (ingest.c: commit), is a re-run under the
	 * name, whose later new steps are
	 * refused too (ingest.c: refuse_rerun), so that the run holds one
	 * job's snapshots. A run whose first step is later (a job that
	 * publishes from step 1000) has none: a re-run of it cannot be told
	 * from a job resumed from a checkpoint before its first step. At most
	 * RUN_RERUNS_MAX: a session noted with no conflict gives way to a new
	 * one; more re-runs than that are not noted (their steps are taken,
	 * as before). In memory, and the re-runs in the WAL ("rerun" records).
	 */
	struct run_rerun *reruns;
	uint32_t n_reruns;
	/*
	 * Per rank (of at most RUN_CLAIMS_MAX), the sessions of its last two
	 * publishers and when each last committed (monotonic): a commit from
	 * the one before the latest, within a minute, means both still
	 * publish, two publishers given the same rank= (a job restarted has
	 * its old session never back). Said once for the pair
	 * (claims_said_pair) whatever became of the steps (ingest.c: commit).
	 * In memory only.
	 */
	struct rank_claim { uint64_t cur, prev; double at_cur; } *claims;
	uint64_t n_claims;
	uint64_t claims_said_pair;	/* the two sessions last said, XORed (never 0: they differ); 0: none */
	/* a shard of step shard_refused_step was refused (any reason): no at-once refusal of it */
	int shard_refused;
	int64_t shard_refused_step;
	uint64_t bytes_pending;		/* reserved by its snapshots being assembled */
	double last_seen;		/* monotonic; 0: not heard from since the start */
	/*
	 * Unix seconds its latest durable snapshot was recorded (the WAL's
	 * "at"): a stalled alert's clock for a run known from the WAL alone.
	 * 0: unknown (records older than "at").
	 */
	double durable_wall;
	/*
	 * Monotonic: its latest snapshot made durable since the start; 0: none.
	 * A stalled alert's clock: not last_seen, which any message moves (a
	 * job killed mid-snapshot, a re-run refused at every step: a trial's
	 * stalled alert stayed quiet while nothing became durable).
	 */
	double durable_mono;
	struct run *next;
};

/* CURVE handshakes (auth.c), by outcome. */
struct auth_counters {
	uint64_t accepted;		/* ZAP admitted a listed key */
	uint64_t unknown_key;		/* ZAP refused a key not in auth.clients */
	uint64_t no_curve;		/* the client spoke another mechanism (NULL) */
	uint64_t bad_server_key;	/* the client's hello was not for our key */
	uint64_t other;			/* any other failed handshake */
};

struct counters {
	uint64_t messages, tensors, snapshots_durable, bytes_received;
	uint64_t duplicates;		/* snapshots re-sent with the same content (acked as such) */
	uint64_t duplicate_tensors;	/* tensor messages of such re-sends */
	uint64_t commits;		/* snapshots received (commit messages) */
	uint64_t dropped;		/* uncommitted snapshots given up (idle) */
	uint64_t dropped_for_room;	/* of them: to free memory.budget (make_room) */
	uint64_t conflicts;		/* re-sent durable steps refused: other content */
	uint64_t errors[WIRE_CODE_COUNT];
	uint64_t control_requests, spool_failures;
	struct auth_counters auth;
	/* since this start, never lowered (snapshots_durable is what is held: runs rm lowers it) */
	uint64_t stored;		/* snapshots made durable */
	uint64_t comparisons;		/* result batches from the compute thread */
	double compute_seconds;		/* the compute thread's time on them */
};

#define RUN_CLAIMS_MAX 4096	/* ranks whose claims a run tracks (32 bytes each) */
#define STATE_REMOVED_MAX 64	/* run names `runs rm` forgot, remembered (the oldest go) */

struct state {
	struct run *runs;
	size_t n_runs;
	struct snapshot *pending;	/* being assembled or committing */
	size_t n_pending;
	uint64_t reserved, budget;	/* bytes of tensor data held */
	struct kept_bufs kept;		/* freed tensor buffers, within the budget beside reserved */
	struct counters count;
	double started;			/* monotonic seconds */
	char *removed[STATE_REMOVED_MAX];	/* runs `runs rm` forgot, the latest last */
	size_t n_removed;
};

double now_mono(void);
/* Unix seconds: what outlives the process (records, an alert's since). */
double now_wall(void);

struct run *state_run(struct state *s, const char *name, int create);
/*
 * The run with durable snapshots whose name is nearest name (a typo of
 * it, config_suggest's measure), or NULL; of several as near, the first
 * in byte order, and *tie (when not NULL) the second, else NULL: a
 * did-you-mean names both, where the runs' order once chose one (a
 * trial's runs rm my-fx offered my-fb alone, where my-fa was as near).
 */
const char *state_run_suggest(const struct state *s, const char *name, const char **tie);
/* Removes r and what it knows (durable steps, identities); frees it. */
void state_forget_run(struct state *s, struct run *r);
/*
 * Notes that `runs rm` forgot the run of that name (live, or its record
 * replayed at a start), so that a study still naming it says so rather
 * than guess at a typo; state_removed asks.
 */
void state_note_removed(struct state *s, const char *name);
int state_removed(const struct state *s, const char *name);
int run_is_durable(const struct run *r, int64_t step);
#define RUN_SESSIONS_MAX 4096
#define RUN_RERUNS_MAX 64

/* A session that sent a run's first step again (struct run's reruns). */
struct run_rerun {
	uint64_t session;
	int64_t from;			/* the run's first step, which it sent again */
	int64_t conflict;		/* its first step refused as a conflict; RUN_NO_CONFLICT: none yet */
	int64_t sent;			/* its latest step not refused as a conflict; RUN_NO_CONFLICT: none */
	int said;			/* a later step of it was refused, logged whole (ingest.c: refuse_rerun) */
};
#define RUN_NO_CONFLICT INT64_MIN
/* Notes that a commit of r came from session (0: none given, nothing noted). */
void run_note_session(struct run *r, uint64_t session);
/* Did a commit of r come from session before (or can that not be told: 0, or too many)? */
int run_knows_session(const struct run *r, uint64_t session);
/* Notes that a commit of r from session was not refused as a conflict (0: nothing noted). */
void run_note_clean_session(struct run *r, uint64_t session);
/* Did a commit of r from session come, not refused as a conflict? 0 when that cannot be told. */
int run_clean_session(const struct run *r, uint64_t session);
/*
 * Is a conflict of r from session its own job's (its step count went
 * back), not a re-run's: a clean commit of the session before, and no
 * two jobs at once (which make any conflict the other job's). The one
 * test for the hint and for the count `runs` and `drift` say.
 */
int run_conflict_own(const struct run *r, uint64_t session);
/*
 * Notes that session's first commit of r sent its first durable step, from
 * (step 0), again (struct run's reruns); a full list gives up its first
 * entry with no conflict.
 */
void run_note_from_start(struct run *r, uint64_t session, int64_t from);
/*
 * Does a conflict at durable step of r, refused to rr's session, make it
 * a re-run (struct run's reruns)? Not once it is one; not its own step
 * count going back; only with every durable step between its latest sent
 * and step sent (none skipped: no resume), and a durable step after step
 * (a first job's history to keep).
 */
int run_rerun_conflict(const struct run *r, const struct run_rerun *rr, int64_t step);
/* session's entry in r's reruns, or NULL: its first commit of r was not of r's first step */
struct run_rerun *run_rerun_of(const struct run *r, uint64_t session);
/*
 * Whether session is one of the first n the run knew (sessions are noted
 * in order): a publisher that had committed the run by the time it knew n.
 * 1 for no session, and for n UINT32_MAX (the list was full then).
 */
int run_knew_session(const struct run *r, uint64_t session, uint32_t n);
/* A snapshot of r at step refused as a conflict at Unix seconds wall: counted, with when (struct run). */
void run_note_conflict(struct run *r, int64_t step, double wall, int own);
/*
 * Step of r was refused incomplete to its waiting ranks at Unix seconds
 * wall, for why (struct run's expired): as it happens, and replayed from
 * its "expired" record at a start. Returns the entry kept, or NULL (out of
 * memory: counted, not kept; logged).
 */
struct run_expiry *run_note_expired(struct run *r, int64_t step, const char *why, double wall);
/* The latest expiry of r kept (run_note_expired: replayed, or since), or NULL: none. */
const struct run_expiry *run_last_expiry(const struct run *r);
/*
 * run_last_expiry when it was for why too (a dead rank's job: each step
 * expires alike) and this start's log said it, else NULL.
 */
const struct run_expiry *run_expiry_again(const struct run *r, const char *why);
/* How many of r's durable steps are at or before step: those after it are r->durable[that..]. */
size_t run_durable_upto(const struct run *r, int64_t step);
/*
 * A second job's commit of r at step, beside another's (who: both,
 * peers_message), at Unix seconds wall: counted; the first kept, and 1
 * returned for it (0 for the later ones).
 */
int run_note_mixed(struct run *r, int64_t step, const char *who, double wall);
/* The identity of a durable step; NULL when unknown (an old WAL record). */
const struct snap_id *run_identity(const struct run *r, int64_t step);
/* Notes step as durable with its identity id (taken; may be NULL). */
void run_add_durable(struct run *r, int64_t step, struct snap_id *id);

/* Frees a snapshot's tensors and releases its reservation. */
void snapshot_free(struct state *s, struct snapshot *snap);
/*
 * Frees what snap holds (its tensors, their reservation, its waiters) and
 * keeps snap, linked, as it is: a snapshot refused whole stays only to
 * refuse the rest of it.
 */
void snapshot_empty(struct state *s, struct snapshot *snap);
/*
 * Whether snap counts as pending (status, /metrics): not a re-send of a
 * durable step being checked, nor one refused whole; both hold nothing.
 */
static inline int snapshot_pending(const struct snapshot *snap)
{
	return !snap->recheck && !snap->conflict;
}
/*
 * Seconds at t (monotonic) that count towards snap's expiry (limits.
 * pending_timeout): since its last message; once a rank has committed,
 * since its last new element, as ranks that wait commit again after each
 * ack timeout, and a dead rank's step would otherwise never expire.
 */
static inline double snapshot_idle(const struct snapshot *snap, double t)
{
	return t - (snap->n_waiters ? snap->last_taken : snap->last_seen);
}
/* How many of s's snapshots count as pending (snapshot_pending): status, /metrics, systemd's STATUS. */
size_t state_pending(const struct state *s);
void state_release(struct state *s);

#endif
