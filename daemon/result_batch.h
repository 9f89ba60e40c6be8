/*
 * result_batch.h: the results of one study at one step, in memory: what the
 * compute thread makes (compare.c), the main thread keeps for `drift`
 * queries and alerts, and the query thread reads. It owns the batch's
 * memory, its reference count and its (run, tensor) index; how a batch is
 * written to the WAL and read back is records.h's. Depends on libc,
 * common/driftlog.h (the row) and workq.h (the queue it travels on).
 */
#ifndef WD_RESULT_BATCH_H
#define WD_RESULT_BATCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "driftlog.h"
#include "workq.h"

/*
 * Shared read-only between the main thread and the query thread
 * (docs/daemon.md, "Queries"): once a batch has more than one reference
 * (result_batch_ref), nobody changes it; the main thread, the only one that
 * hands out references, copies it instead (result_batch_dup).
 */
struct result_batch {
	char *study;
	int64_t step;
	char *baseline;
	char *proxies[DRIFTLOG_MAX_PROXIES];	/* labels, as ratio[] orders them */
	size_t n_proxies;
	struct drift_row *rows;			/* strings owned by the batch */
	size_t n_rows;
	/* (run, tensor) of each tensor row: open addressing, row + 1 (0: empty) */
	uint32_t *index;
	size_t index_size;			/* a power of 2; 0: no index */
	double seconds;				/* the compute thread's time on it (0: replayed) */
	/*
	 * Computed for snapshots held before its study was (a reload's new or
	 * changed study): history, which the alert rules do not judge step by
	 * step (a renamed study's old alerts fired anew, paging); they judge
	 * its latest complete step once it is done (main.c).
	 */
	int backfill;
	/*
	 * Runs whose tensor names differ from the baseline's, each with the
	 * compute thread's sentence (name_match_say: "has none of the
	 * baseline's 8 tensors: ... a prefix 'module.' ..."), for `drift`'s
	 * unmatched line, which has the names' hashes only (a trial's empty
	 * table had the prefix in the log alone); kept in the WAL's result
	 * record (records.h), and told to the run's job (ingest_tell_names).
	 */
	struct result_note {
		char *run, *text;
	} *notes;
	size_t n_notes;
	atomic_int refs;			/* references beyond the first */
	struct workq_item item;			/* on the compute thread's way to the main thread */
};

/* Keeps text as run's note in b (which must not be shared); -ENOMEM, or 0. */
int result_batch_note(struct result_batch *b, const char *run, const char *text);
/* run's note in b, or NULL. */
const char *result_batch_note_of(const struct result_batch *b, const char *run);
/* Drops a reference; the last one frees the batch. */
void result_batch_free(struct result_batch **b);
/* Another reference to b, for another thread to read it: b is read-only from now on. */
struct result_batch *result_batch_ref(struct result_batch *b);
/* Whether another reference than the caller's exists (so b must not change). */
int result_batch_shared(const struct result_batch *b);
/* A private copy of b, indexed when b was; NULL when out of memory. */
struct result_batch *result_batch_dup(const struct result_batch *b);
/*
 * Takes run's rows out of b (which must not be shared); 1 when nothing of b
 * is left (run was its baseline). The index, if any, is rebuilt.
 */
int result_batch_forget(struct result_batch *b, const char *run);
/*
 * Keeps old's rows beside b's, when b computes the same study and step
 * again against the same baseline: the rows of each run that b has none
 * of and that superseded[0..n_superseded) does not name are copied into b
 * (which must not be shared), their ratios under b's proxy labels. The
 * caller names as superseded a run the study names whose steps no longer
 * align to this step (one now belongs to another baseline step): b left
 * it out on purpose. Kept: a candidate a reload took out of the study
 * (former), and a run still named whose aligned snapshot b lacks for
 * another reason (retention removed its file; a record replayed at a
 * start under a later config). Rows of another baseline are not kept:
 * they are stale, and the drift log keeps them. O(rows) when nothing is
 * kept (rows come run by run); the index is made again when something
 * is. Returns 0, or -1 out of memory (b as it was).
 */
#define RESULT_BATCH_MAX_RUNS 512	/* runs of one batch looked at: a study has at most 256 + 64 */
int result_batch_keep_runs(struct result_batch *b, const struct result_batch *old,
			   const char *const *superseded, size_t n_superseded);
/* How many rows result_batch_keep_runs would copy into b: 0, the usual case, costs no copy of b. */
size_t result_batch_keeps(const struct result_batch *b, const struct result_batch *old,
			  const char *const *superseded, size_t n_superseded);
/*
 * Orders the ratios of rows[0..n), which follow the proxy labels
 * from[0..n_from), as to[0..n_to) are: each under its own label, NaN for a
 * label from lacks. The labels are matched once, not per row.
 */
void drift_rows_relabel(struct drift_row *rows, size_t n, char *const *from, size_t n_from,
			char *const *to, size_t n_to);
/*
 * Indexes b's tensor rows by (run, tensor), for result_batch_find; O(rows).
 * Done before b is shared. Without memory b stays unindexed, and
 * result_batch_find scans.
 */
void result_batch_index(struct result_batch *b);
/*
 * Has b rows of run? One look-up, by the tensor of b's first tensor row:
 * every run of a batch has a row for each of the baseline's tensors.
 */
int result_batch_has_run(const struct result_batch *b, const char *run);
/* The tensor row of (run, tensor) in b, or NULL; O(1) when b is indexed. */
const struct drift_row *result_batch_find(const struct result_batch *b, const char *run,
					  const char *tensor);

#endif
