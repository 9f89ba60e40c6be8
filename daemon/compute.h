/*
 * compute.h: the compute thread (docs/daemon.md). It aligns durable
 * snapshots with the studies by step (spool_index.h), loads what a
 * comparison needs from the spool, runs the engine (compare.h), writes the
 * results to the write-ahead log (fsync'd) and then to the study's drift
 * log, applies retention, and hands the results to the main thread for
 * events and queries. It owns the engine's use, the drift logs and the
 * spool index.
 */
#ifndef WD_COMPUTE_H
#define WD_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "result_batch.h"

struct compute;
struct wal;
struct wd_engine;

/*
 * Starts the thread. replayed: result records read from the WAL at
 * start-up (the payloads, in order), used to rebuild drift logs that do not
 * open; the thread takes them. Returns 0 or -errno.
 */
int compute_start(const char *storage_dir, struct wal *wal, struct wd_engine *engine,
		  const struct wd_config *cfg, char **replayed, size_t n_replayed,
		  struct compute **out);
/*
 * A new config: studies are copied; takes effect for the next snapshot. A
 * study it adds, or whose baseline, candidates or proxies it changes, is
 * first compared at each durable step of its baseline held where one of its
 * runs has no row yet, oldest first (logged: one line per study).
 */
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
/* Comparisons queued or in progress. */
size_t compute_depth(struct compute *c);

/* The spool's files and bytes after the compute thread's last job, and what retention dropped since the start. */
struct spool_usage {
	uint64_t bytes, files, dropped;
};
void compute_spool(struct compute *c, struct spool_usage *u);
/*
 * Stops after the comparison in progress; what is still queued is dropped,
 * and recomputed from the write-ahead log at the next start.
 */
void compute_stop(struct compute **c);

#endif
