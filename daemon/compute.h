/*
 * compute.h: the compute thread (docs/daemon.md). It aligns durable
 * snapshots with the studies by step, loads what a comparison needs from
 * the spool, runs the engine, writes the results to the write-ahead log
 * (fsync'd) and then to the study's drift log, and hands them to the main
 * thread for events and queries. It owns the engine and the drift logs.
 */
#ifndef WD_COMPUTE_H
#define WD_COMPUTE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "driftlog.h"

struct compute;
struct wal;
struct wd_engine;

/*
 * The results of one study at one step: every run compared there.
 *
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
	atomic_int refs;			/* references beyond the first */
	struct result_batch *next;
};

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
/* A "result" WAL record back into a batch; NULL if it is not one. */
struct result_batch *result_batch_decode(const char *payload, size_t len);
/*
 * Indexes b's tensor rows by (run, tensor), for result_batch_find; O(rows).
 * Done before b is shared. Without memory b stays unindexed, and
 * result_batch_find scans.
 */
void result_batch_index(struct result_batch *b);
/* The tensor row of (run, tensor) in b, or NULL; O(1) when b is indexed. */
const struct drift_row *result_batch_find(const struct result_batch *b, const char *run,
					  const char *tensor);

/*
 * Starts the thread. replayed: result records read from the WAL at
 * start-up (the payloads, in order), used to rebuild drift logs that do not
 * open; the thread takes them. Returns 0 or -errno.
 */
int compute_start(const char *storage_dir, struct wal *wal, struct wd_engine *engine,
		  const struct wd_config *cfg, char **replayed, size_t n_replayed,
		  struct compute **out);
/* A new config: studies are copied; takes effect for the next snapshot. */
void compute_set_config(struct compute *c, const struct wd_config *cfg);
/* Run's snapshot at step is durable: compare what it completes. */
void compute_submit(struct compute *c, const char *run, int64_t step);
/* Start-up: run's snapshot at step is durable and its results are logged. */
void compute_known(struct compute *c, const char *run, int64_t step);
/*
 * runs rm: forgets run (the "forget" WAL record, its spool files, its rows
 * in the results and the drift logs, which are rebuilt). Waits for the
 * comparison in progress, then does it before anything queued; the run's
 * queued comparisons are dropped. Returns 0 or -errno (the WAL failed:
 * nothing was forgotten); results: result records changed or removed;
 * files: spool files removed (-errno when its directory could not be read).
 */
int compute_forget(struct compute *c, const char *run, size_t *results, long *files);
/* Readable when result batches wait. */
int compute_fd(const struct compute *c);
struct result_batch *compute_take(struct compute *c);
size_t compute_depth(struct compute *c);
/*
 * Stops after the comparison in progress; what is still queued is dropped,
 * and recomputed from the write-ahead log at the next start.
 */
void compute_stop(struct compute **c);

/* The study of a result payload and whether it is one ("t": "result"). */
int result_record_study(const char *payload, size_t len, char *study, size_t size, int64_t *step);

#endif
