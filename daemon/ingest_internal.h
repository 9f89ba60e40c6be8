/*
 * ingest_internal.h: what the four parts of the ingest side share, and
 * nothing outside them includes (ingest.h is the daemon's interface):
 *   ingest.c        the messages: hello, tensor, commit, ping; runs, pending snapshots
 *   ingest_shard.c  a shard into its tensor, or checked against a durable step's identity
 *   ingest_room.c   memory.budget: reservations, giving way, expiry and drops
 *   ingest_reply.c  replies, the waiters of a snapshot, and the spool's outcome
 * All of it runs on the main thread, on struct state.
 */
#ifndef WD_INGEST_INTERNAL_H
#define WD_INGEST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ingest.h"

/* ingest_reply.c */

/* Sends h to the sender of m. */
void ingest_reply(struct ingest *ix, const struct frames *m, const struct wire_header *h);
/* Logs a refusal of a message breaking the protocol, a few a minute per code (else debug). */
void ingest_say_refusal(struct ingest *ix, const struct wire_header *in, const struct wire_error *err);
/* Sends an error reply echoing what the header in had (NULL: nothing); counts it. */
void ingest_reply_error(struct ingest *ix, const struct frames *m, const struct wire_header *in,
			const struct wire_error *err);
/* The same from its parts: the error code, the field it names, and why. */
void ingest_fail(struct ingest *ix, const struct frames *m, const struct wire_header *in,
		 enum wire_code code, const char *field, const char *reason);
/* Adds the sender of m to snap's waiters (once); 0, or -1 when there are too many. */
int ingest_add_waiter(struct snapshot *snap, const struct frames *m);
/* Sends every waiter of snap the error code (field, reason). */
void ingest_fail_waiters(struct ingest *ix, const struct snapshot *snap, enum wire_code code,
			 const char *field, const char *reason);

/* ingest_shard.c */

/*
 * Adds one shard to snap (received, checked). Returns 0, or -1 after the
 * error reply: the shard was not taken (only out of memory can leave behind
 * a tensor it created, reserved until its snapshot ends).
 */
int ingest_add_shard(struct ingest *ix, const struct frames *m, const struct wire_header *h,
		     struct run *r, struct snapshot *snap);
/* The frames of a reply to one waiter: its routing id only. */
#define WAITER_FRAMES(w) { 1, (const void *const[]){ (w)->id }, (const size_t[]){ (w)->len } }
/* An ack's notice: the commits of run's step said two counts of ranks, said and other. */
void ingest_ranks_notice(char *buf, size_t len, const char *run, int64_t step, uint64_t said, uint64_t other);
/*
 * How long a re-send of a durable step being checked lasts without a
 * message (with ranks waiting: without a new element). Under the
 * library's default ack timeout (30 s), so that its waiting ranks hear
 * the answer before they give up their sockets.
 */
#define RECHECK_SECONDS 15.0
/*
 * The ranks whose commits wait on snap, a sharded re-send of a durable
 * step (identity id, or NULL), hear "duplicate": it is whole and the same
 * (whole 1), or its parts did not all come within RECHECK_SECONDS (0,
 * logged: what came was checked).
 */
void ingest_recheck_settle(struct ingest *ix, struct snapshot *snap, const struct snap_id *id, int whole);
/* A shard of a durable step whose identity is id, in the recheck snapshot snap: checked, never stored. */
void ingest_recheck_shard(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			  struct snapshot *snap, const struct snap_id *id);
/*
 * A conflict's reason, into why (len at least WIRE_REASON_MAX + 1): "run
 * 'NAME' step N is durable with other content: WHAT (HINT)", what clipped
 * so that the hint, which names the ways out of a re-run under a used
 * name (or, for a run two jobs publish at once, says that), always fits
 * in the reply's reason. m is the message refused: when no other job
 * publishes the run (ix->publishers_besides), the job that stored the step
 * has gone, and the advice is for this one alone. session is the sender's
 * (0: not said): one whose commit of a new step of the run was taken is the same job
 * sending a step it passed, whose step count went back.
 */
