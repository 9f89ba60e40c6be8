/*
 * ingest.h: the ingest side of protocol v1 (docs/protocol.md), on frames
 * the server loop received: decode, validate, reserve memory, assemble
 * shards, and hand a committed snapshot to the spool. Replies go back
 * through the sink. No sockets here: zmq.h stays in main.c. Written in
 * four parts that share ingest_internal.h (which names what each owns).
 */
#ifndef WD_INGEST_H
#define WD_INGEST_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "log_limit.h"
#include "state.h"

struct spool;

/* One message as received: frame 0 the peer's routing id, then the rest. */
struct frames {
	size_t n;
	const void *const *data;
	const size_t *len;
};

/*
 * Where replies go: the server sends body to the peer with this id, after
 * an empty frame when envelope is 1 (the delimiter a REQ socket expects).
 */
struct reply_sink {
	void (*send)(void *ctx, const void *id, size_t id_len, int envelope, const char *body);
	void *ctx;
};

/*
 * A step that expired while ranks waited for the others (ingest_expire). A
 * rank whose socket its ack timeout had closed missed the refusal; its
 * re-send would start the step afresh and wait a whole pending_timeout
 * again, and again, its later snapshots queued behind it. For a while,
 * such a re-send that would wait is refused at once, with the same reason.
 */
struct expired_step {
	char run[NAME_MAX + 1];		/* "": a free slot */
	int64_t step;
	double at;			/* monotonic seconds */
	int said;			/* a re-send was logged */
	char why[512];
	int said_new;			/* a new job's commit of it was logged */
	/*
	 * How many sessions the run knew when it was refused (run_knew_session):
	 * the refused job's are among them, a job restarted since is not, even
	 * once it has committed earlier steps from its checkpoint.
	 */
	uint32_t sessions_then;
};

#define INGEST_EXPIRED_MAX 16	/* remembered at once; the oldest goes first */
/*
 * How long each is remembered: longer than a waiting publisher is away
 * between two tries (its backoff, at most 5 s and a quarter, then its hello
 * and shards), short beside a restarted job.
 */
#define INGEST_EXPIRED_SECONDS 30.0

struct ingest {
	struct state *st;
	const struct wd_config *cfg;
	struct spool *spool;
	struct reply_sink sink;
	uint64_t window;	/* bytes a run may hold in flight */
	/* a snapshot became durable (after its ack): the compute stage's cue */
	void (*on_durable)(void *ctx, const char *run, int64_t step);
	void *durable_ctx;
	/*
	 * Appends a record (records.h) to the WAL: what runs and drift say of
	 * a run beyond its snapshots (a step expired, a conflict, two jobs at
	 * once), so that they still say it after a restart. 0 or -errno;
	 * NULL: nothing is recorded.
	 */
	int (*to_wal)(void *ctx, const char *payload);
	void *wal_ctx;
	/*
	 * How many other jobs' connections publish run besides the one of
	 * routing id rid (peers_others), for a conflict's advice; NULL: not
	 * known, and the advice covers both cases.
	 */
	size_t (*publishers_besides)(void *ctx, const char *run, const void *rid, size_t rid_len);
	void *publishers_ctx;
	/*
	 * Calls fn(fctx, rid, rid_len) for each connection publishing run now
	 * not sent the notice of hash told yet (peers_each_publisher), with
	 * publishers_ctx; how many. NULL: none is known, and nothing is told
	 * to jobs unasked.
	 */
	size_t (*each_publisher)(void *ctx, const char *run, uint64_t told,
				 void (*fn)(void *fctx, const void *rid, size_t rid_len), void *fctx);
	double drop_said;	/* when a drop to free memory was last logged */
	uint64_t drop_unsaid;	/* drops since, not logged */
	double fail_said;	/* when a spool failure was last logged */
	uint64_t fail_unsaid;	/* failures since, not logged */
	struct expired_step expired[INGEST_EXPIRED_MAX];
	/* the run last told its snapshot is over its window: said once (a run holding nothing is forgotten) */
	char too_large_said[NAME_MAX + 1];
	/* the run last said to belong to no study, for the same reason; a reload clears it */
	char no_study_said[NAME_MAX + 1];
	/* a publisher's bad messages, said to the operator: a few a minute for each code */
	struct log_limit refused[WIRE_CODE_COUNT];
	int conflict_replied;	/* the message being handled got a conflict reply */
};

/*
 * What a message was, for peers.c: its type (-1: not parsed;
 * INGEST_SEEN_REQUEST: a control client's request, answered, after which
 * its disconnect is no news), run and step, and whether it was refused as
 * a conflict (a re-run under a used name, most often: runs rm tells such
 * a publisher from the job whose snapshots it would delete).
 */
