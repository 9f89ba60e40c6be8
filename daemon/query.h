/*
 * query.h: `drift` queries (docs/daemon.md, "Queries"). The reply to one
 * is built from a result batch that nobody changes any more, so it can be
 * built on a thread of its own: the query thread, which keeps a reply to a
 * large study (tens of thousands of tensors, megabytes of JSON) off the
 * main loop that answers ingest, status and the watchdog.
 *
 * No sockets here: the main thread takes the finished replies (query_take,
 * when query_fd is readable) and sends them to each waiting client.
 */
#ifndef WD_QUERY_H
#define WD_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "driftlog.h"
#include "workq.h"

struct result_batch;
struct wd_config_study;

/* What a drift reply is built from: nothing of the main thread's state. */
struct drift_query {
	struct result_batch *batch;	/* a reference of the query's own */
	char *glob;			/* only tensors matching it; NULL: every one */
	/* each proxy label's run, as the config said at the request; the label for round:* */
	char *proxy_runs[DRIFTLOG_MAX_PROXIES];
	/* the batch's proxy labels that the study no longer has (a reload): left out of the reply */
	unsigned char proxy_gone[DRIFTLOG_MAX_PROXIES];
	/* the study's runs at the request (candidates, then trained proxies): "complete" */
	char **runs;
	size_t n_runs;
	size_t n_candidates;		/* runs[0..n_candidates): the candidates; a batch's other ones are former */
	char *baseline;			/* the study's baseline at the request: other than the batch's, stale */
	char *silent;			/* the study's runs that sent nothing, said (study_silent); NULL: none */
	char *refused;			/* its runs' conflicts, said (study_refused); NULL: none */
	char *mixed;			/* its runs two jobs published at once, said (study_mixed); NULL: none */
	char *expired;			/* its runs' steps refused incomplete, said (study_expired); NULL: none */
	char *ahead;			/* runs past the baseline's latest step, said (study_ahead); NULL: none */
	/* no step asked, and later steps than the batch's have no candidate's rows: said; NULL: none */
	char *later;
	int64_t later_step;		/* the latest of them, with later */
	char *unaligned;		/* runs none of whose steps align, said (study_unaligned); NULL: none */
	char *stuck;			/* its runs' steps held up in intake, said (study_stuck); NULL: none */
	char *unmatched;		/* runs' tensors apart from the baseline's, said (study_unmatched); NULL: none */
	/* {RUN: STEP}, JSON: each run whose row compared another step than the batch's; NULL: none */
	char *run_steps;
	/* {RUN: WHY}, JSON: each run with no row at the step that will never have one (study_never); NULL: none */
	char *never;
	long long tolerance;		/* alignment.tolerance, said with run_steps */
	/* per runs[k]: the latest step before the batch's with its rows (same baseline), -1: none */
	int64_t *latest;
	/*
	 * per runs[k] (NULL: none): the name hashes of its tensors at its step
	 * of the batch that the baseline has in another shape, ascending
	 * (identity_apart), and how many: their layers say it ("other_shape").
	 */
	uint64_t **reshaped;
	size_t *n_reshaped;
};

/*
 * The kept batch of study at *step (the latest one when step is NULL: the
 * latest against baseline, the study's now, when there is one), or
 * NULL with why: no results for the study yet, or none at that step, with
 * the nearest steps that have some. O(results). The main thread's.
 */
struct result_batch *drift_query_find(struct result_batch *const *results, size_t n, const char *study,
				      const char *baseline, const int64_t *step, char *why, size_t whylen);

/*
 * Fills q (zeroed by the caller) for batch b of study st: a reference to
 * b, copies of glob (NULL: every tensor), of each proxy label's run and of
 * st's runs, so that the query thread reads nothing of the config.
 * 0, or -ENOMEM (q then holds what was copied; drift_query_release it).
 */
int drift_query_init(struct drift_query *q, struct result_batch *b, const struct wd_config_study *st,
		     const char *glob);
/*
 * For each run of q that q's batch has no rows of, the latest earlier step
 * of the kept results (same study and baseline) that has some (q->latest),
 * so that `drift` says where a run that lags was compared last. A batch is
 * asked with one look-up (its first tensor's row of the run: every run of
 * a batch has a row for each of the baseline's tensors), so this costs
 * O(results x runs) on the main thread, not the rows. 0, or -ENOMEM.
 */
int drift_query_find_latest(struct drift_query *q, struct result_batch *const *results, size_t n);

/* Releases q's batch reference and strings; q itself is the caller's. */
void drift_query_release(struct drift_query *q);

/*
 * The reply to q: {"v":1,"ok":true,"study","step","baseline","complete",
 * "missing":[RUN...],"candidates":{RUN:{"layers":[...],"summary":{...}}}},
 * layers as `wdrift compare --json`, and summary its summary object (the
 * summary rows of lib/drift.h) over those layers. complete: every run of
 * the study has rows at this step; missing names those that do not, and
 * "silent" (only then) says which of the study's runs sent nothing. A
 * candidate the study no longer names has "former": true. When
 * glob matches no tensor of a candidate that has some, the reply is
 * {"ok":false,"error"} saying so. malloc'd, *len its length; NULL when out
 * of memory. O(rows of the batch), and the median's sort per summary.
 */
char *drift_query_reply(const struct drift_query *q, size_t *len);

/* A control request's routing envelope: the frames before its body. */
struct query_envelope {
	size_t n;
	const void *const *data;
	const size_t *len;
};

/* A client waiting for a reply: its envelope, copied. */
struct query_waiter {
	size_t n;
	void **data;
	size_t *len;
	struct query_waiter *next;
};

/* A copy of env, for a reply sent later; NULL when out of memory. */
struct query_waiter *query_waiter_new(const struct query_envelope *env);
void query_waiter_free(struct query_waiter *w);

/* A query, waiting, being built, or done (reply set). */
struct query_job {
	struct drift_query q;
	struct query_waiter *waiters;	/* who gets the reply: one, or more with the same query */
	size_t n_waiters;
	char *reply;			/* when done: malloc'd, reply_len bytes */
	size_t reply_len;
	struct workq_item item;		/* on the query thread's queue */
};

#define QUERY_QUEUE_MAX 8	/* queries waiting for the thread; more are refused "busy" */
#define QUERY_WAITERS_MAX 64	/* clients sharing one query */

struct query;

/* Starts the thread. Returns 0 or -errno. */
int query_start(struct query **out);
/* Stops it after the query in progress; replies not yet taken are dropped. */
void query_stop(struct query **w);
/* Readable when finished replies wait for query_take. */
int query_fd(const struct query *w);

/*
 * Queues q for the client of env (copied), or adds the client to a query
 * for the same batch, tensors and proxies already waiting, being built or
 * done and not yet taken: the same request sent again (a client that
 * retried) costs nothing more. Takes q's contents on success: 0 (queued)
 * or 1 (joined); leaves them on -EBUSY (QUERY_QUEUE_MAX queries wait, or
 * QUERY_WAITERS_MAX clients share it) and -ENOMEM.
 */
int query_submit(struct query *w, struct drift_query *q, const struct query_envelope *env);
/* A finished query (reply set), or NULL; the caller sends it and frees it. */
struct query_job *query_take(struct query *w);
void query_job_free(struct query_job **j);
/* Queries waiting or being built. */
size_t query_depth(struct query *w);

#endif
