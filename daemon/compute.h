/*
 * compute.h: the compute thread (docs/daemon.md). It aligns durable
 * snapshots with the studies by step, loads what a comparison needs from
 * the spool, runs the engine, writes the results to the write-ahead log
 * (fsync'd) and then to the study's drift log, and hands them to the main
 * thread for events and queries. It owns the engine and the drift logs.
 */
#ifndef WD_COMPUTE_H
#define WD_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "store.h"

struct compute;
struct wal;
struct wd_engine;

/* The results of one study at one step: every run compared there. */
struct result_batch {
	char *study;
	int64_t step;
	char *baseline;
	char *proxies[STORE_MAX_PROXIES];	/* labels, as ratio[] orders them */
	size_t n_proxies;
	struct drift_row *rows;			/* strings owned by the batch */
	size_t n_rows;
	struct result_batch *next;
};

void result_batch_free(struct result_batch **b);
/* Takes run's rows out of b; 1 when nothing of b is left (run was its baseline). */
int result_batch_forget(struct result_batch *b, const char *run);
/* A "result" WAL record back into a batch; NULL if it is not one. */
struct result_batch *result_batch_decode(const char *payload, size_t len);

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