void ingest_conflict_reason(struct ingest *ix, const struct frames *m, char *why, size_t len,
			    const struct run *r, int64_t step, uint64_t session, const char *what);

/*
 * The reason a new step of a re-run is refused (rr: its session sent r's
 * step 0 again and had a conflict; ingest.c): "run 'NAME' step N: a
 * re-run: it sent step F again and had step C refused as a conflict
 * (HINT)", clipped as ingest_conflict_reason's, with a hint of its own.
 */
void ingest_rerun_reason(struct ingest *ix, const struct frames *m, char *why, size_t len,
			 const struct run *r, int64_t step, const struct run_rerun *rr);

/*
 * A snapshot of r at step refused as a conflict: counted (status, runs)
 * and logged. The log has why whole (its way out) for a run's first, and
 * again 10 minutes on; in between, one short line for each step, with
 * what differs, 10 a minute at most (a re-run refused at every step).
 * whole: why whole now, whatever came before (a re-run's first later
 * step: a way out of its own).
 */
void ingest_note_conflict(struct ingest *ix, struct run *r, int64_t step, uint64_t session, const char *why,
			  const char *what, int whole);

/* A durable step differs from what is sent again (what): the conflict reply, remembered in snap. */
void ingest_refuse_content(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			   struct snapshot *snap, const char *field, const char *what);

/* ingest_room.c */

/* snap took bytes of new elements at t (monotonic seconds): what keeps it from giving way. */
void ingest_note_taken(struct snapshot *snap, uint64_t bytes, double t);
/*
 * Makes room for need more bytes of run r, dropping stalled snapshots
 * other than keep; returns whether it fits (else: ingest_refuse_room).
 */
int ingest_make_room(struct ingest *ix, struct run *r, const struct snapshot *keep, uint64_t need);
/* The over_window refusal of m: names the limit that is full, the budget or r's window. */
void ingest_refuse_room(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			struct run *r, uint64_t need);
/* The bytes a tensor named name in n_ranges pieces holds besides its elements. */
uint64_t ingest_tensor_overhead(const char *name, size_t n_ranges);
/* Reserves t's overhead, now bytes in all, for t in snap of run r. */
void ingest_hold_overhead(struct state *s, struct run *r, struct snapshot *snap, struct tensor_buf *t,
			  uint64_t now);
/* Takes snap out of the pending list (it is not freed). */
void ingest_unlink_snapshot(struct state *s, struct snapshot *snap);
/* Unlinks and frees snap; forgets its run when that holds nothing else. */
void ingest_drop_snapshot(struct ingest *ix, struct snapshot *snap);
/*
 * Remembers that snap's (run, step) was refused to its waiting ranks at t for why
 * (it expired, or every rank committed and it is not whole): a re-send of
 * it is refused at once for INGEST_EXPIRED_SECONDS; the oldest slot gives way.
 * The run keeps it too (run_note_expired), for runs and drift, and the
 * WAL (an "expired" record, ingest_record), for them after a restart.
 */
void ingest_note_expired(struct ingest *ix, const struct snapshot *snap, double t, const char *why);
/* (run, step) when it expired waiting for ranks within INGEST_EXPIRED_SECONDS; else NULL. */
struct expired_step *ingest_find_expired(struct ingest *ix, const char *run, int64_t step);
/* The code a snapshot refused whole says again to its later shards and commit. */
int ingest_refused_code(const struct snapshot *snap);
/* Notes a session (nonzero) that sent snap a shard (state.h: told). */
void ingest_note_told(struct snapshot *snap, uint64_t session);
/* Whether session sent snap a shard, or more sessions did than were noted. */
int ingest_was_told(const struct snapshot *snap, uint64_t session);

#endif