#define INGEST_SEEN_REQUEST (-2)
struct ingest_seen {
	int type;
	int64_t step;
	char run[NAME_MAX + 1];	/* whole: a longer name is refused */
	int conflict;
	uint64_t session, ranks;	/* a commit's (wire.h); 0 when absent */
	int64_t rank;			/* a commit's; -1 when absent */
};

void ingest_handle(struct ingest *ix, const struct frames *m, struct ingest_seen *seen);

/*
 * The step of run that waits for rank (of ranks) now: the lowest pending
 * snapshot of it that other ranks committed, giving their ranks, and rank
 * did not; -1 when none does. The caller says that rank's death (peers.c),
 * so that step's lag is not said besides (ingest_lag_tick); the ranks that
 * committed the step are told here, in an unasked pong's notice.
 */
int64_t ingest_waits_for_rank(struct ingest *ix, const char *run, uint64_t rank, uint64_t ranks);

/*
 * Says, once per snapshot, ranks that have committed nothing of a step
 * that others committed INGEST_LAG_SECONDS ago (half of timeout, the
 * limits.pending_timeout, when that is shorter), no element of which has
 * come for as long: a rank that never started or died before it
 * connected has no connection whose close peers.c could say, and its step
 * was silent until it expired (a trial's). Not while death_coming(ctx,
 * snap): a rank it lacks closed its connection, and peers_tick says that
 * instead, with the process; nor for a rank whose death it said
 * (ingest_waits_for_rank), at any later step, until that rank commits.
 */
#define INGEST_LAG_SECONDS 60.0
/* The lag threshold for a limits.pending_timeout of timeout s: INGEST_LAG_SECONDS, or half of timeout. */
static inline double ingest_lag_after(double timeout)
{
	return timeout / 2 < INGEST_LAG_SECONDS ? timeout / 2 : INGEST_LAG_SECONDS;
}
typedef int ingest_death_fn(void *ctx, const struct snapshot *snap);
void ingest_lag_tick(struct ingest *ix, double timeout, ingest_death_fn *death_coming, void *ctx);

/*
 * The spool made snap durable (err 0) or failed with -errno err: ack, or an
 * error that says whether a retry can help; then free it.
 */
void ingest_spooled(struct ingest *ix, struct snapshot *snap, int err, const char *why);

/* Drops snapshots idle longer than timeout seconds; returns how many. */
size_t ingest_expire(struct ingest *ix, double timeout);

/* Says the refusals held back by the log's limit, once their minute is over. */
void ingest_refusals_tick(struct ingest *ix);

/*
 * Whether run belongs to no study of cfg: then out says so, with the
 * studies' runs and the nearest name (a typo, often), for the log, the
 * publisher's welcome and `wdrift runs`. 1 then, else 0.
 */
int ingest_no_study(const struct wd_config *cfg, struct state *st, const char *run, char *out, size_t size);

/* Forgets the expired steps of run (`wdrift runs rm`): a re-send starts afresh. */
void ingest_forget_expired(struct ingest *ix, const char *run);

/*
 * A step's results (main thread, as they come): each run whose tensor
 * names differ from the study's baseline's (the batch's notes, a
 * "module." prefix) is told so in its job, an unasked pong's notice to
 * each of its connections open now: each connection once per study and
 * change of what differs, and again after the names matched; the compute
 * thread finds it after the snapshot was acked, so the job heard of it
 * only through `drift` or the log (a trial's). A backfill's history, and
 * a step older than the latest seen of the run in the study (a late
 * proxy's, computed again), tell nothing.
 */
struct result_batch;
void ingest_tell_names(struct ingest *ix, const struct result_batch *b);

/*
 * Is snap complete: every tensor whole, and as many as want? 1, or 0 with
 * why naming the first tensor that lacks elements (how many it has, and
 * the ranges it lacks). ingest_shard.c; status says it of each pending one.
 */
int ingest_snapshot_complete(const struct snapshot *snap, uint64_t want, char *why, size_t len);
/*
 * What an incomplete snap lacks, as its waiting ranks are told it: the
 * first tensor that lacks elements and the ranges (why's part after "commit
 * says N tensors, M complete: "). Into buf; returns where in buf it starts.
 */
const char *ingest_snapshot_lacks(const struct snapshot *snap, char *buf, size_t len);

/*
 * payload (a record, malloc'd; NULL when out of memory: said) to the WAL
 * through ix->to_wal, and freed; a failure is logged, naming what (a
 * "run 'fa' step 8's expiry"), which runs and drift then say only until
 * the daemon stops.
 */
void ingest_record(struct ingest *ix, char *payload, const char *what);

#endif
